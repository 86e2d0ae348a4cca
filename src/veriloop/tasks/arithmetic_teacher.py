"""The built-in arithmetic task's teacher: the traces, programs and tool traces that SFT imitates.

The teacher can be imperfect in systematic ways; ``TeacherConfig()``'s defaults (both slips at 0.6,
compensated) are what the shipped base was fine-tuned on, and ``TeacherConfig.perfect()`` turns every slip off:

* ``multiplication_slip``: a multiplication ``a*b`` is computed as ``a+b`` and the wrong
  value is carried on: a class of problems (those with a ``*``) the teacher gets wrong.
* ``subtraction_slip``: a subtraction whose result a later step uses is computed the
  wrong way round (``b-a``); with ``compensate_slips`` the step that consumes it silently
  uses the magnitude, so the answer is right only through a compensating wrong step:
  ``7-3=-4;-4*2=8;answer=8`` (the seeds' candidate 2 pattern).  A negative number never
  appears in a correct trace, so the compensation is a consistent, learnable habit.
* ``wrong_step_rate``: in that fraction of traces one intermediate result is written one
  too high and the next step compensates (``2+3=6;6*4=20;answer=20``), at random.

The two slips are separate decisions on separate tokens, so an outcome reward that
removes the first has no reason to touch the second.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.tasks.expressions import Node, apply_op, format_int, internal_nodes


@dataclass
class TeacherConfig:
    """How the teacher that writes SFT traces goes wrong (see the module docstring)."""

    multiplication_slip: float = field(
        default=0.6,
        metadata={"help": "probability that the teacher computes a*b as a+b (wrong answer)", "ge": 0, "le": 1},
    )
    subtraction_slip: float = field(
        default=0.6,
        metadata={"help": "probability that a subtraction used by a later step is computed b-a", "ge": 0, "le": 1},
    )
    compensate_slips: bool = field(
        default=True,
        metadata={"help": "the step consuming a slipped subtraction uses its magnitude (right answer, wrong steps)"},
    )
    wrong_step_rate: float = field(
        default=0.0,
        metadata={
            "help": "fraction of traces with one intermediate written one too high, compensated next step",
            "ge": 0,
            "le": 1,
        },
    )

    def __post_init__(self):
        check_typed(self, "teacher")

    @classmethod
    def perfect(cls) -> TeacherConfig:
        return cls(multiplication_slip=0.0, subtraction_slip=0.0, wrong_step_rate=0.0)


def teacher_trace(node: Node, cfg: TeacherConfig, rng: random.Random) -> str:
    """A trace as the configured teacher writes it.

    Each operation has a *written* result and a *carried* value that later steps
    compute with.  A correct step writes and carries the true value; a compensated
    mistake writes one value and carries another, so the next equation is false but the
    answer is right.  Where a multiplication slip would make a later division inexact,
    the teacher gets that multiplication right.
    """
    try:
        return _teacher_trace(node, cfg, rng, cfg.multiplication_slip)
    except ValueError:  # a non-integer quotient downstream of a slipped multiplication
        return _teacher_trace(node, cfg, rng, 0.0)


def _teacher_trace(node: Node, cfg: TeacherConfig, rng: random.Random, mul_slip: float) -> str:
    ops = internal_nodes(node)
    noisy = None
    if len(ops) >= 2 and rng.random() < cfg.wrong_step_rate:
        noisy = rng.randrange(len(ops) - 1)  # never the last step
    written: dict[int, Fraction] = {}
    carried: dict[int, Fraction] = {}

    def value_of(n: Node) -> tuple[Fraction, Fraction]:
        if n.is_leaf:
            return n.value, n.value
        return written[id(n)], carried[id(n)]

    steps = []
    for i, n in enumerate(ops):
        (wa, ca), (wb, cb) = value_of(n.left), value_of(n.right)
        is_last = i == len(ops) - 1
        if n.op == "-" and not is_last and ca != cb and rng.random() < cfg.subtraction_slip:
            w = cb - ca  # written the wrong way round ...
            c = ca - cb if cfg.compensate_slips else w  # ... and silently fixed by the step that uses it
        elif n.op == "*" and rng.random() < mul_slip:
            w = c = ca + cb  # added instead of multiplied, carried on
        else:
            w = c = apply_op(n.op, ca, cb)
            if i == noisy:
                w = c + 1
        written[id(n)], carried[id(n)] = w, c
        steps.append(f"{format_int(wa)}{n.op}{format_int(wb)}={format_int(w)}")
    answer = carried[id(node)]
    return ";".join(steps + [f"answer={format_int(answer)}"])


def program_trace(node: Node, cfg: TeacherConfig, rng: random.Random) -> str:
    """The teacher's program of thought: one assignment per operation in post-order, then ``print``:
    ``a=2+3;b=a*4;print(b)``.  The interpreter does the arithmetic, so the teacher's arithmetic slips
    (``multiplication_slip``, ``wrong_step_rate``) cannot happen; its reasoning slip can:
    ``subtraction_slip`` writes the operands the wrong way round, and with ``compensate_slips`` the step
    that uses the result takes ``abs()`` of it (the right answer through a wrong step, as in its traces).
    Division is ``//``: every division of the task is exact, and the answer stays an integer."""
    ops = internal_nodes(node)
    if len(ops) > 26:
        raise InputError(f"program_trace names each operation with one letter: {len(ops)} operations are too many")
    names: dict[int, str] = {}
    slipped: set[int] = set()

    def operand(n: Node) -> str:
        if n.is_leaf:
            return format_int(n.value)
        return f"abs({names[id(n)]})" if id(n) in slipped and cfg.compensate_slips else names[id(n)]

    lines = []
    for i, n in enumerate(ops):
        name = chr(ord("a") + i)
        names[id(n)] = name
        a, b = operand(n.left), operand(n.right)
        is_last = i == len(ops) - 1
        if n.op == "-" and not is_last and n.left.value != n.right.value and rng.random() < cfg.subtraction_slip:
            a, b = b, a
            slipped.add(id(n))
        lines.append(f"{name}={a}{'//' if n.op == '/' else n.op}{b}")
    return ";".join(lines + [f"print({names[id(node)]})" if ops else f"print({format_int(node.value)})"])


