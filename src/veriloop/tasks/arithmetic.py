"""The built-in ``arithmetic`` task: integer expressions with strict step traces.

A problem is an expression such as ``(2+3)*4``; the prompt is ``(2+3)*4?`` and the
canonical completion evaluates one binary operation per step, in post-order:

    2+3=5;5*4=20;answer=20

Every intermediate value of a generated problem is an integer in ``[0, max_value]``
and every division is exact.  Train, validation and held-out problems are separated by a hash
of the expression text, so the splits never share a problem whatever the seeds.

The *teacher* writes the traces that SFT imitates.  It can be imperfect in systematic
ways; ``TeacherConfig()``'s defaults (both slips at 0.6, compensated) are what the shipped base
was fine-tuned on, and ``TeacherConfig.perfect()`` turns every slip off:

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

import hashlib
import random
import re
from dataclasses import dataclass, field
from fractions import Fraction

from veriloop.errors import InputError
from veriloop.tasks.base import BRACES, Problem, register_task
from veriloop.tasks.expressions import (
    Node,
    apply_op,
    binary,
    format_int,
    internal_nodes,
    leaf,
    parse_expression,
    render,
)

# ---------------------------------------------------------------- trace grammar

# at most 1,000 digits: int() refuses over 4,300 (and is quadratic); a longer number is not an answer of this task
NUMBER = r"-?(?:0|[1-9][0-9]{0,999})(?![0-9])"
STEP_RE = re.compile(rf"({NUMBER})([-+*/])({NUMBER})=({NUMBER})")
ANSWER_RE = re.compile(rf"answer=({NUMBER})")
DEFAULT_ANSWER_PREFIX = "answer"


def answer_regex(prefix: str = DEFAULT_ANSWER_PREFIX) -> re.Pattern:
    """``<prefix>=<integer>``; the seeds write the prefix as 答案."""
    return ANSWER_RE if prefix == DEFAULT_ANSWER_PREFIX else re.compile(rf"{re.escape(prefix)}=({NUMBER})")


@dataclass(frozen=True)
class Step:
    """One written equation ``a op b=c`` (as written, not necessarily true)."""

    a: int
    op: str
    b: int
    c: int

    def text(self) -> str:
        return f"{self.a}{self.op}{self.b}={self.c}"

    def is_true(self) -> bool:
        try:
            return apply_op(self.op, Fraction(self.a), Fraction(self.b)) == self.c
        except ZeroDivisionError:
            return False


class TraceFormatError(ValueError):
    """A completion that does not follow ``(a op b=c;)* answer=N``."""


def parse_trace(text: str, answer_prefix: str = DEFAULT_ANSWER_PREFIX) -> tuple[list[Step], int]:
    """Parse a strict trace into its steps and final answer, or raise TraceFormatError."""
    segments = text.split(";")
    steps = []
    for i, seg in enumerate(segments[:-1], start=1):
        m = STEP_RE.fullmatch(seg)
        if m is None:
            raise TraceFormatError(f"segment {i} {seg!r} is not an equation 'a op b=c'")
        steps.append(Step(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
    m = answer_regex(answer_prefix).fullmatch(segments[-1])
    if m is None:
        raise TraceFormatError(f"last segment {segments[-1]!r} is not '{answer_prefix}=<integer>'")
    return steps, int(m.group(1))


def canonical_trace(node: Node) -> str:
    """The correct trace: each operation once, post-order, then the answer."""
    steps = [Step(int(n.left.value), n.op, int(n.right.value), int(n.value)).text() for n in internal_nodes(node)]
    return ";".join(steps + [f"answer={format_int(node.value)}"])


# ---------------------------------------------------------------- configuration


@dataclass
class ArithmeticConfig:
    """Difficulty knobs of the built-in arithmetic task."""

    digits: int = field(default=2, metadata={"help": "operand digits: leaves are drawn from [1, 10**digits - 1]"})
    min_ops: int = field(default=2, metadata={"help": "fewest binary operations in a problem"})
    max_ops: int = field(default=2, metadata={"help": "most binary operations in a problem"})
    max_value: int = field(default=999, metadata={"help": "every intermediate value lies in [0, max_value]"})
    max_factor: int = field(
        default=12, metadata={"help": "the smaller factor of '*' and the divisor of '/' lie in [2, max_factor]"}
    )
    op_weights: str = field(
        default="+:1,-:2,*:1.5,/:1", metadata={"help": "relative frequency of each operator, as 'op:weight,...'"}
    )
    heldout_size: int = field(default=400, metadata={"help": "number of problems in the fixed held-out set"})
    heldout_seed: int = field(default=1234, metadata={"help": "seed that draws the held-out set"})
    heldout_share: float = field(
        default=0.1, metadata={"help": "share of the problem space (by hash of the text) reserved for held-out"}
    )
    validation_size: int = field(default=400, metadata={"help": "number of problems in the fixed validation set"})
    validation_seed: int = field(default=4321, metadata={"help": "seed that draws the validation set"})
    validation_share: float = field(
        default=0.05,
        metadata={"help": "share of the problem space (by hash, next to held-out) reserved for validation: "
                  "choices and tuning read it, never the held-out set"},
    )  # fmt: skip

    def __post_init__(self):
        if self.digits < 1 or self.digits > 4:
            raise InputError(f"arithmetic.digits must be in [1, 4], got {self.digits}")
        if not 1 <= self.min_ops <= self.max_ops <= 6:
            raise InputError(
                "arithmetic.min_ops/max_ops must satisfy 1 <= min_ops <= max_ops <= 6, "
                f"got {self.min_ops}, {self.max_ops}"
            )
        if self.max_factor < 2:
            raise InputError(f"arithmetic.max_factor must be >= 2, got {self.max_factor}")
        if self.max_value < 10:
            raise InputError(f"arithmetic.max_value must be >= 10, got {self.max_value}")
        if not 0.0 < self.heldout_share < 1.0:
            raise InputError(f"arithmetic.heldout_share must be in (0, 1), got {self.heldout_share}")
        if self.heldout_size < 0 or self.validation_size < 0:
            raise InputError("arithmetic.heldout_size and validation_size must be >= 0")
        if not 0.0 < self.validation_share < 1.0 - self.heldout_share:
            raise InputError(
                f"arithmetic.validation_share must be in (0, 1 - heldout_share), got {self.validation_share}"
            )
        self.weights()  # validates op_weights

    def weights(self) -> dict[str, float]:
        out = {}
        for part in self.op_weights.split(","):
            op, sep, w = part.strip().partition(":")
            if not sep or op not in "+-*/" or len(op) != 1:
                raise InputError(f"arithmetic.op_weights: cannot read {part!r} (expected 'op:weight', op in + - * /)")
            try:
                out[op] = float(w)
            except ValueError:
                raise InputError(f"arithmetic.op_weights: weight {w!r} of {op!r} is not a number") from None
            if out[op] < 0:
                raise InputError(f"arithmetic.op_weights: weight of {op!r} is negative")
        if sum(out.values()) <= 0:
            raise InputError("arithmetic.op_weights: all weights are zero")
        return out


@dataclass
class TeacherConfig:
    """How the teacher that writes SFT traces goes wrong (see the module docstring)."""

    multiplication_slip: float = field(
        default=0.6, metadata={"help": "probability that the teacher computes a*b as a+b (wrong answer)"}
    )
    subtraction_slip: float = field(
        default=0.6, metadata={"help": "probability that a subtraction used by a later step is computed b-a"}
    )
    compensate_slips: bool = field(
        default=True,
        metadata={"help": "the step consuming a slipped subtraction uses its magnitude (right answer, wrong steps)"},
    )
    wrong_step_rate: float = field(
        default=0.0,
        metadata={"help": "fraction of traces with one intermediate written one too high, compensated next step"},
    )

    def __post_init__(self):
        for name in ("multiplication_slip", "subtraction_slip", "wrong_step_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise InputError(f"teacher.{name} must be in [0, 1], got {v}")

    @classmethod
    def perfect(cls) -> TeacherConfig:
        return cls(multiplication_slip=0.0, subtraction_slip=0.0, wrong_step_rate=0.0)


# ---------------------------------------------------------------- generation


def _hash_unit(text: str) -> float:
    """A stable number in [0, 1) from the text, independent of any seed."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / 16**12


