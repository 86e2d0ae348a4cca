"""The demo's table over several seeds: mean and spread of every column, the time of each seed, and its lesson.

    python benchmarks/demo_seeds.py [--seeds 0,1,2] [--out runs/bench-demo] [--threads 0] [--set KEY=VALUE ...]
                                    [--json FILE] [--quick]

Runs ``veriloop demo`` (defaults: base and teacher evaluation, GRPO on the outcome reward, the continued-SFT
control for the same wall time, GRPO on the process reward) once per seed (``train.seed``: prompts, sampling,
mini-batch order and the control's data order), each in ``OUT/seed-S``, then prints the demo's table with
``mean ± sd`` over the seeds, each seed's wall time and whether each seed shows the demo's lesson:

* the base's held-out greedy accuracy is in [0.30, 0.75] (there is something to learn, and something learnt);
* GRPO ends at least 0.20 above the base, above the teacher and above the continued-SFT control;
* the process-reward run's rate of right answers with wrong steps is at most half the outcome run's.

A seed whose directory already holds a finished demo is read instead of run again, so seeds can run in separate
processes (``--seeds 1`` and ``--seeds 2`` side by side, then ``--seeds 0,1,2``); the seconds are then those the
demo recorded when it ran.  The base and the teacher do not depend on the seed.  The stamped JSON result
(``--json``) is what ``make results-pages`` renders into ``docs/results/demo.md``, ``docs/results/demo.svg`` and the
README's table (``render``, ``figures``, ``blocks``) once it is committed under ``docs/results/demo_seeds/``.
``--quick`` runs one seed of a demo cut to a few steps and problems (a smoke test: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, link, mean_sd, parse_seeds, result_args, save, scratch, silence_hub_progress, svg  # noqa: E402

ROWS = [
    ("greedy_accuracy", "greedy accuracy"),
    ("pass@8", "pass@8 (T = 1, unbiased)"),
    ("sampled_accuracy", "sampled accuracy (T = 1)"),
    ("process_rate", "process-correct rate"),
    ("wrong_steps_rate", "right answer, wrong steps"),
    ("format_rate", "format rate"),
]
COLUMNS = [
    ("base", "base"),
    ("grpo", "GRPO, outcome reward"),
    ("sft-control", "continued SFT (control)"),
    ("grpo-process", "GRPO, process reward"),
]
TEACHER = {"greedy_accuracy": "accuracy", "process_rate": "process_rate", "wrong_steps_rate": "wrong_steps_rate"}
# --quick: every phase of the demo, each cut to a few steps and problems
QUICK = {
    "train.steps": "2",
    "train.rollout.prompts_per_step": "4",
    "train.rollout.group_size": "4",
    "train.task.arithmetic.heldout_size": "16",
    "eval.n_samples": "2",
}
BASE_RANGE, GRPO_GAIN, PROCESS_SHARE = (0.30, 0.75), 0.20, 0.5


def lesson(evaluation: dict) -> dict[str, bool]:
    """Whether one seed's evaluation (``eval.json``) shows each part of the demo's lesson (the module docstring)."""
    base, grpo = evaluation["base"]["greedy_accuracy"], evaluation["grpo"]["greedy_accuracy"]
    checks = {
        "base in [0.30, 0.75]": BASE_RANGE[0] <= base <= BASE_RANGE[1],
        "GRPO >= base + 0.20": grpo >= base + GRPO_GAIN - 1e-9,
        "GRPO > teacher": grpo > evaluation["teacher"]["accuracy"],
    }
    if "sft-control" in evaluation:
        checks["GRPO > SFT control"] = grpo > evaluation["sft-control"]["greedy_accuracy"]
    if "grpo-process" in evaluation:
        outcome, process = evaluation["grpo"]["wrong_steps_rate"], evaluation["grpo-process"]["wrong_steps_rate"]
        checks["process wrong steps <= half the outcome run's"] = process <= PROCESS_SHARE * outcome + 1e-9
    return checks


def _cell(evals: list[dict], column: str, key: str) -> list[float | None]:
    return [e[column]["pass_at"].get("8") if key == "pass@8" else e[column].get(key) for e in evals if column in e]


def table(result: dict) -> list[str]:
    """The demo's table, ``mean ± sd`` over the result's seeds, as Markdown lines."""
    evals = result["eval"]
    lines = [
        f"| held-out ({len(result['seeds'])} seed{'s' if len(result['seeds']) > 1 else ''}) | "
        + " | ".join(c for _, c in COLUMNS)
        + " | teacher |",
        "|---|" + "---:|" * (len(COLUMNS) + 1),
    ]
    for key, label in ROWS:
        cells = [fmt(_cell(evals, col, key)) for col, _ in COLUMNS]
        teacher = evals[0]["teacher"].get(TEACHER.get(key, ""))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {'' if teacher is None else format(teacher, '.3f')} |")
    return lines


def _seconds(result: dict) -> str:
    return fmt([s["total_seconds"] for s in result["summaries"]], 0)


# ------------------------------------------------------------------------------------- what make results-pages renders

PAGE = "demo"


def render(results: list[dict]) -> str:
    """``docs/results/demo.md``: every committed result, latest first, each with its table, seeds and lesson."""
    lines = [
        "# The demo over seeds",
        "",
        "`veriloop demo` once per seed, by `python benchmarks/demo_seeds.py` (each result's command below): the "
        "held-out table with mean ± sd over the seeds, each seed's wall time, and whether each seed shows the "
        "demo's lesson (the base in 0.30-0.75 held-out greedy accuracy; GRPO at least 0.20 above it, above the "
        "teacher and above the continued-SFT control of equal wall time; the process-reward run's rate of right "
        "answers with wrong steps at most half the outcome run's). Held-out problems are read once per run.",
        "",
    ]
    for result in reversed(results):
        st = result["stamp"]
        lines += [
            f"## Commit `{st['commit']}`, {st['date']}",
            "",
            f"`{st['command']}` on {st['machine']}; "
            f"options set: {', '.join(f'`{k}={v}`' for k, v in result['options'].items()) or 'none (defaults)'}.",
            "",
            *table(result),
            "",
            "| seed | wall time (s) | " + " | ".join(lesson(result["eval"][0])) + " |",
            "|---:|---:|" + "---|" * len(lesson(result["eval"][0])),
        ]
        for seed, summary, evaluation in zip(result["seeds"], result["summaries"], result["eval"]):
            marks = " | ".join("yes" if ok else "**no**" for ok in lesson(evaluation).values())
            lines.append(f"| {seed} | {summary['total_seconds']:.0f} | {marks} |")
        lines += ["", f"Wall time per demo: {_seconds(result)} s (in the process that ran it, after its start).", ""]
        lines += [
            f"- seed {seed}: "
            + "; ".join(f"{name} {s:.0f} s" for name, s in summary["phase_seconds"].items())
            + _cpu(summary)
            for seed, summary in zip(result["seeds"], result["summaries"])
            if summary.get("phase_seconds")
        ]
        lines += [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _cpu(summary: dict) -> str:
    """The CPU seconds of each training of a side-by-side demo (the control's compute against the GRPO run's)."""
    cpu = [
        (name, summary[f"{key}_cpu_seconds"])
        for key, name in (("grpo", "GRPO"), ("sft_control", "SFT control"), ("grpo_process", "process run"))
        if f"{key}_cpu_seconds" in summary
    ]
    return f" (side by side; CPU seconds: {', '.join(f'{n} {s:.0f}' for n, s in cpu)})" if cpu else ""


def _figure(results: list[dict]) -> str:
    from matplotlib.figure import Figure

    result = results[-1]
    fig = Figure(figsize=(7.5, 3.2))
    axes = fig.subplots(1, 2)
    names = [(col, label) for col, label in COLUMNS if any(col in e for e in result["eval"])]
    for ax, key, title in (
        (axes[0], "greedy_accuracy", "held-out greedy accuracy"),
        (axes[1], "wrong_steps_rate", "right answer, wrong steps"),
    ):
        stats = [mean_sd([v for v in _cell(result["eval"], col, key) if v is not None]) for col, _ in names]
        ax.bar(
            range(len(names)),
            [m for m, _ in stats],
            yerr=[sd or 0.0 for _, sd in stats],
            capsize=3,
            color=["#9e9e9e", "#1f77b4", "#ff7f0e", "#2ca02c"][: len(names)],
        )
        teacher = result["eval"][0]["teacher"].get(TEACHER[key])
        if teacher is not None:
            ax.axhline(teacher, color="black", linestyle="--", linewidth=1, label="teacher")
            ax.legend(loc="upper right", fontsize=7)
        ax.set_xticks(range(len(names)), [label.replace(", ", "\n") for _, label in names], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"veriloop demo, mean ± sd over seeds {', '.join(map(str, result['seeds']))}", fontsize=9)
    fig.tight_layout()
    return svg(fig)


def _block(results: list[dict], where: str) -> str:
    result = results[-1]
    return "\n".join(
        [
            *table(result),
            "",
            f"Mean ± sd over seeds {', '.join(map(str, result['seeds']))}; wall time per demo {_seconds(result)} s "
            f"on {result['stamp']['cores']} cores ([every seed and the command]"
            f"({link('docs/results/demo.md', where)})).",
            "",
        ]
    )


figures = {"demo.svg": _figure}
blocks = {"demo-table": _block}


# ---------------------------------------------------------------------------------------------------------- running


def main() -> None:
    silence_hub_progress()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated train seeds")
    ap.add_argument("--out", default="runs/bench-demo", help="the seeds' demo directories go in OUT/seed-S")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="demo options for every seed")
    result_args(ap, "demo_seeds")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    options = dict(kv.split("=", 1) for kv in args.set)
    if args.quick:
        seeds, options = seeds[:1], {**QUICK, **options}
        args.out = str(scratch() / "demo_seeds")
        shutil.rmtree(args.out, ignore_errors=True)  # a quick run is never read back
    from veriloop.config import build_config
    from veriloop.demo import DemoConfig, run_demo

    per_seed, evals = [], []
    for seed in seeds:
        out = Path(args.out) / f"seed-{seed}"
        if (out / "summary.json").is_file() and not args.quick:  # a finished seed is read, not run again
            print(f"seed {seed}: reading the finished demo in {out}")
            summary = json.loads((out / "summary.json").read_text())
        else:
            cfg = build_config(
                DemoConfig, {}, {"run_dir": str(out), "train.seed": seed, "threads": args.threads, **options}
            )
            summary = run_demo(cfg, progress=False)
            out = Path(summary["run_dir"])
        evals.append(json.loads((out / "eval.json").read_text()))
        per_seed.append(summary)
    result = {"seeds": seeds, "options": options, "threads": args.threads, "summaries": per_seed, "eval": evals}
    print()
    print("\n".join(table(result)))
    print(f"\nwall time per demo: {_seconds(result)} s")
    for seed, summary, evaluation in zip(seeds, per_seed, evals):
        failed = [name for name, ok in lesson(evaluation).items() if not ok]
        print(
            f"seed {seed}: {summary['total_seconds']:.0f} s; lesson "
            + ("shown" if not failed else "not shown: " + "; ".join(failed))
        )
    save(args, "demo_seeds", result)


if __name__ == "__main__":
    main()
