"""The task: a lower-case word in, the word reversed out."""

from __future__ import annotations

import random
import string

from veriloop.tasks.base import Problem


def _words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    words: list[str] = []
    while len(words) < n:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 6)))
        if word not in words:
            words.append(word)
    return words


class ReverseTask:
    """``task.name reverse``.  The constructor's parameters are the task.* options it reads (here
    ``task.verifier``); held-out and validation words are fixed and disjoint from the training words."""

    name = "reverse"

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name}: what rewards training when none is named, and what evaluation reports."""
        return {"reward": verifier or "reverse-exact", "outcome": verifier or "reverse-exact"}

    def __init__(self, verifier: str = ""):
        self.default_verifier = verifier or "reverse-exact"
        words = _words(0, 200)
        problems = [Problem(f"reverse-{w}", f"reverse {w}\n", w[::-1], ("reverse",)) for w in words]
        self._heldout, self._validation, self._train = problems[:20], problems[20:40], problems[40:]

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        return [rng.choice(self._train) for _ in range(n)]

    def heldout(self) -> list[Problem]:
        return self._heldout

    def validation(self) -> list[Problem]:
        return self._validation
