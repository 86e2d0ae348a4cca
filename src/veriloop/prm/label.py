"""Math-Shepherd step labels (Wang et al. 2024) made without people.

For each sampled solution and each of its steps k, the *completer* policy continues the prefix
(steps 1..k and the separator after step k) ``N`` times; the outcome verifier judges every
continuation.  The step's labels:

* soft label ``s_k = (# continuations reaching the reference) / N``,
* hard label ``h_k = 1[s_k > 0]`` (some continuation can still reach the answer).

The final step needs no completions: its label is the solution's own outcome.  Every row
of the output JSONL carries its provenance: the sampling and completer policies, ``N``, the
sampling settings and seed, and the verifier's ``name@version``.

Where labels mislead: a completer that habitually repairs a wrong intermediate (the built-in
base's compensated subtraction slip) reaches the right answer from a wrong prefix, so the
wrong step is labelled good.  ``veriloop prm train`` reports how the PRM ranks steps against
the exact process checker where the task has one, so this shows up as a number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.io import atomic_write_jsonl
from veriloop.logs import progress as progress_display
from veriloop.models.loading import load_policy
from veriloop.models.solutions import sample_solutions
from veriloop.options import check_declared, declare, not_read_by
from veriloop.prm.steps import split_steps
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.base import Split, draw_problems
from veriloop.tasks.config import TaskConfig
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct


@dataclass
class LabelConfig:
    """Math-Shepherd labelling: sample solutions, complete every step prefix N times."""

    policy: str = field(default="builtin:base", metadata={"help": "policy that writes the solutions to label"})
    completer: str = field(default="", metadata={"help": "policy that completes each step prefix; '' = the policy"})
    output: str = field(default="runs/prm-labels.jsonl", metadata={"help": "labelled steps, one solution per row"})
    split: Split = field(default="train", metadata={"help": "the task's split the problems come from"})
    problems: int = field(default=200, metadata={"help": "problems to draw (heldout: the first N)", "ge": 1})
    solutions: int = field(default=4, metadata={"help": "sampled solutions per problem", "ge": 1})
    completions: int = field(default=8, metadata={"help": "N: completions of each step prefix", "ge": 1})
    verifier: str = field(default="", metadata={"help": "outcome verifier of the completions; '' = the task's"})
    seed: int = field(default=0, metadata={"help": "seed of the problems, solutions and completions"})
    batch_prompts: int = field(default=128, metadata={"help": "prefixes per generation batch", "ge": 1})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_typed(self)
        self.task.refuse_tools("veriloop prm label")
        if self.sampling.temperature <= 0:
            raise InputError("labelling samples: sampling.temperature must be > 0")
        check_declared(self)


# Solutions and completions are sampled whole, without budget forcing.
declare(
    LabelConfig,
    [
        not_read_by(
            "prm label",
            ("sampling.max_thinking_tokens", "sampling.thinking_end"),
            "solutions and step completions are sampled whole, without budget forcing",
        )
    ],
    (
        "policy",
        "completer",
        "output",
        "split",
        "problems",
        "solutions",
        "completions",
        "verifier",
        "seed",
        "batch_prompts",
        "task",
        "sampling",
    ),
)


def label_solutions(
    solutions,
    completer,
    verifier,
    completions: int,
    sampling: SamplingParams,
    generator,
    splitter: str,
    provenance: dict,
    batch_prompts: int = 128,
    progress: bool = False,
) -> list[dict]:
    """Label rows for ``solutions`` [(problem, completion text)]: each proper step prefix is
    completed ``completions`` times by ``completer``; the last step takes the solution's own outcome."""
    outcomes = verifier.verify_batch([c for _, c in solutions], [p.reference for p, _ in solutions])
    split, prefixes = _step_prefixes(solutions, splitter)
    hits = [[0] * len(st) for st in split]
    bar = progress_display(total=len(prefixes) * completions, desc="prm label", unit="completion", enabled=progress)
    for i in range(0, len(prefixes), batch_prompts):
        chunk = prefixes[i : i + batch_prompts]
        bar.update(_complete_prefixes(chunk, solutions, completer, verifier, completions, sampling, generator, hits))
    bar.close()
    provenance = {
        **provenance,
        "completions": completions,
        "verifier": verifier.tag,
        "sampling": sampling.as_dict(),
        "splitter": splitter,
    }
    return _label_rows(solutions, split, hits, outcomes, completions, provenance)


