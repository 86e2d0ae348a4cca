"""What ``veriloop --help`` says: the introduction, the commands by group with a line each, the epilogue.

Kept apart from ``veriloop.cli`` (which parses and runs) so that the text a newcomer reads is in one place.
"""

from __future__ import annotations

INTRO = """\
veriloop trains language models to reason with rewards a program can check: a verifier grades
each answer (a process reward, each step), and GRPO and its family learn from the grades.  Its
evaluation says what training changed: held-out accuracy, pass@k, right answers by wrong steps.

start with:
  veriloop demo                     the shipped base trained with GRPO (outcome and process rewards)
                                    beside an SFT control, evaluated before and after, in one table
  veriloop train                    train a policy (GRPO unless --algo; `veriloop algos` lists them)
  veriloop eval --policy RUN/final  evaluate a policy on held-out problems
"""

# The commands, by group, with what each does: the one list of them.  The parser is built from it in this order
# (veriloop.cli._HANDLERS gives each its parser and its runner, and must name the same commands), the top-level
# help lists them from here, each command's parser takes its line as its help, and docs/reference/commands.md is
# generated from the parser (scripts/gen_cli_reference.py); README's tour is checked against it.
GROUPS = {
    "train": "train",
    "evaluate": "evaluate",
    "search": "search (test-time compute)",
    "verifiers": "verifiers and reward models",
    "tools": "tools",
}
COMMANDS = {
    "demo": ("train", "evaluate the shipped base, train it with GRPO, evaluate again, print the table"),
    "train": ("train", "train a policy with any recipe (--algo, default grpo); resumable run directory"),
    "sft": (
        "train",
        "supervised fine-tuning on the task's teacher traces: the sft recipe from a new built-in "
        "model (makes the base)",
    ),
    "pipeline": (
        "train",
        "the R1 recipe: cold start, RL, rejection sampling, SFT from the base, RL again (or "
        "R1-Zero); one run directory per stage, resumable",
    ),
    "algos": ("train", "list the training recipes (--algo NAME) and what each sets"),
    "eval": ("evaluate", "held-out evaluation: greedy/sampled accuracy, pass@k, format, process, wrong steps"),
    "report": (
        "evaluate",
        "the run browser: report.html (curves, rollouts, spot-check, search) for a run "
        "directory, or --serve it on 127.0.0.1 for a long run",
    ),
    "compare": ("evaluate", "several runs' curves overlaid and their config differences: compare.html"),
    "export": ("train", "a checkpoint's full model as a Hugging Face directory (from an fsdp2 run's shards)"),
    "search": ("search", "test-time strategies at several budgets: summary.json, table, plot"),
    "allocate": (
        "search",
        "compute-optimal allocation: difficulty bins and a strategy per bin chosen on validation, applied to held-out",
    ),
    "revision-pairs": ("search", "wrong -> right demonstrations (nearest by edit distance) for a revision model"),
    "verifiers": ("verifiers", "list the registered verifiers"),
    "verify": ("verifiers", "grade a JSONL file of {completion, reference} rows with a verifier"),
    "audit": ("verifiers", "false accepts and false rejects of a verifier, by part and family"),
    "prm": ("verifiers", "process reward models: label steps, train, score (veriloop prm label|train|score)"),
    "rm": (
        "verifiers",
        "preference reward models (Bradley-Terry): make pairs, train, score (veriloop rm pairs|train|score)",
    ),
    "judge": (
        "verifiers",
        "model-based judges: verdict rows from a rule, train a judge, score rows (veriloop judge data|train|score)",
    ),
    "doctor": (
        "tools",
        "what this machine offers veriloop (Python, torch, GPU, the base, disk, Ray, vLLM, peft, the "
        "code sandbox) and what a command would miss; exit 3 if a required one is missing",
    ),
    "completion": ("tools", "print a shell completion script: source <(veriloop completion bash)"),
}

USAGE = "veriloop [-h] [--version] [-q] [-v] [--log_level LEVEL] [--log_every N] [--plugin MODULE] COMMAND ..."
EPILOG = """\
Every command takes --config FILE.yaml and one --section.field flag per option; `veriloop COMMAND
--help` lists them with their defaults.  On a terminal each stage shows a progress bar; off one,
plain lines.  A run's full log is in its directory (train.log, demo.log, ...).
Exit status: 0 done; 2 wrong input, said in one line; 1 a bug in veriloop, with its traceback;
3 `veriloop doctor` found a required part missing; 4 a training run stopped on a NaN or an
infinity (its step and tensor named); 130 interrupted.
"""


def _listing(width: int = 96) -> str:
    """The commands, by group, as the top-level help shows them (each line within ``width`` columns)."""
    import textwrap

    column = max(map(len, COMMANDS)) + 4
    lines = []
    for group, title in GROUPS.items():
        lines.append(f"\n{title}:")
        for name, (in_group, summary) in COMMANDS.items():
            if in_group == group:
                text = textwrap.wrap(summary, width - column)
                lines.append(f"  {name:<{column - 2}}{text[0]}")
                lines += [" " * column + more for more in text[1:]]
    return "\n".join(lines)
