"""Maths-answer equivalence: plain numbers compared exactly here, everything else by math-verify.

``compare(gold, pred, options)`` returns ``(outcome, detail)`` with outcome one of

* ``correct`` / ``wrong``: the two answers are / are not equivalent under ``options``;
* ``parse_error``: the *prediction* could not be parsed (a verdict of its own, scored 0);
* ``gold_error``: the *reference* could not be parsed (an error: no reward may come from it).

Time limits are not applied here: callers run ``compare`` in a ``WorkerPool`` (hard
wall-clock limit per call, the worker killed and replaced on expiry), so a slow sympy call
becomes the outcome ``timeout`` there, from any thread.  math-verify's own signal-based limits
are switched off (they break off the main thread).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

PERCENT_POLICIES = ("number", "fraction", "either")
# math-verify warns on every call that its own (signal) time limit is off: ours is the pool's.
logging.getLogger("math_verify").setLevel(logging.ERROR)
_PLAIN = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(%?)$")
_SIMPLE_FRACTION = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$|^([-+]?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")


@dataclass(frozen=True)
class MathOptions:
    """Policy questions, answered explicitly.

    percent: how ``N%`` compares with a plain number: ``number`` (``50%`` equals ``50``),
      ``fraction`` (``50%`` equals ``0.5``), ``either`` (both).
    unreduced_fractions: accept ``2/4`` for ``1/2`` (True) or require lowest terms (False).
    rel_tol: relative tolerance for numbers (0 = exact); ``float_rounding``: digits math-verify
      rounds floats to before comparing.
    """

    percent: str = "number"
    unreduced_fractions: bool = True
    rel_tol: float = 0.0
    float_rounding: int = 6

    def __post_init__(self):
        if self.percent not in PERCENT_POLICIES:
            raise ValueError(f"percent must be one of {PERCENT_POLICIES}, got {self.percent!r}")
        if self.rel_tol < 0 or self.float_rounding < 0:
            raise ValueError("rel_tol and float_rounding must be >= 0")


def plain_number(text: str) -> tuple[Decimal, bool] | None:
    """``(value, had_percent)`` of a plain decimal number (thousands separators allowed), else None."""
    t = text.strip().replace("$", "")
    m = _PLAIN.match(t)
    if not m:
        return None
    try:
        return Decimal(t.rstrip("%").replace(",", "")), bool(m.group(1))
    except InvalidOperation:
        return None


def _close(a: Decimal, b: Decimal, rel_tol: float) -> bool:
    if rel_tol == 0:
        return a == b
    return abs(a - b) <= Decimal(str(rel_tol)) * max(abs(a), abs(b))


def _compare_plain(gold: tuple[Decimal, bool], pred: tuple[Decimal, bool], o: MathOptions) -> bool:
    (g, g_pct), (p, p_pct) = gold, pred
    if g_pct == p_pct:
        return _close(g, p, o.rel_tol)
    # one side has %: read it per the policy
    pct_value, other = (g, p) if g_pct else (p, g)
    readings = {"number": [pct_value], "fraction": [pct_value / 100], "either": [pct_value, pct_value / 100]}
    return any(_close(v, other, o.rel_tol) for v in readings[o.percent])


def _unreduced(text: str) -> bool:
    m = _SIMPLE_FRACTION.match(text.strip().strip("$"))
    if not m:
        return False
    num, den = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(4), m.group(5))
    f = Fraction(int(num), int(den)) if int(den) else None
    return f is not None and f.denominator != int(den)


def _parse(text: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    if "$" not in text and any(c in text for c in "\\^{}"):  # bare LaTeX is read as LaTeX first
        parsed = parse(f"${text}$", extraction_config=config, parsing_timeout=None)
        if any(not isinstance(x, str) for x in parsed):
            return parsed
    return parse(text, extraction_config=config, parsing_timeout=None)


def compare(gold: str, pred: str, options: MathOptions = MathOptions()) -> tuple[str, str]:
    """``(outcome, detail)``; see the module docstring.  Runs in a worker process in practice."""
    g_plain, p_plain = plain_number(gold), plain_number(pred)
    if g_plain is not None and p_plain is not None:  # the common case: no sympy needed
        ok = _compare_plain(g_plain, p_plain, options)
        return ("correct", "") if ok else ("wrong", f"{pred} != {gold}")
    if not options.unreduced_fractions and _unreduced(pred):
        return "wrong", f"{pred} is not in lowest terms (unreduced_fractions=False)"
    if options.percent != "fraction" and (g_plain or p_plain):
        # math-verify reads N% as N/100; under percent=number drop the sign before parsing
        gold, pred = gold.replace("%", "").replace("\\%", ""), pred.replace("\\%", "").replace("%", "")
    from math_verify import verify

    # math-verify returns [expression, source string], or only the string when nothing parsed
    g = _parse(gold)
    if not any(not isinstance(x, str) for x in g):
        return "gold_error", f"reference {gold!r} does not parse"
    p = _parse(pred)
    if not any(not isinstance(x, str) for x in p):
        return "parse_error", f"answer {pred!r} does not parse"
    ok = verify(g, p, float_rounding=options.float_rounding, timeout_seconds=None)
    return ("correct", "") if ok else ("wrong", f"{pred} != {gold}")
