"""Maths-answer equivalence: plain numbers compared exactly here, everything else by math-verify.

``judge(reference, spans, options)`` reads a reference and the prediction's answer spans and
returns ``(outcome, detail)`` with outcome one of

* ``correct`` / ``wrong``: the answers are / are not equivalent under ``options``;
* ``ambiguous``: the spans name two different values and the reference is one value;
* ``parse_error``: no span of the *prediction* parses (a verdict of its own, scored 0);
* ``gold_error``: the *reference* does not parse (an error: no reward may come from it).

``compare(gold, pred, options)`` is the same for one answer string on each side.

Parsing and equivalence are math-verify 0.9.0's (``parse`` with LaTeX and expression extraction,
``verify``) at its default options, with these departures, each a policy with its own test:

* **several spans** (two boxes, a box and "the answer is ..."): one answer if they are all
  equivalent; read together as one set when the reference is a set or tuple of several values
  (``\\boxed{1}`` and ``\\boxed{2}`` for ``{1, 2}``); otherwise ``ambiguous``, never the first;
* **equations**: a value is not equal to an equation in variables unless it is an assignment
  (``2x + 3y = 0`` is not the answer ``0``; math-verify reads any equation's right side; as in
  math-verify a left side made of symbols names a quantity: ``k = 1/3``, ``x + y = 1`` for ``1``;
  ``5 \\times 6 = 30`` names ``30``); a reference assignment ``x = 2`` needs an assignment of the
  same variables (``2 = x`` counts; ``2x = 4`` does not state the value); two other equations are
  equal when math-verify says so or one is the other times a nonzero constant (``2x = 4`` and
  ``x = 2``; ``x + y = 1`` and ``x - y = 1`` are different);
* **unparseable LaTeX is not read in part**: when the LaTeX of a span fails to parse, a number that
  math-verify's expression fallback reads out of it (``1 - \\frac{1}{\\mathrm{e}}`` read as ``1``)
  is not the answer; ``\\mathrm{e}`` is Euler's number (math-verify drops it as a unit);
* **exact numbers are compared exactly**: math-verify's numeric check evaluates the difference
  with ``chop=True``, so ``1/2^99`` equals ``1/2^98``; floats still round (``float_rounding``);
* **percent** is the ``percent`` option (math-verify 0.9.0 accepts both ``28%`` = 28 and = 0.28);
* **an answer must parse**: math-verify compares the unparsed text of two answers as strings; here
  a reference that does not parse is ``gold_error`` and a prediction ``parse_error``.
* undelimited text with letters, relations or brackets (``x >= 5``, ``(0,9)``) is read as LaTeX
  first; digits alone (``1000,99``, ``1 000``) by math-verify's number extraction.

Time limits are not applied here: callers run these functions in a ``WorkerPool`` (hard
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

from veriloop.errors import InputError

PERCENT_POLICIES = ("number", "fraction", "either")
# math-verify warns on every call that its own (signal) time limit is off: ours is the pool's.
logging.getLogger("math_verify").setLevel(logging.ERROR)
# thousands groups start with 1-9: "0,111" is a decimal comma (0.111), as math-verify reads it
_PLAIN = re.compile(r"^[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?(%?)$")
_SIMPLE_FRACTION = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$|^([-+]?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")
# letters, relations, brackets or LaTeX: read as maths ("x >= 5", "(0,9)"); digits alone ("1000,99",
# "1 000") are read by math-verify's number extraction (decimal comma, spaced thousands)
_MATHS_TEXT = re.compile(r"[A-Za-z\\<>=\[\]{}()^_|]")
_EULER = re.compile(r"\\(?:mathrm|operatorname|text)\s*\{\s*e\s*\}")


@dataclass(frozen=True)
class MathOptions:
    """Policy questions, answered explicitly.

    percent: how ``N%`` compares with a plain number: ``number`` (``50%`` equals ``50``),
      ``fraction`` (``50%`` equals ``0.5``), ``either`` (both).
    unreduced_fractions: accept ``2/4`` for ``1/2`` (True) or require lowest terms (False).
    rel_tol: relative tolerance for plain numbers (0 = exact); ``float_rounding``: digits
      math-verify rounds floats to before comparing.
    """

    percent: str = "number"
    unreduced_fractions: bool = True
    rel_tol: float = 0.0
    float_rounding: int = 6

    def __post_init__(self):
        if self.percent not in PERCENT_POLICIES:
            raise InputError(f"percent must be one of {PERCENT_POLICIES}, got {self.percent!r}")
        if self.rel_tol < 0 or self.float_rounding < 0:
            raise InputError("rel_tol and float_rounding must be >= 0")


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


def compare_plain(gold: tuple[Decimal, bool], pred: tuple[Decimal, bool], o: MathOptions) -> bool:
    (g, g_pct), (p, p_pct) = gold, pred
    if g_pct == p_pct:
        return _close(g, p, o.rel_tol)
    # one side has %: read it per the policy
    pct_value, other = (g, p) if g_pct else (p, g)
    readings = {"number": [pct_value], "fraction": [pct_value / 100], "either": [pct_value, pct_value / 100]}
    return any(_close(v, other, o.rel_tol) for v in readings[o.percent])


def _unreduced(text: str) -> bool:
    t = re.sub(r"^\\boxed\{(.*)\}$", r"\1", text.strip()).strip().strip("$").strip()
    m = _SIMPLE_FRACTION.match(t)
    if not m:
        return False
    num, den = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(4), m.group(5))
    f = Fraction(int(num), int(den)) if int(den) else None
    return f is not None and f.denominator != int(den)


def _values(parsed: list) -> list:
    return [x for x in parsed if not isinstance(x, str)]


def parse_answer(text: str) -> list:
    """math-verify's reading of ``text``: ``[value, source]``, or ``[]`` when no value parses.

    math-verify would still compare the unparsed text of two such answers as strings; here an
    answer must parse (a reference that does not is an error, a prediction a ``parse_error``)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    latex = LatexExtractionConfig(boxed_match_priority=0)
    text = _EULER.sub("e", text.strip())
    if not _DELIMITED.search(text) and _MATHS_TEXT.search(text):  # undelimited maths is read as LaTeX first
        found = parse(f"${text}$", extraction_config=[latex, ExprExtractionConfig()], parsing_timeout=None)
        if _values(found):
            return found
    found = parse(text, extraction_config=[latex, ExprExtractionConfig()], parsing_timeout=None)
    if not _values(found):
        return []  # at most the text math-verify found, unparsed: that is no answer (and no reference)
    if _DELIMITED.search(text) and len(_values(found)) == 1 and getattr(_values(found)[0], "is_Number", False):
        # a number from a span whose LaTeX failed to parse may be a fragment of it: not the answer
        latex_only = parse(text, extraction_config=[latex], parsing_timeout=None)
        if latex_only and not _values(latex_only):
            return []
    return found


