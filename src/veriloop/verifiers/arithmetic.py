"""Verifiers of the arithmetic task: outcome, format, process, and their composite.

The reference is the problem's expression (``(2+3)*4``), evaluated exactly; a reference
that does not parse or is not an integer raises ``VerifierError`` (an error, not a 0).
As in the seeds, each verifier checks one thing: a format failure is not a maths failure.

* ``arithmetic-outcome`` (O): the one final value, read by the strict final-answer policies
  of ``answers.extract_answer`` (``answer=N``, ``答案=N``, ``得数为N``, ``#### N``, ``\\boxed{N}``,
  "the answer is N"; ``answer_prefix`` adds ``PREFIX=N``) as a number; 1 iff its value is an
  integer equal to the reference's.  Two answers (``20或9``, ``answer=20;answer=9``) are
  ``ambiguous``; a negated, hedged or conditional value or trailing prose is no answer.
  ``03``, ``+3`` and ``3.0`` denote the integer 3 and count (the format check is where they
  fail); ``3.5`` and ``24/8`` are wrong.  No last-line fallback: a trace that stops without
  stating an answer (``2+3=5;5*4=20``, or one cut off by the length limit) states none, and
  its last result is an intermediate value, not a claim.  Steps are not read.
* ``arithmetic-format`` (F), after NFKC (``答案＝３`` is ``答案=3``): ``require="trace"`` (the
  default; the built-in prompt asks for it): the whole completion is ``(a op b=c;)*PREFIX=N``;
  ``require="ending"`` (the seeds' F): it ends with ``PREFIX=N`` (an integer), stated once.
* ``arithmetic-process`` (P), independent of the format: the steps are read leniently
  (``＋`` ``＝`` ``×`` ``÷``; separated by ``;`` ``；`` ``，`` ``,`` or newlines); every segment is
  an equation or the answer statement, no equation after the answer; every equation is true;
  every step is one operation of the expression applied to numbers of the problem or results
  of earlier steps (any order that respects the tree; ``+``/``*`` operands may be swapped),
  every operation is computed once; and the outcome is correct and equals the last result.
* ``arithmetic``: 0.8 outcome + 0.2 format (the seeds' R = 0.8 O + 0.2 F); ``format_require``
  is passed to the format part; the verdict's outcome is the outcome part's.

Outcomes (``Verdict.outcome``): outcome ``correct`` / ``wrong`` / ``no_answer`` / ``ambiguous``;
process ``correct`` / ``wrong_steps`` (right answer, the steps fail) / ``wrong`` / ``no_answer`` /
``ambiguous``; format ``correct`` / ``bad_format``.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from veriloop.errors import InputError
from veriloop.tasks.arithmetic import (
    DEFAULT_ANSWER_PREFIX,
    NUMBER,
    STEP_RE,
    Step,
    TraceFormatError,
    parse_trace,
)
from veriloop.tasks.expressions import ExpressionError, Node, internal_nodes, parse_expression
from veriloop.verifiers.answers import MARKER_POLICIES, extract_answer, normalize_text
from veriloop.verifiers.base import Verdict, Verifier, VerifierError, is_correct
from veriloop.verifiers.composite import WeightedVerifier

FORMAT_REQUIRE = ("trace", "ending")
_EQUATION = re.compile(r"(-?\d+)\s*([-+*/])\s*(-?\d+)\s*=\s*(-?\d+)")  # lenient: spaces, leading zeros


@lru_cache(maxsize=65536)
def reference_tree(reference: str) -> Node:
    try:
        node = parse_expression(reference)
    except ExpressionError as e:
        raise VerifierError(f"reference {reference!r} is not a valid expression: {e}") from None
    if node.value.denominator != 1:
        raise VerifierError(f"reference {reference!r} has the non-integer value {node.value}")
    return node


def answer_policies(prefix: str = DEFAULT_ANSWER_PREFIX) -> tuple[str, ...]:
    """Every answer marker (``answer`` and ``答案`` are built in), plus ``PREFIX=`` for another prefix."""
    return MARKER_POLICIES + (() if prefix in ("answer", "答案") else (f"prefix={prefix}",))


def read_outcome(completion: str, value: int, prefix: str = DEFAULT_ANSWER_PREFIX) -> tuple[str, str, int | None]:
    """``(outcome, detail, answer)``: the completion's one final value checked against ``value``."""
    found = extract_answer(completion, answer_policies(prefix), kind="number")
    if found.status == "none":
        return "no_answer", f"no final answer ({found.reason})", None
    if found.status == "ambiguous":
        return "ambiguous", f"several final answers {list(found.candidates)} ({found.reason})", None
    text = (found.answer or "").replace(",", "")
    try:
        number = Decimal(text) if re.fullmatch(r"[-+]?\d+(?:\.\d+)?", text) else None
    except InvalidOperation:
        number = None
    if number is None or number != number.to_integral_value():
        return "wrong", f"answer {found.answer!r} is not an integer", None
    if int(number) != value:
        return "wrong", f"answer {found.answer} != {value}", int(number)
    return "correct", "", int(number)


