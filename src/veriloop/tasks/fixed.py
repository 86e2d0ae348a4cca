"""One problem, asked over and over: the setting of the seeds' four-candidate experiments."""

from __future__ import annotations

import hashlib
import random

from veriloop.errors import InputError
from veriloop.tasks.base import Problem


class FixedTask:
    name = "fixed"
    step_splitter = "semicolon"

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name}, known without loading a row: ``reward`` (what training is rewarded by when no
        verifier is named), ``outcome`` and, where the traces have them, ``format`` and ``process`` (evaluation)."""
        return {"reward": verifier or "arithmetic-outcome", "outcome": verifier or "arithmetic-outcome"}

    def __init__(self, prompt: str = "", reference: str = "", verifier: str = "arithmetic-outcome"):
        if not prompt or not reference:
            raise InputError("task fixed needs a prompt and a reference")
        pid = "fixed-" + hashlib.sha256(f"{prompt}\n{reference}".encode()).hexdigest()[:12]
        self.problem = Problem(pid, prompt, reference, ("fixed",))
        self.default_verifier = verifier

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        return [self.problem] * n

    def heldout(self) -> list[Problem]:
        return [self.problem]

    def validation(self) -> list[Problem]:
        return [self.problem]  # one problem: there is nothing else to hold out
