"""Integer expressions: parse, evaluate exactly, render, and list their binary steps.

The arithmetic task, its teacher and the process verifier all work on the same
expression tree, so "the steps compute the problem's expression" has one meaning.

Grammar (no unary minus in problems; intermediate results may be negative in traces):
    expr   := term (('+' | '-') term)*
    term   := factor (('*' | '/') factor)*
    factor := INT | '(' expr ')'
Operators are left-associative with the usual precedence.  Division is exact
rational division; a task only emits expressions whose every division is exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

OPS = "+-*/"


class ExpressionError(ValueError):
    """The text is not an integer expression of the grammar above."""


@dataclass(frozen=True)
class Node:
    """A leaf (``op is None``, ``value`` the literal) or a binary operation."""

    op: str | None
    value: Fraction
    left: Node | None = None
    right: Node | None = None

    @property
    def is_leaf(self) -> bool:
        return self.op is None


def apply_op(op: str, a: Fraction, b: Fraction) -> Fraction:
    """Exact value of ``a op b``; raises ZeroDivisionError on ``/ 0``."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    raise ValueError(f"unknown operator {op!r}")


def leaf(n: int) -> Node:
    return Node(None, Fraction(n))


def binary(op: str, left: Node, right: Node) -> Node:
    return Node(op, apply_op(op, left.value, right.value), left, right)


_TOKEN = re.compile(r"\s*(?:(\d+)|([-+*/()]))")


def _tokenize(text: str) -> list[tuple[str, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].isspace():
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            bad = text[pos:].lstrip()[:1]
            raise ExpressionError(f"unexpected {bad!r} at position {len(text) - len(text[pos:].lstrip())} in {text!r}")
        tokens.append((m.group(1) or m.group(2), m.start(1) if m.group(1) else m.start(2)))
        pos = m.end()
    return tokens


def parse_expression(text: str) -> Node:
    """Parse ``text`` (spaces between tokens allowed) into a tree; errors name the position."""
    tokens = _tokenize(text)
    if not tokens:
        raise ExpressionError("empty expression")
    i = 0

    def peek() -> str:
        return tokens[i][0] if i < len(tokens) else ""

    def where() -> str:
        return f"position {tokens[i][1]}" if i < len(tokens) else "the end"

    def factor() -> Node:
        nonlocal i
        tok = peek()
        if tok == "(":
            i += 1
            node = total()
            if peek() != ")":
                raise ExpressionError(f"expected ')' at {where()} in {text!r}")
            i += 1
            return node
        if tok.isdigit():
            i += 1
            return leaf(int(tok))
        raise ExpressionError(f"expected a number or '(' at {where()} in {text!r}")

    def product() -> Node:
        nonlocal i
        node = factor()
        while peek() in ("*", "/"):
            op = peek()
            i += 1
            right = factor()
            try:
                node = binary(op, node, right)
            except ZeroDivisionError:
                raise ExpressionError(f"division by zero in {text!r}") from None
        return node

    def total() -> Node:
        nonlocal i
        node = product()
        while peek() in ("+", "-"):
            op = peek()
            i += 1
            node = binary(op, node, product())
        return node

    node = total()
    if i != len(tokens):
        raise ExpressionError(f"unexpected {peek()!r} at {where()} in {text!r}")
    return node


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def render(node: Node) -> str:
    """Shortest text that parses back to the same tree (left-associative, usual precedence)."""
    if node.is_leaf:
        return str(node.value)
    p = _PRECEDENCE[node.op]
    left = render(node.left)
    if not node.left.is_leaf and _PRECEDENCE[node.left.op] < p:
        left = f"({left})"
    right = render(node.right)
    # A right child of equal precedence needs brackets: a-(b-c), a/(b*c), and also
    # a+(b-c) so that the tree (not just the value) survives a round trip.
    if not node.right.is_leaf and _PRECEDENCE[node.right.op] <= p:
        right = f"({right})"
    return f"{left}{node.op}{right}"


def internal_nodes(node: Node) -> list[Node]:
    """Operation nodes in canonical (post-order, left first) evaluation order."""
    if node.is_leaf:
        return []
    return internal_nodes(node.left) + internal_nodes(node.right) + [node]


def format_int(value: Fraction | int) -> str:
    v = Fraction(value)
    if v.denominator != 1:
        raise ValueError(f"{v} is not an integer")
    return str(v.numerator)