class ArithmeticGenerator:
    """Draws random expression trees satisfying the config's constraints."""

    def __init__(self, cfg: ArithmeticConfig):
        self.cfg = cfg
        self.lo, self.hi = 1, 10**cfg.digits - 1
        w = cfg.weights()
        self.ops = [op for op in "+-*/" if w.get(op, 0) > 0]
        self.op_w = [w[op] for op in self.ops]

    def _ok(self, node: Node) -> bool:
        v = node.value
        if v.denominator != 1 or not 0 <= v <= self.cfg.max_value:
            return False
        if node.op == "*" and min(node.left.value, node.right.value) < 2:
            return False
        if node.op == "*" and min(node.left.value, node.right.value) > self.cfg.max_factor:
            return False
        if node.op == "/" and not 2 <= node.right.value <= self.cfg.max_factor:
            return False
        return True

    def _leaf_choices(self, op: str, other: int, leaf_is_right: bool) -> list[int] | range:
        """Leaf values that make ``other op leaf`` (or ``leaf op other``) valid."""
        lo, hi, mv, mf = self.lo, self.hi, self.cfg.max_value, self.cfg.max_factor
        if op == "+":
            return range(lo, min(hi, mv - other) + 1)
        if op == "-":
            return range(lo, min(hi, other) + 1) if leaf_is_right else range(max(lo, other), hi + 1)
        if op == "*":
            if other < 2:
                return []
            cap = mv // other
            if other > mf:
                cap = min(cap, mf)
            return range(max(2, lo), min(hi, cap) + 1)
        if op == "/":
            if leaf_is_right:  # divisors of `other`
                return [d for d in range(2, min(mf, hi) + 1) if other % d == 0 and d >= lo]
            if not 2 <= other <= mf:
                return []
            return [other * q for q in range(1, hi // other + 1) if other * q >= lo]
        raise ValueError(op)

    def _tree(self, n_ops: int, rng: random.Random) -> Node | None:
        if n_ops == 0:
            return leaf(rng.randint(self.lo, self.hi))
        k = rng.randint(0, n_ops - 1)
        op = rng.choices(self.ops, weights=self.op_w)[0]
        for _ in range(8):
            left, right = self._tree(k, rng), self._tree(n_ops - 1 - k, rng)
            if left is None or right is None:
                continue
            if right.is_leaf:
                choices = (
                    self._leaf_choices(op, int(left.value), leaf_is_right=True) if left.value.denominator == 1 else []
                )
                if not choices:
                    continue
                right = leaf(rng.choice(choices))
            elif left.is_leaf:
                choices = self._leaf_choices(op, int(right.value), leaf_is_right=False)
                if not choices:
                    continue
                left = leaf(rng.choice(choices))
            if op == "/" and right.value == 0:
                continue
            node = binary(op, left, right)
            if self._ok(node):
                return node
        return None

    def sample(self, rng: random.Random) -> Node:
        for _ in range(10_000):
            n = rng.randint(self.cfg.min_ops, self.cfg.max_ops)
            node = self._tree(n, rng)
            if node is not None:
                return node
        raise InputError(f"could not draw a problem satisfying {self.cfg}; loosen max_value / max_factor")


def problem_tags(node: Node) -> tuple[str, ...]:
    """Classes used in evaluation: where the teacher's two slips can strike."""
    ops = internal_nodes(node)
    tags = []
    if any(n.op == "*" for n in ops):
        tags.append("mul")  # a multiplication slip changes the answer
    if any(n.op == "-" for n in ops[:-1]):
        tags.append("sub-inner")  # a subtraction slip here is compensated
    if not tags:
        tags.append("clean")
    return tuple(tags)


# ---------------------------------------------------------------- teacher


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


# ---------------------------------------------------------------- the task

PROMPT_SUFFIX = "?"
# task.reasoning -> what follows the expression in a prompt: the trace (cot) or a program (pot) is asked for
PROMPT_SUFFIXES = {"cot": PROMPT_SUFFIX, "pot": "?py:", "tool": "?run:"}


def make_problem(expression: str, reasoning: str = "cot") -> Problem:
    """The problem of ``expression``; its id depends on the expression only, so the same problem asked for a
    trace or for a program is one problem."""
    node = parse_expression(expression)
    text = render(node)
    return Problem(
        id="arith-" + hashlib.sha256(text.encode()).hexdigest()[:12],
        prompt=text + PROMPT_SUFFIXES[reasoning],
        reference=text,
        tags=problem_tags(node),
    )


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


class ArithmeticTask:
    """Seeded problem source with disjoint train / validation / held-out splits.

    A problem's split is fixed by a hash of its text: held-out below ``heldout_share``, validation in
    the next ``validation_share``, train above.  (The shipped base was fine-tuned before the
    validation split existed: its SFT traces came from what is now train and validation, never
    held-out.)"""

    name = "arithmetic"
    step_splitter = "semicolon"  # veriloop.prm.split_steps: one step per ';'-separated segment
    prompt_template = "{reference}" + PROMPT_SUFFIX  # the prompt from the reference (a PRM verifier needs it)
    default_verifier = "arithmetic-outcome"

    def __init__(self, config: ArithmeticConfig | None = None, teacher: TeacherConfig | None = None,
                 reasoning: str = "cot"):  # fmt: skip
        if reasoning not in PROMPT_SUFFIXES:
            raise InputError(f"task.reasoning for the arithmetic task must be one of {tuple(PROMPT_SUFFIXES)}, "
                             f"got {reasoning!r}")  # fmt: skip
        self.config = config or ArithmeticConfig()
        self.teacher = teacher or TeacherConfig()
        self.reasoning = reasoning
        self.prompt_template = "{reference}" + PROMPT_SUFFIXES[reasoning]
        verifiers = {"pot": "arithmetic-pot", "tool": "arithmetic-tool"}
        self.default_verifier = verifiers.get(reasoning, "arithmetic-outcome")
        self.tool_format = BRACES  # task.reasoning tool: {code}[output]
        # sampling.max_thinking_tokens: what budget forcing appends to a trace cut mid-thought (rollout/thinking.py)
        self.thinking_end = ";answer=" if reasoning == "cot" else ""
        self.generator = ArithmeticGenerator(self.config)
        self._fixed: dict[str, list[Problem]] = {}

    def split_of(self, text: str) -> str:
        u, c = _hash_unit(text), self.config
        if u < c.heldout_share:
            return "heldout"
        return "validation" if u < c.heldout_share + c.validation_share else "train"

    def is_heldout(self, text: str) -> bool:
        return self.split_of(text) == "heldout"

    def _draw(self, rng: random.Random, split: str) -> Node:
        for _ in range(100_000):
            node = self.generator.sample(rng)
            if self.split_of(render(node)) == split:
                return node
        raise RuntimeError(f"could not draw a problem from the {split} split")

    def train_nodes(self, n: int, rng: random.Random) -> list[Node]:
        return [self._draw(rng, "train") for _ in range(n)]

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        return [make_problem(render(node), self.reasoning) for node in self.train_nodes(n, rng)]

    def heldout(self) -> list[Problem]:
        return self._fixed_set("heldout", self.config.heldout_size, self.config.heldout_seed)

    def validation(self) -> list[Problem]:
        return self._fixed_set("validation", self.config.validation_size, self.config.validation_seed)

    def _fixed_set(self, split: str, size: int, seed: int) -> list[Problem]:
        if split not in self._fixed:
            rng = random.Random(seed)
            seen, out = set(), []
            while len(out) < size:
                text = render(self._draw(rng, split))
                if text not in seen:
                    seen.add(text)
                    out.append(make_problem(text, self.reasoning))
            self._fixed[split] = out
        return self._fixed[split]

    def teacher_completion(self, problem: Problem, rng: random.Random) -> str:
        """The teacher's trace (cot), program (pot) or tool-integrated trace (tool) of the problem."""
        write = {"pot": program_trace, "tool": tool_trace}.get(self.reasoning, teacher_trace)
        return write(parse_expression(problem.reference), self.teacher, rng)

    def sub_questions(self, prompt: str) -> list[str]:
        """rStar's sub-questions of a problem (action A3), as prompts: the operand sub-expressions of its root
        operation that are not bare numbers, left then right (the order a trace computes them in)."""
        try:
            node = parse_expression(prompt.removesuffix(PROMPT_SUFFIXES[self.reasoning]))
        except ValueError:
            return []  # not one of this task's prompts: nothing to decompose
        if node.is_leaf:
            return []
        return [make_problem(render(child), self.reasoning).prompt for child in (node.left, node.right)
                if not child.is_leaf]  # fmt: skip


@register_task("arithmetic")
def _arithmetic(arithmetic: ArithmeticConfig | None = None, teacher: TeacherConfig | None = None,
                reasoning: str = "cot", **_):  # fmt: skip
    return ArithmeticTask(arithmetic, teacher, reasoning)
