"""``veriloop rm pairs``: preference pairs made from a rule verifier's verdicts, and the pair file's format.

A pair file is JSONL, one pair a row: ``{"prompt", "chosen", "rejected"}`` (strings; ``chosen`` is the completion
preferred), any further fields kept (``reference``, ``provenance``).  People's pairs (HH-RLHF, UltraFeedback, a
labelling tool's export) go in as they are.  Where no people labelled anything, ``make_pairs`` draws ``samples``
solutions of each problem from the policy and pairs a correct one (the verifier's full marks) with a wrong one,
each solution in at most one pair (zipped in order, as the DPO pairs of a group are; a repeated pair kept once):
a reward model trained on them learns the verifier's preference, and its held-out pair accuracy says how well.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.evaluation.rule_samples import rule_judged_samples
from veriloop.io import atomic_write_jsonl, read_jsonl
from veriloop.logs import progress as progress_display
from veriloop.options import check_declared, declare, not_read_by
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.base import Split
from veriloop.tasks.config import TaskConfig

PAIR_FIELDS = ("prompt", "chosen", "rejected")


def load_pairs(path: str) -> list[dict]:
    """The rows of a pair file, each checked: the three fields present, strings, chosen differing from rejected.
    A wrong row is named by file, row (its place among the non-blank lines) and field."""
    from pathlib import Path

    if not Path(path).is_file():
        raise FileNotFoundError(f"pair file {path!r} does not exist (make one with `veriloop rm pairs`)")
    rows = read_jsonl(path)  # a line that is not JSON is named there
    if not rows:
        raise InputError(f"pair file {path!r} has no rows")
    for n, r in enumerate(rows, start=1):
        if not isinstance(r, dict):
            raise InputError(
                f"{path}: row {n}: a pair is a JSON object with {list(PAIR_FIELDS)}, got {type(r).__name__}"
            )
        for name in PAIR_FIELDS:
            if name not in r:
                raise InputError(f"{path}: row {n}: no {name!r} field (a pair has {list(PAIR_FIELDS)})")
            if not isinstance(r[name], str):
                raise InputError(f"{path}: row {n}: field {name!r} is a {type(r[name]).__name__}, not a string")
        if r["chosen"] == r["rejected"]:
            raise InputError(f"{path}: row {n}: 'chosen' and 'rejected' are the same text: the pair prefers nothing")
    return rows


@dataclass
class PairsConfig:
    """``veriloop rm pairs``: preference pairs (correct over wrong) from the policy's samples and a rule verifier."""

    policy: str = field(default="builtin:base", metadata={"help": "policy that writes the solutions"})
    output: str = field(default="runs/rm-pairs.jsonl", metadata={"help": "the pairs, JSONL {prompt, chosen, rejected}"})
    split: Split = field(default="train", metadata={"help": "the task's split the problems come from"})
    problems: int = field(default=200, metadata={"help": "problems to draw (heldout: the first N)", "ge": 1})
    samples: int = field(default=8, metadata={"help": "sampled solutions per problem", "ge": 2})
    verifier: str = field(
        default="", metadata={"help": "verifier whose full marks make a solution chosen; '' = the task's outcome one"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the problems and the samples"})
    batch_prompts: int = field(default=64, metadata={"help": "problems per generation batch", "ge": 1})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_typed(self)
        self.task.refuse_tools("veriloop rm pairs")
        if self.sampling.temperature <= 0:
            raise InputError("pairs need different samples of a problem: sampling.temperature must be > 0")
        check_declared(self)


declare(
    PairsConfig,
    [
        not_read_by(
            "rm pairs",
            ("sampling.max_thinking_tokens", "sampling.thinking_end"),
            "solutions are sampled whole, without budget forcing",
        )
    ],
    ("policy", "output", "split", "problems", "samples", "verifier", "seed", "batch_prompts", "task", "sampling"),
)


def verifier_pairs(texts: list[str], correct: list[bool]) -> list[tuple[str, str]]:
    """(chosen, rejected) texts of one problem: correct and wrong solutions zipped in order, each used once, and a
    pair of the same two texts kept once (a confident policy samples one solution many times)."""
    good = [t for t, ok in zip(texts, correct) if ok]
    bad = [t for t, ok in zip(texts, correct) if not ok]
    return list(dict.fromkeys(zip(good, bad)))


def make_pairs(cfg: PairsConfig, progress: bool = True, *, policy=None, task=None) -> dict:
    """Write ``cfg.output`` and return a summary (pairs, problems with a pair, the share of correct samples)."""
    t0 = time.time()
    samples = rule_judged_samples(cfg, policy, task)
    problems = samples.problems
    rows, n_correct, n_samples = [], 0, 0
    bar = progress_display(total=len(problems), desc="rm pairs", unit="problem", enabled=progress)
    for p, texts, ok in samples.per_problem(cfg.samples):
        n_correct, n_samples = n_correct + sum(ok), n_samples + len(ok)
        for chosen, rejected in verifier_pairs(texts, ok):
            rows.append(
                {
                    "prompt": p.prompt,
                    "chosen": chosen,
                    "rejected": rejected,
                    "reference": p.reference,
                    "provenance": samples.provenance,
                }
            )
        bar.update(1)
    bar.close()
    if not rows:
        raise InputError(
            f"no pairs: none of the {len(problems)} problems had both a correct and a wrong solution in "
            f"{cfg.samples} samples ({n_correct} of {n_samples} correct); draw more samples or problems"
        )
    atomic_write_jsonl(cfg.output, rows)
    return {
        "output": cfg.output,
        "pairs": len(rows),
        "problems": len(problems),
        "problems_with_a_pair": len({r["prompt"] for r in rows}),
        "correct_share": round(n_correct / max(n_samples, 1), 4),
        "seconds": round(time.time() - t0, 1),
    }
