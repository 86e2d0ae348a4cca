"""Verdicts, the verifier interface and the registry.

A verifier is pure and deterministic: ``verify(completion, reference) -> Verdict``,
same input, same verdict, no randomness, no printing.  What it rejects and why is in
``Verdict.details``; every partial check is kept in ``Verdict.components``.

``get(name, **options)`` builds a registered verifier.  A plain reward function with the
common signature ``fn(prompts, completions, **columns) -> list[float]`` can be wrapped
with ``from_reward_function``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from veriloop.errors import InputError
from veriloop.registry import VERIFIERS


@dataclass(frozen=True)
class Verdict:
    """The result of one check.

    score: the reward, in [0, 1] for the built-in verifiers.
    components: every partial check by name (e.g. ``{"outcome": 1.0, "format": 1.0}``).
    version: ``name@version`` of the verifier that produced it.
    details: a short human reason (what failed, where).
    outcome: what kind of result it is, where the verifier names one; one vocabulary, so records
      and per-step metrics can count each kind:
      ``correct`` (the check passed), ``wrong`` (a clean final answer with the wrong value),
      ``no_answer`` (no clean final answer: none stated, or only negated, hedged, conditional or
      prose values), ``ambiguous`` (several different final answers, or a stated one revised),
      ``parse_error`` / ``timeout`` / ``error`` (maths: the answer does not parse / the check ran out
      of time / the check itself failed, so no judgement was made),
      ``wrong_steps`` (``arithmetic-process``: the right answer, steps that do not compute it),
      ``bad_format`` (``arithmetic-format``); for code ``pass``, ``fail``, ``crash``,
      ``violation``, ``output_limit``.  A weighted sum reports its outcome part's (``arithmetic``:
      ``arithmetic-outcome``'s).  Empty for verifiers that only score.
    steps: per-step scores, for verifiers that score steps (a process reward model); else empty.
    """

    score: float
    components: dict[str, float] = field(default_factory=dict)
    version: str = ""
    details: str = ""
    outcome: str = ""
    steps: tuple[float, ...] = ()


def is_correct(verdict: Verdict) -> bool:
    """Whether a verdict counts as right (accuracy, pass rates, step labels, search): full marks.

    ``score >= 1``: the built-in verifiers score in [0, 1], so for them this is ``score == 1``.
    """
    return verdict.score >= 1.0


class VerifierError(InputError):
    """The verifier cannot judge: e.g. the reference itself is invalid (an error, not a reward)."""


class Verifier:
    """Base class: subclasses set ``name`` / ``version`` and implement ``verify``."""

    name: str = "verifier"
    version: str = "0"

    @property
    def tag(self) -> str:
        return f"{self.name}@{self.version}"

    def verify(self, completion: str, reference: str) -> Verdict:  # pragma: no cover - interface
        raise NotImplementedError

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]

    def _verdict(self, score: float, components: dict[str, float], details: str = "") -> Verdict:
        return Verdict(float(score), dict(components), self.tag, details)


def register(name: str):
    """Decorator: ``@register("my-verifier")`` on a class or factory taking keyword options
    (``veriloop.registry.VERIFIERS``; registering a name again replaces it, as a notebook re-run does)."""

    def wrap(factory):
        return VERIFIERS.register(name, factory, replace=True)

    return wrap


def get(name: str, **options) -> Verifier:
    """Build the verifier registered as ``name`` with ``options``."""
    factory = VERIFIERS.get(name)
    try:
        return factory(**options)
    except TypeError as e:
        raise InputError(f"bad options for verifier {name!r}: {e}") from None


def names() -> list[str]:
    return VERIFIERS.names()


class FunctionVerifier(Verifier):
    """Wraps ``fn(prompts, completions, **columns) -> list[float]`` as a verifier.

    The reference is passed as the ``reference`` column; the prompt is not known to
    ``verify`` and is passed as an empty string.
    """

    def __init__(self, fn: Callable[..., list[float]], name: str | None = None, version: str = "1"):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function")
        self.version = version

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        scores = self.fn([""] * len(completions), list(completions), reference=list(references))
        if len(scores) != len(completions):
            raise VerifierError(
                f"reward function {self.name!r} returned {len(scores)} scores for {len(completions)} completions"
            )
        out = []
        for s in scores:
            s = float(s)
            if not math.isfinite(s):
                raise VerifierError(f"reward function {self.name!r} returned a non-finite score {s}")
            out.append(self._verdict(s, {self.name: s}))
        return out


def from_reward_function(fn: Callable[..., list[float]], name: str | None = None, version: str = "1") -> Verifier:
    return FunctionVerifier(fn, name, version)


def reward_function_entry(name: str, fn: Callable[..., list[float]]) -> Callable[..., Verifier]:
    """A ``veriloop.rewards`` entry point's reward function ``fn(prompts, completions, **columns) -> list[float]``
    as a verifier factory named by the entry point (its ``version`` attribute, else "1", versions the verdicts)."""

    def factory() -> Verifier:
        return from_reward_function(fn, name, str(getattr(fn, "version", "1")))

    return factory
