"""How good is the teacher whose traces SFT imitates?  Same verifiers, same held-out set."""

from __future__ import annotations

import random

from veriloop.tasks.base import Problem
from veriloop.tasks.jsonl import DatasetError
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct


def evaluate_teacher(task, problems: list[Problem], verifiers: dict[str, str], draws: int = 8, seed: int = 0) -> dict:
    """Expected outcome / process / wrong-steps rates of the (stochastic) teacher.

    Each problem gets ``draws`` teacher traces; rates are averaged over all of them.
    """
    if not hasattr(task, "teacher_completion"):
        return {}
    rng = random.Random(seed)
    try:
        texts = [task.teacher_completion(p, rng) for p in problems for _ in range(draws)]
    except DatasetError:  # a dataset without a demonstration for every evaluated row has no teacher to score
        return {}
    refs = [p.reference for p in problems for _ in range(draws)]
    outcome = [is_correct(v) for v in get_verifier(verifiers["outcome"]).verify_batch(texts, refs)]
    out = {"accuracy": sum(outcome) / len(outcome)}
    if verifiers.get("process"):
        process = [is_correct(v) for v in get_verifier(verifiers["process"]).verify_batch(texts, refs)]
        out["process_rate"] = sum(process) / len(process)
        out["wrong_steps_rate"] = sum(o and not p for o, p in zip(outcome, process)) / len(outcome)
    return out
