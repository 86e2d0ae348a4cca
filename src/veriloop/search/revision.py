"""Sequential revision (Snell et al. 2024): a model that rewrites a wrong attempt into a right one.

Training data (``veriloop revision-pairs``): sample several solutions per training
problem; pair every distinct wrong solution with the right solution of the same problem at the
smallest edit distance (Levenshtein, on characters), so the model learns to *correct* an attempt
rather than to ignore it and write any right answer.  With ``keep_right`` (default) each right
solution of those problems is also paired with itself: a model that has only seen wrong attempts
rewrites right ones too, and a chain of revisions then drifts away from them.  A row is a JSONL
demonstration

    {"prompt": "<problem prompt><wrong attempt>|", "reference": ..., "completion": "<right solution>"}

that the ``jsonl`` task's SFT reads (``veriloop train --algo sft --task.name jsonl ...``).  At test
time the ``revision`` strategy samples a first attempt, then asks the revision model for
``budget - 1`` successive revisions, each conditioned on the previous attempt only, and selects over
the whole chain (by PRM aggregate, by majority vote, or the last attempt).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from rapidfuzz.distance import Levenshtein

from veriloop.errors import InputError
from veriloop.io import atomic_write_jsonl
from veriloop.models.loading import load_policy
from veriloop.models.solutions import sample_solutions
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.base import check_split, draw_problems
from veriloop.tasks.config import TaskConfig
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct

REVISION_SEPARATOR = "|"  # ends the attempt inside a revision prompt


def revision_prompt(prompt: str, attempt: str) -> str:
    """What the revision model reads: the problem's prompt, the attempt to revise, the separator."""
    return f"{prompt}{attempt}{REVISION_SEPARATOR}"


def closest_pairs(wrong: list[str], right: list[str]) -> list[tuple[str, str, int]]:
    """Each distinct wrong attempt with the right solution nearest to it (edit distance; first of ties)."""
    if not right:
        return []
    out = []
    for w in dict.fromkeys(wrong):
        dists = [Levenshtein.distance(w, r) for r in right]
        k = min(range(len(right)), key=lambda i: dists[i])
        out.append((w, right[k], dists[k]))
    return out


@dataclass
class RevisionPairsConfig:
    """``veriloop revision-pairs``: wrong -> right demonstrations for a revision model."""

    policy: str = field(default="builtin:base", metadata={"help": "policy whose attempts are revised"})
    output: str = field(default="runs/revision-pairs.jsonl", metadata={"help": "JSONL demonstrations"})
    split: str = field(default="train", metadata={"help": "train | validation | heldout problems"})
    problems: int = field(default=1000, metadata={"help": "problems to draw (heldout: the first N)"})
    samples: int = field(default=8, metadata={"help": "solutions sampled per problem"})
    keep_right: bool = field(
        default=True, metadata={"help": "also add right -> same right rows, so a right attempt is kept, not rewritten"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the problems and samples"})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_split(self.split)
        if self.problems < 1 or self.samples < 2:
            raise InputError("problems must be >= 1 and samples >= 2 (a pair needs a wrong and a right one)")
        if self.sampling.temperature <= 0:
            raise InputError("revision pairs: sampling.temperature must be > 0")


def make_revision_pairs(cfg: RevisionPairsConfig, progress: bool = True, *, policy=None, task=None) -> dict:
    t0 = time.time()
    task = task or cfg.task.build()
    verifier = get_verifier(task.default_verifier)
    policy = policy or load_policy(cfg.policy)
    problems = draw_problems(task, cfg.split, cfg.problems, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows, with_pair = [], 0
    for chunk, texts, _ in sample_solutions(policy, problems, cfg.sampling, gen, cfg.samples, batch=128):
        verdicts = verifier.verify_batch(texts, [chunk[j // cfg.samples].reference for j in range(len(texts))])
        for b, p in enumerate(chunk):
            group = range(b * cfg.samples, (b + 1) * cfg.samples)
            right = [texts[j] for j in group if is_correct(verdicts[j])]
            wrong = [texts[j] for j in group if not is_correct(verdicts[j])]
            pairs = closest_pairs(wrong, right)
            with_pair += bool(pairs)
            if cfg.keep_right and pairs:  # only where the problem also has wrong attempts: a balanced lesson
                pairs += [(r, r, 0) for r in dict.fromkeys(right)]
            for w, r, d in pairs:
                rows.append({"prompt": revision_prompt(p.prompt, w), "reference": p.reference, "completion": r,
                             "problem_id": p.id, "attempt": w, "edit_distance": d,
                             "provenance": {"policy": getattr(policy, "source", cfg.policy), "samples": cfg.samples,
                                            "seed": cfg.seed, "verifier": verifier.tag,
                                            "sampling": cfg.sampling.as_dict()}})  # fmt: skip
    if not rows:
        raise InputError(
            "no wrong/right pairs: every problem was all right or all wrong; draw more problems or samples"
        )
    atomic_write_jsonl(cfg.output, rows)
    return {"output": cfg.output, "pairs": len(rows), "kept_right": sum(r["edit_distance"] == 0 for r in rows),
            "problems_with_pairs": with_pair, "problems": len(problems),
            "mean_edit_distance": sum(r["edit_distance"] for r in rows) / len(rows),
            "seconds": round(time.time() - t0, 1)}  # fmt: skip