def _step_prefixes(solutions, splitter: str) -> tuple[list, list]:
    """Each solution's steps, and the prefixes to complete: (solution index, step index, the text up to the next
    step's start, separator included) for every step but the last (whose label is the solution's outcome)."""
    prefixes = []  # (solution index, step index, prefix text)
    split = []
    for s, (_, text) in enumerate(solutions):
        steps = split_steps(text, splitter)
        split.append(steps)
        for k in range(len(steps) - 1):
            prefixes.append((s, k, text[: steps[k + 1].start]))
    return split, prefixes


def _complete_prefixes(chunk, solutions, completer, verifier, n: int, sampling, generator, hits) -> int:
    """One generation batch: continue each prefix of ``chunk`` ``n`` times after its problem's prompt, judge the
    continuations against the problem's reference and add the right ones to ``hits``; returns how many it made."""
    prompt_ids = []
    for s, _, prefix in chunk:
        ids = completer.encode_prompt(solutions[s][0].prompt)
        prompt_ids.append(ids + completer.tokenizer(prefix, add_special_tokens=False).input_ids)
    out = completer.sample(prompt_ids, sampling, generator=generator, n=n)
    texts = [
        chunk[j // n][2] + completer.completion_text(ids, f)
        for j, (ids, f) in enumerate(zip(out.completion_ids, out.finish_reasons))
    ]
    refs = [solutions[chunk[j // n][0]][0].reference for j in range(len(texts))]
    for j, v in enumerate(verifier.verify_batch(texts, refs)):
        s, k, _ = chunk[j // n]
        hits[s][k] += is_correct(v)
    return len(texts)


def _label_rows(solutions, split, hits, outcomes, n: int, provenance: dict) -> list[dict]:
    """The output rows, one per solution with steps: soft labels (the share of a prefix's ``n`` continuations
    that were right; the last step's is the outcome), hard labels (some continuation was right), provenance."""
    rows = []
    for s, ((problem, text), steps) in enumerate(zip(solutions, split)):
        if not steps:
            continue
        soft = [hits[s][k] / n for k in range(len(steps) - 1)] + [float(is_correct(outcomes[s]))]
        rows.append(
            {
                "problem_id": problem.id,
                "prompt": problem.prompt,
                "reference": problem.reference,
                "completion": text,
                "steps": [st.text for st in steps],
                "step_spans": [[st.start, st.end] for st in steps],
                "soft_labels": soft,
                "hard_labels": [float(x > 0) for x in soft],
                "outcome": float(is_correct(outcomes[s])),
                "provenance": provenance,
            }
        )
    return rows


def label_steps(cfg: LabelConfig, progress: bool = True, *, policy=None, completer=None, task=None) -> dict:
    """Write ``cfg.output`` and return a summary (rows, steps, mean soft label, seconds)."""
    t0 = time.time()
    task = task or cfg.task.build()
    splitter = getattr(task, "step_splitter", "lines")
    verifier = get_verifier(cfg.verifier or task.default_verifier)
    policy = policy or load_policy(cfg.policy)
    completer = completer or (load_policy(cfg.completer) if cfg.completer else policy)
    problems = draw_problems(task, cfg.split, cfg.problems, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    solutions = []  # (problem, completion text): S per problem from the policy
    for chunk, texts, finishes in sample_solutions(
        policy, problems, cfg.sampling, gen, cfg.solutions, cfg.batch_prompts
    ):
        for j, (text, finish) in enumerate(zip(texts, finishes)):
            if finish == "eos":  # a truncated solution has no final answer to label the last step with
                solutions.append((chunk[j // cfg.solutions], text))
    provenance = {
        "policy": getattr(policy, "source", cfg.policy),
        "completer": getattr(completer, "source", cfg.completer or cfg.policy),
        "seed": cfg.seed,
        "split": cfg.split,
        "task": task.name,
        "prompt_template": getattr(task, "prompt_template", ""),
        "created_at": time.time(),
    }
    rows = label_solutions(
        solutions,
        completer,
        verifier,
        cfg.completions,
        cfg.sampling,
        gen,
        splitter,
        provenance,
        cfg.batch_prompts,
        progress,
    )
    atomic_write_jsonl(cfg.output, rows)
    n_steps = sum(len(r["steps"]) for r in rows)
    return {
        "output": cfg.output,
        "solutions": len(rows),
        "steps": n_steps,
        "completions": sum(len(r["steps"]) - 1 for r in rows) * cfg.completions,
        "mean_soft_label": sum(sum(r["soft_labels"]) for r in rows) / max(n_steps, 1),
        "hard_positive_share": sum(sum(r["hard_labels"]) for r in rows) / max(n_steps, 1),
        "seconds": round(time.time() - t0, 1),
    }
