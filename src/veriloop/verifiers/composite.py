"""Weighted sums of verifiers; every part's components stay in the verdict."""

from __future__ import annotations

from veriloop.verifiers.base import Verdict, Verifier, get, register


class WeightedVerifier(Verifier):
    """``score = sum_i w_i * score_i``; components hold every part's components.

    The weights are not normalised: 0.8 outcome + 0.2 format scores 1.0 only when both
    pass, and a correct answer in the wrong format scores 0.8.
    """

    name = "weighted"

    def __init__(self, weights: dict[str, float], options: dict[str, dict] | None = None):
        if not weights:
            raise ValueError("weighted verifier needs at least one part in weights")
        options = options or {}
        self.parts = [(get(n, **options.get(n, {})), float(w)) for n, w in weights.items()]
        self.version = "1(" + "+".join(f"{w:g}*{v.tag}" for v, w in self.parts) + ")"

    def verify(self, completion: str, reference: str) -> Verdict:
        score, components, details = 0.0, {}, []
        for verifier, w in self.parts:
            v = verifier.verify(completion, reference)
            score += w * v.score
            components.update(v.components or {verifier.name: v.score})
            if v.details:
                details.append(f"{verifier.name}: {v.details}")
        return self._verdict(score, components, "; ".join(details))


register("weighted")(WeightedVerifier)
