"""Weighted sums of verifiers; every part's components stay in the verdict."""

from __future__ import annotations

from veriloop.errors import InputError
from veriloop.verifiers.base import Verdict, Verifier, get


class WeightedVerifier(Verifier):
    """``score = sum_i w_i * score_i``; components hold every part's components.

    The weights are not normalised: 0.8 outcome + 0.2 format scores 1.0 only when both
    pass, and a correct answer in the wrong format scores 0.8.  The verdict's outcome is that of
    the part named ``outcome_from`` (default: the first part that names an outcome).
    """

    name = "weighted"

    def __init__(self, weights: dict[str, float], options: dict[str, dict] | None = None, outcome_from: str = ""):
        if not weights:
            raise InputError("weighted verifier needs at least one part in weights")
        if outcome_from and outcome_from not in weights:
            raise InputError(f"outcome_from {outcome_from!r} is not one of the parts {list(weights)}")
        self.outcome_from = outcome_from
        options = options or {}
        self.parts = [(get(n, **options.get(n, {})), float(w)) for n, w in weights.items()]
        self.part_names = list(weights)
        self.version = "1(" + "+".join(f"{w:g}*{v.tag}" for v, w in self.parts) + ")"

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        # each part grades the whole batch (a part with a worker pool uses it once)
        per_part = [(verifier, w, verifier.verify_batch(completions, references)) for verifier, w in self.parts]
        out = []
        for i in range(len(completions)):
            score, components, details, outcome = 0.0, {}, [], ""
            for (verifier, w, verdicts), part in zip(per_part, self.part_names):
                v = verdicts[i]
                score += w * v.score
                components.update(v.components or {verifier.name: v.score})
                if v.details:
                    details.append(f"{verifier.name}: {v.details}")
                if part == self.outcome_from or not self.outcome_from:
                    outcome = outcome or v.outcome  # the named part's, else the first part that names one
            out.append(Verdict(score, components, self.tag, "; ".join(details), outcome))
        return out


class LengthPenalty(Verifier):
    """Overlong shaping on characters (DAPO's soft punishment): 0 up to ``max_chars - buffer``,
    then a ramp to -1 at ``max_chars``, -1 beyond.  Combine with ``weighted``:
    ``weights={"gsm8k": 1, "length": 0.5}``.  (The trainer's ``rollout.overlong_buffer`` is the
    same shaping on tokens.)"""

    name, version = "length", "1"

    def __init__(self, max_chars: int = 2000, buffer: int = 500):
        if not 0 < buffer <= max_chars:
            raise InputError(f"length: need 0 < buffer <= max_chars, got buffer={buffer}, max_chars={max_chars}")
        self.max_chars, self.buffer = max_chars, buffer

    def verify(self, completion: str, reference: str) -> Verdict:
        penalty = _overlong_penalty(len(completion), self.max_chars, self.buffer)
        return self._verdict(penalty, {"length_penalty": penalty})


def _overlong_penalty(length: int, max_len: int, buffer: int) -> float:
    """The trainer's own ramp (``algorithms.shaping``) on one length.  Imported here, not at the top:
    only a length verifier loads torch, not every process that grades with the verifiers."""
    import torch

    from veriloop.algorithms.shaping import overlong_penalty

    return float(overlong_penalty(torch.tensor([length]), max_len, buffer)[0])