def read_steps(completion: str, prefix: str = DEFAULT_ANSWER_PREFIX) -> tuple[list[Step], str]:
    """The equations of a leniently written trace, and what is wrong with its layout ("" if nothing)."""
    segments = [s.strip() for s in re.split(r"[;,\n]", normalize_text(completion)) if s.strip()]
    steps: list[Step] = []
    answered = False
    for k, seg in enumerate(segments, start=1):
        m = _EQUATION.fullmatch(seg)
        if m and not answered:
            steps.append(Step(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
        elif m:
            return steps, f"segment {k} {seg!r} comes after the answer"
        elif extract_answer(seg, answer_policies(prefix), kind="number").status != "none":
            answered = True
        else:
            return steps, f"segment {k} {seg!r} is neither an equation 'a op b=c' nor the answer"
    return steps, ""


def _matches(step: Step, node: Node) -> bool:
    a, b = node.left.value, node.right.value
    if step.op != node.op:
        return False
    if (step.a, step.b) == (a, b):
        return True
    return node.op in "+*" and (step.b, step.a) == (a, b)


def check_process(steps: list[Step], answer: int, root: Node) -> tuple[bool, str]:
    """Do the written steps compute ``root``, each true, each from available numbers?"""
    for i, s in enumerate(steps, start=1):
        if not s.is_true():
            return False, f"step {i} '{s.text()}' is false"
    ops = internal_nodes(root)
    if not ops:
        return (not steps and answer == root.value), "a bare number needs no steps"
    furthest = [0]

    def search(i: int, done: frozenset) -> bool:
        furthest[0] = max(furthest[0], i)
        if i == len(steps):
            return len(done) == len(ops)
        for n in ops:
            if id(n) in done:
                continue
            ready = all(c.is_leaf or id(c) in done for c in (n.left, n.right))
            if ready and _matches(steps[i], n):
                if n is root and i != len(steps) - 1:
                    continue  # the whole expression must be the last step
                if search(i + 1, done | {id(n)}):
                    return True
        return False

    if not search(0, frozenset()):
        if len(steps) < len(ops):
            return False, f"{len(steps)} steps for an expression of {len(ops)} operations"
        i = min(furthest[0], len(steps) - 1)
        return False, f"step {i + 1} '{steps[i].text()}' is not an operation of the problem on available numbers"
    if steps[-1].c != answer:
        return False, f"last result {steps[-1].c} is not the answer {answer}"
    return True, ""


def _sound_prefix(steps: list[Step], root: Node) -> bool:
    """Can ``steps`` be the start of a correct computation of ``root`` (each true, each an
    operation of the problem on available numbers, each computed once, the root last)?"""
    ops = internal_nodes(root)

    def search(i: int, done: frozenset) -> bool:
        if i == len(steps):
            return True
        for n in ops:
            if id(n) in done or not all(c.is_leaf or id(c) in done for c in (n.left, n.right)):
                continue
            if _matches(steps[i], n) and steps[i].is_true() and (n is not root or i == len(steps) - 1):
                if search(i + 1, done | {id(n)}):
                    return True
        return False

    return search(0, frozenset())


def sound_steps(completion: str, reference: str, prefix: str = DEFAULT_ANSWER_PREFIX) -> list[bool]:
    """The exact process checker, step by step: entry k is true iff segments 1..k of the
    completion (split at ``;``, blank segments skipped as ``veriloop.prm.split_steps`` does)
    are a sound start of the solution.  The final ``answer=N`` segment is sound iff the
    whole completion passes ``arithmetic-process``.  Once a step is unsound, every later one is.
    This is ground truth for judging a process reward model, never a training label."""
    root = reference_tree(reference)
    segments = [s.strip() for s in completion.split(";") if s.strip()]
    out, steps, ok = [], [], True
    for seg in segments:
        m = STEP_RE.fullmatch(seg)
        if ok and m is not None:
            steps.append(Step(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
            ok = _sound_prefix(steps, root)
        elif ok:  # not an equation: sound only as the final answer of a correct trace
            ok = seg is segments[-1] and is_correct(ArithmeticProcess(prefix).verify(completion, reference))
        out.append(ok)
    return out


class _Arithmetic(Verifier):
    """``answer_prefix`` names the final statement's key (``answer`` by default; the seeds use 答案)."""

    def __init__(self, answer_prefix: str = DEFAULT_ANSWER_PREFIX):
        if not answer_prefix or ";" in answer_prefix or "=" in answer_prefix:
            raise InputError(f"answer_prefix must be a non-empty word without ';' or '=', got {answer_prefix!r}")
        self.answer_prefix = answer_prefix

    def _outcome(self, outcome: str, components: dict[str, float], score: float, details: str = "") -> Verdict:
        return Verdict(float(score), dict(components), self.tag, details, outcome)


class ArithmeticOutcome(_Arithmetic):
    name, version = "arithmetic-outcome", "5"  # 5: round 3; 4: real forms; 3: polarity; 2: policies

    def verify(self, completion: str, reference: str) -> Verdict:
        outcome, why, _ = read_outcome(completion, int(reference_tree(reference).value), self.answer_prefix)
        ok = float(outcome == "correct")
        return self._outcome(outcome, {"outcome": ok}, ok, why)


class ArithmeticFormat(_Arithmetic):
    """``require``: ``trace`` (the whole ``a op b=c;...;PREFIX=N`` trace) or ``ending`` (only the
    required ending ``PREFIX=N``, an integer, stated once)."""

    name, version = "arithmetic-format", "5"  # 5: round 3; 4: real models' forms; 3: polarity; 2: NFKC first

    def __init__(self, answer_prefix: str = DEFAULT_ANSWER_PREFIX, require: str = "trace"):
        super().__init__(answer_prefix)
        if require not in FORMAT_REQUIRE:
            raise InputError(f"require must be one of {FORMAT_REQUIRE}, got {require!r}")
        self.require = require

    def check(self, completion: str) -> str:
        """What is wrong with the format ("" if nothing)."""
        text = unicodedata.normalize("NFKC", completion).strip()
        if self.require == "trace":
            try:
                parse_trace(text, self.answer_prefix)
            except TraceFormatError as e:
                return str(e)
            return ""
        key = re.escape(self.answer_prefix)
        if not re.search(rf"(?<![A-Za-z0-9_]){key}=({NUMBER})$", text):
            return f"does not end with '{self.answer_prefix}=<integer>'"
        stated = len(re.findall(rf"(?<![A-Za-z0-9_]){key}\s*[=:]", text))
        return "" if stated == 1 else f"'{self.answer_prefix}=' is stated {stated} times"

    def verify(self, completion: str, reference: str) -> Verdict:
        reference_tree(reference)  # an invalid reference is an error for every verifier
        why = self.check(completion)
        ok = float(not why)
        return self._outcome("correct" if ok else "bad_format", {"format": ok}, ok, why)


class ArithmeticProcess(_Arithmetic):
    name, version = "arithmetic-process", "5"  # 5: round 3; 4: real models' forms; 3: polarity; 2: format-free

    def verify(self, completion: str, reference: str) -> Verdict:
        root = reference_tree(reference)
        outcome, why, answer = read_outcome(completion, int(root.value), self.answer_prefix)
        steps, layout = read_steps(completion, self.answer_prefix)
        comps = {
            "format": float(not ArithmeticFormat(self.answer_prefix).check(completion)),
            "outcome": float(outcome == "correct"),
            "steps_true": sum(s.is_true() for s in steps) / len(steps) if steps else 1.0,
        }
        if outcome != "correct":
            return self._outcome(outcome, {**comps, "process": 0.0}, 0.0, why)
        ok, reason = (False, layout) if layout else check_process(steps, answer, root)
        return self._outcome("correct" if ok else "wrong_steps", {**comps, "process": float(ok)}, float(ok), reason)


def sound_tool_outputs(outputs: list[str], root: Node) -> tuple[bool, str]:
    """Do a tool-integrated trace's outputs compute the problem soundly: each one the value of one operation of the
    problem whose operands were computed before it (each operation once, in any such order), the root's last?
    The interpreter makes every block's arithmetic true, so what can be wrong is the code: swapped operands, a
    wrong number, a skipped or repeated operation.  Only values are compared (a block is not parsed)."""
    ops = internal_nodes(root)
    try:
        values = [int(o.strip()) for o in outputs]
    except ValueError:
        return False, f"a tool output is not an integer: {outputs}"
    if len(values) != len(ops):
        return False, f"{len(values)} tool outputs for {len(ops)} operations"

    def search(i: int, done: frozenset) -> bool:
        if i == len(values):
            return True
        for n in ops:
            ready = all(c.is_leaf or id(c) in done for c in (n.left, n.right))
            if id(n) in done or not ready or values[i] != n.value or (n is root and i != len(values) - 1):
                continue
            if search(i + 1, done | {id(n)}):
                return True
        return False

    return (True, "") if search(0, frozenset()) else (False, f"tool outputs {values} are not the problem's steps")


TOOL_OUTPUT_RE = re.compile(r"\[([^\[\]]*)\]")  # the built-in tool format's output blocks, [..] (tasks/base.BRACES)


class ArithmeticTool(_Arithmetic):
    """A tool-integrated trace of the built-in task (``task.reasoning tool``: ``{a=2+3;a}[5]{a*4}[20]answer=20``):
    the final answer is read from the text after the last output block (a value printed by the tool is not an
    answer), strictly as ``arithmetic-outcome`` reads a trace.  ``components["process"]``: the answer is right and
    the tool outputs are the problem's steps (``sound_tool_outputs``); ``require="process"`` scores that instead."""

    name, version = "arithmetic-tool", "4"  # 4: round 3; 3: real models' forms; 2: polarity (answers.py)

    def __init__(self, answer_prefix: str = DEFAULT_ANSWER_PREFIX, require: str = "outcome"):
        super().__init__(answer_prefix)
        if require not in ("outcome", "process"):
            raise InputError(f"arithmetic-tool: require must be outcome or process, got {require!r}")
        self.require = require

    def verify(self, completion: str, reference: str) -> Verdict:
        root = reference_tree(reference)
        tail = completion[completion.rfind("]") + 1 :]
        outcome, why, _ = read_outcome(tail, int(root.value), self.answer_prefix)
        sound, reason = sound_tool_outputs(TOOL_OUTPUT_RE.findall(completion), root)
        ok, process = outcome == "correct", outcome == "correct" and sound
        comps = {"outcome": float(ok), "process": float(process)}
        if self.require == "outcome" or not ok:
            return self._outcome(outcome, comps, float(ok), why)
        return self._outcome("correct" if process else "wrong_steps", comps, float(process), reason)


def arithmetic_tool_process(answer_prefix: str = DEFAULT_ANSWER_PREFIX) -> ArithmeticTool:
    v = ArithmeticTool(answer_prefix, require="process")
    v.name = "arithmetic-tool-process"
    return v


def arithmetic_composite(
    outcome_weight: float = 0.8,
    format_weight: float = 0.2,
    answer_prefix: str = DEFAULT_ANSWER_PREFIX,
    format_require: str = "trace",
) -> Verifier:
    """The seeds' R = 0.8 O + 0.2 F; ``format_require="ending"`` with ``answer_prefix="答案"`` is the
    seeds' exact setting (F checks only the ending ``答案=整数``)."""
    parts = {"arithmetic-outcome": outcome_weight, "arithmetic-format": format_weight}
    options = {
        "arithmetic-outcome": {"answer_prefix": answer_prefix},
        "arithmetic-format": {"answer_prefix": answer_prefix, "require": format_require},
    }
    v = WeightedVerifier(parts, options, outcome_from="arithmetic-outcome")
    v.name = "arithmetic"
    return v
