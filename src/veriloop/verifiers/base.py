"""Verdicts, the verifier and reward-source interfaces, and the registry.

A verifier (``Verifier``, a Protocol) is pure and deterministic: ``verify(completion, reference) -> Verdict``,
same input, same verdict, no randomness, no printing.  What it rejects and why is in
``Verdict.details``; every partial check is kept in ``Verdict.components``.

``get(name, **options)`` builds a registered verifier and checks that it is one.  A reward source
(``RewardSource``, a Protocol: a plain reward function with the common signature
``fn(prompts, completions, **columns) -> list[float]``, as TRL's) becomes a verifier with
``from_reward_function``; the ``veriloop.rewards`` entry points are adapted that way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

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
      ``violation``, ``output_limit``; an unaudited model-based judge's ``refused`` / ``unparseable``
      (it gave no verdict: ``judge/grammar.py``).  A weighted sum reports its outcome part's (``arithmetic``:
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


class Verifier(Protocol):
    """What judges a completion against its reference: ``name`` and ``version`` (stamped on every verdict as
    ``name@version``), ``verify`` and ``verify_batch``.  A class may satisfy it structurally, or subclass it
    (as the built-ins do) to inherit ``tag``, ``verify_batch`` (one ``verify`` per pair) and ``_verdict``."""

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


class RewardSource(Protocol):
    """A reward function in the common form (TRL's ``reward_funcs``): one float per completion, the dataset's other
    columns (``reference``...) as keyword arguments.  An optional ``version`` attribute versions its verdicts."""

    def __call__(self, prompts: list[str], completions: list[str], **columns) -> list[float]: ...


def check_verifier(obj, name: str) -> None:
    """An ``InputError`` naming the registry entry when what it built is not a ``Verifier`` (a plugin's factory
    returning something else would otherwise fail deep inside a run)."""
    missing = [a for a in ("verify", "verify_batch") if not callable(getattr(obj, a, None))]
    missing += [a for a in ("name", "version") if not isinstance(getattr(obj, a, None), str)]
    if missing:
        raise InputError(
            f"verifier {name!r} built a {type(obj).__name__}, which is not a Verifier: it lacks "
            f"{', '.join(missing)} (veriloop.verifiers.Verifier: name and version strings, verify, verify_batch)"
        )


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
        verifier = factory(**options)
    except TypeError as e:
        raise InputError(f"bad options for verifier {name!r}: {e}") from None
    check_verifier(verifier, name)
    return verifier


def names() -> list[str]:
    return VERIFIERS.names()


class FunctionVerifier(Verifier):
    """Wraps ``fn(prompts, completions, **columns) -> list[float]`` as a verifier.

    The reference is passed as the ``reference`` column; the prompt is not known to
    ``verify`` and is passed as an empty string.
    """

    def __init__(self, fn: RewardSource, name: str | None = None, version: str = "1"):
        if not callable(fn):
            raise InputError(
                f"reward source {name or fn!r} is not callable: a reward function takes (prompts, "
                "completions, **columns) and returns one float per completion"
            )
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


def from_reward_function(fn: RewardSource, name: str | None = None, version: str = "1") -> Verifier:
    return FunctionVerifier(fn, name, version)


def reward_function_entry(name: str, fn: RewardSource) -> Callable[..., Verifier]:
    """A ``veriloop.rewards`` entry point's reward function ``fn(prompts, completions, **columns) -> list[float]``
    as a verifier factory named by the entry point (its ``version`` attribute, else "1", versions the verdicts)."""

    def factory() -> Verifier:
        return from_reward_function(fn, name, str(getattr(fn, "version", "1")))

    return factory
