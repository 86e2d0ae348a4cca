"""The built-in ``arithmetic`` task: integer expressions with strict step traces.

A problem is an expression such as ``(2+3)*4``; the prompt is ``(2+3)*4?`` and the
canonical completion evaluates one binary operation per step, in post-order:

    2+3=5;5*4=20;answer=20

Every intermediate value of a generated problem is an integer in ``[0, max_value]``
and every division is exact.  Train, validation and held-out problems are separated by a hash
of the expression text, so the splits never share a problem whatever the seeds.

The *teacher* that writes the traces SFT imitates (its systematic slips, and its programs and
tool traces): ``arithmetic_teacher.py``.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from fractions import Fraction

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.tasks.arithmetic_teacher import TeacherConfig, program_trace, teacher_trace, tool_trace
from veriloop.tasks.base import BRACES, Problem
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

    digits: int = field(
        default=2, metadata={"help": "operand digits: leaves are drawn from [1, 10**digits - 1]", "ge": 1, "le": 4}
    )
    min_ops: int = field(default=2, metadata={"help": "fewest binary operations in a problem", "ge": 1})
    max_ops: int = field(
        default=2, metadata={"help": "most binary operations in a problem (at least min_ops)", "le": 6}
    )
    max_value: int = field(default=999, metadata={"help": "every intermediate value lies in [0, max_value]", "ge": 10})
    max_factor: int = field(
        default=12,
        metadata={"help": "the smaller factor of '*' and the divisor of '/' lie in [2, max_factor]", "ge": 2},
    )
    op_weights: str = field(
        default="+:1,-:2,*:1.5,/:1", metadata={"help": "relative frequency of each operator, as 'op:weight,...'"}
    )
    heldout_size: int = field(default=400, metadata={"help": "number of problems in the fixed held-out set", "ge": 0})
    heldout_seed: int = field(default=1234, metadata={"help": "seed that draws the held-out set"})
    heldout_share: float = field(
        default=0.1,
        metadata={"help": "share of the problem space (by hash of the text) reserved for held-out", "gt": 0, "lt": 1},
    )
    validation_size: int = field(
        default=400, metadata={"help": "number of problems in the fixed validation set", "ge": 0}
    )
    validation_seed: int = field(default=4321, metadata={"help": "seed that draws the validation set"})
    validation_share: float = field(
        default=0.05,
        metadata={
            "help": "share of the problem space (by hash, next to held-out) reserved for validation: "
            "choices and tuning read it, never the held-out set (below 1 - heldout_share)",
            "gt": 0,
            "lt": 1,
        },
    )

    def __post_init__(self):
        check_typed(self, "arithmetic")
        if self.min_ops > self.max_ops:
            raise InputError(
                "arithmetic.min_ops/max_ops must satisfy 1 <= min_ops <= max_ops <= 6, "
                f"got {self.min_ops}, {self.max_ops}"
            )
        if self.validation_share >= 1.0 - self.heldout_share:
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

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name}, known without loading a row: ``reward`` (what training is rewarded by when no
        verifier is named), ``outcome`` and, where the traces have them, ``format`` and ``process`` (evaluation)."""
        if reasoning == "pot":
            return {"reward": "arithmetic-pot", "outcome": "arithmetic-pot"}
        if reasoning == "tool":
            return {"reward": "arithmetic-tool", "outcome": "arithmetic-tool", "process": "arithmetic-tool-process"}
        # the seeds' R = 0.8 outcome + 0.2 format (verifier arithmetic) rewards the plain traces
        return {
            "reward": "arithmetic",
            "outcome": "arithmetic-outcome",
            "format": "arithmetic-format",
            "process": "arithmetic-process",
        }

    def __init__(
        self, arithmetic: ArithmeticConfig | None = None, teacher: TeacherConfig | None = None, reasoning: str = "cot"
    ):
        if reasoning not in PROMPT_SUFFIXES:
            raise InputError(
                f"task.reasoning for the arithmetic task must be one of {tuple(PROMPT_SUFFIXES)}, got {reasoning!r}"
            )
        self.config = arithmetic or ArithmeticConfig()
        self.teacher = teacher or TeacherConfig()
        self.reasoning = reasoning
        self.prompt_template = "{reference}" + PROMPT_SUFFIXES[reasoning]
        self.default_verifier = self.verifiers(reasoning, "")["outcome"]
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
        return [
            make_problem(render(child), self.reasoning).prompt for child in (node.left, node.right) if not child.is_leaf
        ]