def _is_collection(parsed: list) -> bool:
    from sympy import FiniteSet, Tuple

    return any(isinstance(v, (FiniteSet, Tuple)) and len(v) > 1 for v in _values(parsed))


def _pct_readings(parsed: list, policy: str) -> list[list]:
    """``N%`` read per the percent policy: as N, as N/100, or either (math-verify reads both)."""
    from math_verify.grader import get_pct_val

    n = get_pct_val(_values(parsed)[0]) if _values(parsed) else None
    if n is None:
        return [parsed]
    return {"number": [[n]], "fraction": [[n / 100]], "either": [[n], [n / 100]]}[policy]


def _assignment_target(expr):
    """The variables an assignment sets (``x = 2``, ``2 = x``, ``x = 1 + 1 = 2``), else None."""
    from math_verify.grader import is_assignment_relation, take_first_relation
    from sympy import Eq

    if is_assignment_relation(expr):
        return frozenset(take_first_relation(expr).lhs.free_symbols)
    if isinstance(expr, Eq) and expr.rhs.is_Symbol and not expr.lhs.free_symbols:
        return frozenset([expr.rhs])
    return None


def _same_equation(g, p) -> bool:
    """``g`` and ``p`` are one equation up to a nonzero constant factor (``2x = 4`` and ``x = 2``)."""
    from sympy import Eq, simplify

    if not (isinstance(g, Eq) and isinstance(p, Eq)):
        return False
    a, b = g.lhs - g.rhs, p.lhs - p.rhs
    if a == 0 or b == 0 or not a.free_symbols:
        return False
    ratio = simplify(a / b)
    return not ratio.free_symbols and ratio.is_number and ratio != 0 and ratio.is_finite