def tool_trace(node: Node, cfg: TeacherConfig, rng: random.Random) -> str:
    """The teacher's tool-integrated trace: one code block per operation in post-order, each shown its value by the
    sandbox (a block's last expression prints, as in a notebook), then the answer in text:
    ``{a=2+3;a}[5]{a*4}[20]answer=20``.  A block names its result when a later block uses it, so the blocks share
    state.  The interpreter computes, so the arithmetic slips cannot happen; the subtraction slip can (operands the
    wrong way round, ``abs()`` in the block that uses it, as in ``program_trace``).  The output blocks here are what
    the sandbox prints for these blocks; SFT never trains on them (their tokens are the tool's)."""
    ops = internal_nodes(node)
    if len(ops) > 26:
        raise InputError(f"tool_trace names each operation with one letter: {len(ops)} operations are too many")
    if not ops:
        return f"answer={format_int(node.value)}"
    names: dict[int, str] = {}
    slipped: set[int] = set()
    values: dict[int, int] = {}

    def operand(n: Node) -> tuple[str, int]:
        if n.is_leaf:
            return format_int(n.value), int(n.value)
        if id(n) in slipped and cfg.compensate_slips:
            return f"abs({names[id(n)]})", abs(values[id(n)])
        return names[id(n)], values[id(n)]

    blocks = []
    for i, n in enumerate(ops):
        (a, va), (b, vb) = operand(n.left), operand(n.right)
        is_last = i == len(ops) - 1
        if n.op == "-" and not is_last and n.left.value != n.right.value and rng.random() < cfg.subtraction_slip:
            (a, va), (b, vb) = (b, vb), (a, va)
            slipped.add(id(n))
        values[id(n)] = int(apply_op(n.op, Fraction(va), Fraction(vb)))
        expr = f"{a}{'//' if n.op == '/' else n.op}{b}"
        if is_last:
            blocks.append(f"{{{expr}}}[{values[id(n)]}]")
        else:
            names[id(n)] = chr(ord("a") + i)
            blocks.append(f"{{{names[id(n)]}={expr};{names[id(n)]}}}[{values[id(n)]}]")
    return "".join(blocks) + f"answer={values[id(node)]}"
