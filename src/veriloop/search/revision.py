"""Sequential revision (Snell et al. 2024): a model that rewrites a wrong attempt into a right one.

Training data (``veriloop revision-pairs``): sample several solutions per training problem and
build *chains*: every distinct wrong solution ends a chain of up to ``history`` wrong attempts
(the others drawn at random from the same problem's wrong ones, how many drawn uniformly from 0 to
``history - 1``), ordered by decreasing edit distance (Levenshtein, on characters) to the right
solution nearest the last one, which is the chain's target: the model sees attempts that approach
a right answer and learns to *correct* the last of them rather than to ignore them and write any
right answer.  With ``keep_right`` (default) each right solution of those problems also ends a chain
(wrong attempts before it) whose target is itself: a model that has only seen wrong attempts
rewrites right ones too, and a chain of revisions then drifts away from them.  ``history 1`` gives
the single wrong -> right pairs.  A row is a JSONL demonstration

    {"prompt": "<problem prompt><attempt 1>|<attempt 2>|...|", "reference": ..., "completion": "<right solution>"}

that the ``jsonl`` task's SFT reads (``veriloop train --algo sft --task.name jsonl ...``).  At test
time the ``revision`` strategy samples ``revision_chains`` first attempts, asks the revision model
to revise each chain in turn, conditioned on its last ``revision_history`` attempts, until the
chains hold ``budget`` attempts in all, and selects over every attempt (PRM aggregate, majority vote,
or the last attempt: of the one chain, or the majority of the chains' last attempts).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch
from rapidfuzz.distance import Levenshtein

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.io import atomic_write_jsonl
from veriloop.models.loading import load_policy
from veriloop.models.solutions import sample_solutions
from veriloop.options import check_declared, declare, not_read_by
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.base import Split, draw_problems
from veriloop.tasks.config import TaskConfig
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct

REVISION_SEPARATOR = "|"  # ends the attempt inside a revision prompt


def revision_prompt(prompt: str, attempts: str | list[str]) -> str:
    """What the revision model reads: the problem's prompt, then each attempt (oldest first) and a separator."""
    if isinstance(attempts, str):
        attempts = [attempts]
    return prompt + "".join(f"{a}{REVISION_SEPARATOR}" for a in attempts)


def revision_chains(
    wrong: list[str], right: list[str], history: int, rng: random.Random
) -> list[tuple[list[str], str, int]]:
    """(attempts, target, edit distance of the last attempt to the target) for every distinct wrong
    attempt: up to ``history - 1`` other wrong attempts drawn at random join it, and the chain is
    ordered by decreasing distance to the target (the right solution nearest the wrong attempt; ties:
    the order drawn), so its last attempt is the nearest."""
    if not right:
        return []
    distinct = list(dict.fromkeys(wrong))
    out = []
    for w, r, _ in closest_pairs(distinct, right):
        others = [x for x in distinct if x != w]
        prev = rng.sample(others, rng.randint(0, min(history - 1, len(others)))) if history > 1 else []
        chain = sorted([*prev, w], key=lambda a: -Levenshtein.distance(a, r))
        out.append((chain, r, Levenshtein.distance(chain[-1], r)))
    return out


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


def kept_chain(wrong: list[str], right: str, history: int, rng: random.Random) -> list[str]:
    """A chain that ends in the right attempt ``right`` (its target is itself): up to ``history - 1``
    distinct wrong attempts drawn at random before it, by decreasing distance to it."""
    distinct = list(dict.fromkeys(wrong))
    prev = rng.sample(distinct, rng.randint(0, min(history - 1, len(distinct)))) if history > 1 else []
    return [*sorted(prev, key=lambda a: -Levenshtein.distance(a, right)), right]