def equivalent(gold: list, pred: list, options: MathOptions) -> tuple[bool, str]:
    """math-verify's ``verify`` with our equation and percent policies; ``(equal, why if not)``."""
    from math_verify import verify
    from math_verify.grader import is_equation, is_relation

    if not _values(gold) or not _values(pred):  # text only: math-verify's exact string comparison
        return verify(gold, pred, timeout_seconds=None), ""
    g, p = _values(gold)[0], _values(pred)[0]
    if is_equation(p) and not is_relation(g) and _assignment_target(p) is None and p.free_symbols:
        return False, "an equation in variables is not a value (an assignment such as x = 2 names one)"
    g_sets, p_sets = _assignment_target(g), _assignment_target(p)
    if g_sets is not None and is_equation(p) and p_sets != g_sets:
        return False, "the reference assigns a value; the answer does not assign the same variable"
    ok = any(
        verify(gr, pr, float_rounding=options.float_rounding, timeout_seconds=None)
        for gr in _pct_readings(gold, options.percent)
        for pr in _pct_readings(pred, options.percent)
    )
    if ok and _exactly_different(g, p):
        return False, "exact values that differ (math-verify's numeric check rounds tiny differences to 0)"
    if not ok and g_sets is None and is_equation(g) and is_equation(p):
        ok = _same_equation(g, p)
    return ok, ""


def _exactly_different(g, p) -> bool:
    """Two exact finite numbers (no floats, no variables, no percent) that differ, however little:
    ``1/2^99`` and ``1/2^98``.  Compared at 60 significant digits, never symbolically (no hang)."""
    from math_verify.grader import get_pct_val
    from sympy import Expr, Float

    for x in (g, p):
        if not (isinstance(x, Expr) and x.is_number and x.is_finite and not x.atoms(Float) and get_pct_val(x) is None):
            return False
    if g.is_Rational and p.is_Rational:
        return g != p
    a, b, d = g.evalf(60), p.evalf(60), (g - p).evalf(60)  # sympy floats: 1/2004! does not underflow
    scale = max(abs(a), abs(b))
    return bool(abs(d) > scale * Float("1e-40", 60)) if scale != 0 else d != 0


def _distinct(parsed: list[list], options: MathOptions) -> list[list]:
    reps: list[list] = []
    for p in parsed:
        if not any(equivalent(r, p, options)[0] and equivalent(p, r, options)[0] for r in reps):
            reps.append(p)
    return reps


def judge(reference: str, spans: tuple[str, ...] | list[str], options: MathOptions = MathOptions()) -> tuple[str, str]:
    """``(outcome, detail)`` for a reference and the prediction's answer spans; see the module docstring."""
    from sympy import FiniteSet

    gold = parse_answer(reference)
    if not gold:
        return "gold_error", f"reference {reference[:80]!r} does not parse"
    if not options.unreduced_fractions and any(_unreduced(s) for s in spans):
        return "wrong", f"{spans[0]} is not in lowest terms (unreduced_fractions=False)"
    parsed = [p for p in (parse_answer(s) for s in spans) if p]
    if not parsed:
        return "parse_error", f"answer {spans[0][:80] if spans else ''!r} does not parse"
    answers = _distinct(parsed, options)
    if len(answers) > 1:
        if not _is_collection(gold) or not all(_values(a) for a in answers):
            return "ambiguous", f"several different final answers: {[_shown(a) for a in answers]}"
        answers = [[FiniteSet(*(_values(a)[0] for a in answers))]]  # one answer, given in several parts
    ok, why = equivalent(gold, answers[0], options)
    return ("correct", "") if ok else ("wrong", why or f"{_shown(answers[0])} != {_shown(gold)}")


def _shown(parsed: list) -> str:
    return str(_values(parsed)[0]) if _values(parsed) else str(parsed[0])


def compare(gold: str, pred: str, options: MathOptions = MathOptions()) -> tuple[str, str]:
    """``(outcome, detail)`` for one answer string on each side.  Runs in a worker process in practice."""
    g_plain, p_plain = plain_number(gold), plain_number(pred)
    if g_plain is not None and p_plain is not None:  # the common case: no sympy needed
        ok = compare_plain(g_plain, p_plain, options)
        return ("correct", "") if ok else ("wrong", f"{pred} != {gold}")
    return judge(gold, (pred,), options)
