"""Verifiers of the arithmetic task: outcome, format, process, and their composite.

The reference is the problem's expression (``(2+3)*4``), evaluated exactly; a reference
that does not parse or is not an integer raises ``VerifierError`` (an error, not a 0).

* ``arithmetic-outcome``: 1 iff the completion has exactly one ``answer=`` segment, it
  is the last segment, it is exactly ``answer=<integer>`` (no trailing text, no ``or``,
  no leading zeros) and the integer equals the reference's value.  Steps are not read.
* ``arithmetic-format``: 1 iff the whole completion is ``(a op b=c;)*answer=N``.
* ``arithmetic-process``: 1 iff format and outcome pass, every equation is true, every
  step is one operation of the expression applied to numbers of the problem or results
  of earlier steps (any order that respects the tree; ``+``/``*`` operands may be
  swapped), every operation is computed once, and the last result is the answer.
* ``arithmetic``: 0.8 outcome + 0.2 format (the seeds' R = 0.8 O + 0.2 F).
"""

from __future__ import annotations

from functools import lru_cache

from veriloop.tasks.arithmetic import (
    DEFAULT_ANSWER_PREFIX,
    STEP_RE,
    Step,
    TraceFormatError,
    answer_regex,
    parse_trace,
)
from veriloop.tasks.expressions import ExpressionError, Node, internal_nodes, parse_expression
from veriloop.verifiers.base import Verdict, Verifier, VerifierError, register
from veriloop.verifiers.composite import WeightedVerifier


@lru_cache(maxsize=65536)
def reference_tree(reference: str) -> Node:
    try:
        node = parse_expression(reference)
    except ExpressionError as e:
        raise VerifierError(f"reference {reference!r} is not a valid expression: {e}") from None
    if node.value.denominator != 1:
        raise VerifierError(f"reference {reference!r} has the non-integer value {node.value}")
    return node


def check_outcome(completion: str, value: int, prefix: str = DEFAULT_ANSWER_PREFIX) -> tuple[bool, str]:
    text = completion.strip()
    segments = text.split(";")
    n_answers = sum(1 for s in segments if s.startswith(prefix))
    if n_answers == 0:
        return False, f"no '{prefix}=' segment"
    if n_answers > 1:
        return False, f"{n_answers} answer segments; exactly one is allowed"
    m = answer_regex(prefix).fullmatch(segments[-1])
    if m is None:
        return False, f"final segment {segments[-1]!r} is not exactly '{prefix}=<integer>'"
    got = int(m.group(1))
    if got != value:
        return False, f"answer {got} != {value}"
    return True, ""


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
            ok = seg is segments[-1] and ArithmeticProcess(prefix).verify(completion, reference).score == 1.0
        out.append(ok)
    return out


class _Arithmetic(Verifier):
    """``answer_prefix`` names the final segment's key (``answer`` by default; the seeds use 答案)."""

    def __init__(self, answer_prefix: str = DEFAULT_ANSWER_PREFIX):
        if not answer_prefix or ";" in answer_prefix or "=" in answer_prefix:
            raise ValueError(f"answer_prefix must be a non-empty word without ';' or '=', got {answer_prefix!r}")
        self.answer_prefix = answer_prefix


class ArithmeticOutcome(_Arithmetic):
    name, version = "arithmetic-outcome", "1"

    def verify(self, completion: str, reference: str) -> Verdict:
        ok, why = check_outcome(completion, int(reference_tree(reference).value), self.answer_prefix)
        return self._verdict(float(ok), {"outcome": float(ok)}, why)


class ArithmeticFormat(_Arithmetic):
    name, version = "arithmetic-format", "1"

    def verify(self, completion: str, reference: str) -> Verdict:
        reference_tree(reference)  # an invalid reference is an error for every verifier
        try:
            parse_trace(completion.strip(), self.answer_prefix)
        except TraceFormatError as e:
            return self._verdict(0.0, {"format": 0.0}, str(e))
        return self._verdict(1.0, {"format": 1.0})


class ArithmeticProcess(_Arithmetic):
    name, version = "arithmetic-process", "1"

    def verify(self, completion: str, reference: str) -> Verdict:
        root = reference_tree(reference)
        text = completion.strip()
        outcome, why = check_outcome(text, int(root.value), self.answer_prefix)
        try:
            steps, answer = parse_trace(text, self.answer_prefix)
        except TraceFormatError as e:
            comps = {"format": 0.0, "outcome": float(outcome), "process": 0.0}
            return self._verdict(0.0, comps, str(e))
        true_frac = sum(s.is_true() for s in steps) / len(steps) if steps else 1.0
        ok, reason = check_process(steps, answer, root)
        process = ok and outcome
        if ok and not outcome:
            reason = why
        comps = {"format": 1.0, "outcome": float(outcome), "steps_true": true_frac, "process": float(process)}
        return self._verdict(float(process), comps, reason)


register("arithmetic-outcome")(ArithmeticOutcome)
register("arithmetic-format")(ArithmeticFormat)
register("arithmetic-process")(ArithmeticProcess)


@register("arithmetic")
def _arithmetic_composite(
    outcome_weight: float = 0.8, format_weight: float = 0.2, answer_prefix: str = DEFAULT_ANSWER_PREFIX
) -> Verifier:
    parts = {"arithmetic-outcome": outcome_weight, "arithmetic-format": format_weight}
    v = WeightedVerifier(parts, {name: {"answer_prefix": answer_prefix} for name in parts})
    v.name = "arithmetic"
    return v