@dataclass
class RevisionPairsConfig:
    """``veriloop revision-pairs``: wrong -> right demonstrations for a revision model."""

    policy: str = field(default="builtin:base", metadata={"help": "policy whose attempts are revised"})
    output: str = field(default="runs/revision-pairs.jsonl", metadata={"help": "JSONL demonstrations"})
    split: Split = field(default="train", metadata={"help": "the task's split the problems come from"})
    problems: int = field(default=1000, metadata={"help": "problems to draw (heldout: the first N)", "ge": 1})
    samples: int = field(
        default=8,
        metadata={"help": "solutions sampled per problem (a pair needs a wrong and a right one)", "ge": 2},
    )
    keep_right: bool = field(
        default=True, metadata={"help": "also add right -> same right rows, so a right attempt is kept, not rewritten"}
    )
    history: int = field(
        default=4, metadata={"help": "attempts per chain, at most (1 = single wrong -> right pairs)", "ge": 1}
    )
    seed: int = field(default=0, metadata={"help": "seed of the problems and samples"})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_typed(self)
        self.task.refuse_tools("veriloop revision-pairs")
        if self.sampling.temperature <= 0:
            raise InputError("revision pairs: sampling.temperature must be > 0")
        check_declared(self)


declare(
    RevisionPairsConfig,
    [
        not_read_by(
            "revision-pairs",
            ("sampling.max_thinking_tokens", "sampling.thinking_end"),
            "attempts are sampled whole, without budget forcing",
        )
    ],
    ("policy", "output", "split", "problems", "samples", "keep_right", "history", "seed", "task", "sampling"),
)


def make_revision_pairs(cfg: RevisionPairsConfig, progress: bool = True, *, policy=None, task=None) -> dict:
    t0 = time.time()
    task = task or cfg.task.build()
    verifier = get_verifier(task.default_verifier)
    policy = policy or load_policy(cfg.policy)
    problems = draw_problems(task, cfg.split, cfg.problems, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)  # which wrong attempts join a chain
    rows, with_pair = [], 0
    for chunk, texts, _ in sample_solutions(policy, problems, cfg.sampling, gen, cfg.samples, batch=128):
        verdicts = verifier.verify_batch(texts, [chunk[j // cfg.samples].reference for j in range(len(texts))])
        for b, p in enumerate(chunk):
            group = range(b * cfg.samples, (b + 1) * cfg.samples)
            right = [texts[j] for j in group if is_correct(verdicts[j])]
            wrong = [texts[j] for j in group if not is_correct(verdicts[j])]
            chains = revision_chains(wrong, right, cfg.history, rng)
            with_pair += bool(chains)
            if cfg.keep_right and chains:  # only where the problem also has wrong attempts: a balanced lesson
                chains += [(kept_chain(wrong, r, cfg.history, rng), r, 0) for r in dict.fromkeys(right)]
            for attempts, r, d in chains:
                rows.append(
                    {
                        "prompt": revision_prompt(p.prompt, attempts),
                        "reference": p.reference,
                        "completion": r,
                        "problem_id": p.id,
                        "attempt": attempts[-1],
                        "attempts": attempts,
                        "edit_distance": d,
                        "provenance": {
                            "policy": getattr(policy, "source", cfg.policy),
                            "samples": cfg.samples,
                            "seed": cfg.seed,
                            "verifier": verifier.tag,
                            "history": cfg.history,
                            "sampling": cfg.sampling.as_dict(),
                        },
                    }
                )
    if not rows:
        raise InputError(
            "no wrong/right pairs: every problem was all right or all wrong; draw more problems or samples"
        )
    atomic_write_jsonl(cfg.output, rows)
    return {
        "output": cfg.output,
        "pairs": len(rows),
        "kept_right": sum(r["edit_distance"] == 0 for r in rows),
        "problems_with_pairs": with_pair,
        "problems": len(problems),
        "mean_edit_distance": sum(r["edit_distance"] for r in rows) / len(rows),
        "mean_attempts": sum(len(r["attempts"]) for r in rows) / len(rows),
        "seconds": round(time.time() - t0, 1),
    }
