"""Verifiers: (completion, reference) -> Verdict(score, components, version, details).

``get(name, **options)`` builds one by name; ``names()`` lists them.
"""

from veriloop.verifiers import arithmetic as _arithmetic  # noqa: F401  (registers the arithmetic verifiers)
from veriloop.verifiers import code as _code  # noqa: F401  (registers code)
from veriloop.verifiers import maths as _maths  # noqa: F401  (registers math, gsm8k)
from veriloop.verifiers import program as _program  # noqa: F401  (registers program-output and the *-pot forms)
from veriloop.verifiers.base import (
    Verdict,
    Verifier,
    VerifierError,
    from_reward_function,
    get,
    is_correct,
    names,
    register,
)
from veriloop.verifiers.composite import WeightedVerifier

__all__ = [
    "Verdict",
    "Verifier",
    "VerifierError",
    "WeightedVerifier",
    "from_reward_function",
    "get",
    "is_correct",
    "names",
    "register",
]
