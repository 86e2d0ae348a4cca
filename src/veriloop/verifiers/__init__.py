"""Verifiers: (completion, reference) -> Verdict(score, components, version, details).

``get(name, **options)`` builds one by name; ``names()`` lists them.  The built-in verifiers are registered here
(``registry.VERIFIERS``); a ``veriloop.rewards`` entry point (a reward function) becomes a verifier through
``reward_function_entry``.
"""

from veriloop.registry import VERIFIERS
from veriloop.verifiers.arithmetic import (
    ArithmeticFormat,
    ArithmeticOutcome,
    ArithmeticProcess,
    ArithmeticTool,
    arithmetic_composite,
    arithmetic_tool_process,
)
from veriloop.verifiers.base import (
    RewardSource,
    Verdict,
    Verifier,
    VerifierError,
    from_reward_function,
    get,
    is_correct,
    names,
    register,
    reward_function_entry,
)
from veriloop.verifiers.code import CodeVerifier
from veriloop.verifiers.composite import LengthPenalty, WeightedVerifier
from veriloop.verifiers.maths import GSM8K, MathAnswer
from veriloop.verifiers.program import ProgramOutput, arithmetic_pot, gsm8k_pot, math_pot

BUILT_IN = {
    "arithmetic": arithmetic_composite,  # the seeds' R = 0.8 outcome + 0.2 format
    "arithmetic-outcome": ArithmeticOutcome,
    "arithmetic-format": ArithmeticFormat,
    "arithmetic-process": ArithmeticProcess,
    "arithmetic-tool": ArithmeticTool,
    "arithmetic-tool-process": arithmetic_tool_process,
    "math": MathAnswer,
    "gsm8k": GSM8K,
    "code": CodeVerifier,
    "program-output": ProgramOutput,
    "arithmetic-pot": arithmetic_pot,
    "gsm8k-pot": gsm8k_pot,
    "math-pot": math_pot,
    "weighted": WeightedVerifier,
    "length": LengthPenalty,
}
for _name, _factory in BUILT_IN.items():
    VERIFIERS.register(_name, _factory)
VERIFIERS.adapt("veriloop.rewards", reward_function_entry)

__all__ = [
    "RewardSource",
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
