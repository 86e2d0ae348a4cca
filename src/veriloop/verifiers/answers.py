"""Final-answer extraction: named policies, normalisation, and strict reading of the value.

A completion's *final answer* is what a marker names: ``answer=N``, ``答案=N`` / ``得数为N``,
``#### N``, ``\\boxed{...}``, "The answer is N", or (only where no marker is present and the
policy allows it) the last line.  Text is normalised first: full-width characters to ASCII (NFKC:
``１２`` -> ``12``, ``＝`` -> ``=``), Chinese punctuation (``。`` ``，`` ``：``), U+2212 and other
dashes to ``-``, ``×`` ``÷`` to ``*`` ``/``.

A stated value is read strictly: only its first sentence is the value, and it must be clean
(``kind="number"``: a number after cleaning, e.g. ``$1,250.``, ``18 apples``, ``1/2``;
``kind="maths"``, the default: a maths expression, not a sentence).  What is not clean is never
handed over, so free text cannot fall through to an expression parser that would pick a number
out of it.  The rules, by the ``reason`` they report:

* ``negated``: ``not 18``, ``isn't 18``, ``18 is wrong``, ``\\boxed{18} is not the answer``: no
  answer; a value the completion both states and negates (``#### 18`` ... ``18 is wrong``) neither.
  ``retracted``: a later sentence withdraws it ("That's not right.", "No."): no answer.
* contrast: exactly ``M, not N`` / ``not N but M`` / ``M rather than N`` / ``M instead of N``
  names M (N is negated).
* ``revised``: a new value after a stated one is *ambiguous*: a later sentence that is a bare
  other number, restates one ("It's 18."), or has a correction cue ("Oops, 18", "Wait, actually
  it's 18", "... no, 18", "I mean 18") and ends with another number; a later marked statement
  of another value.  Explanations after the answer with other numbers and no cue are allowed.
* ``hedged``: ``about 18``, ``~18``, ``18?``, ``18 or so``, ``18ish``: no answer.  ``range`` /
  ``several``: ``between 17 and 19``, ``17 to 19``, ``18 or 19``, a bare list ``17, 18`` (outside a
  box read as maths), ``17-19`` read as a number: *ambiguous*.
* ``conditional``: ``If she sold 24, the answer is 18``, ``the answer is 18 if we ignore the
  tax``, ``\\boxed{18}, assuming no tax``: no answer (state the answer in a sentence of its own).
* ``prose``: a sentence with a number in it (an echo of the question: "Tom has 18 apples.") is
  no answer, as the last line or after a marker.

Two statements with different values (``#### 5`` and ``\\boxed{6}``, two boxes) are *ambiguous*
(``distinct``; ``Extraction.spans`` lets a maths check find that ``1/2`` and ``0.5`` are one
value); two values in one statement (``20 or 9``, ``答案=20或9``) are *ambiguous* (``several``):
a verifier scores them 0 and says so, because rewarding the first (or any) of several answers
teaches hedging.  When a marker is present the last line is not read, even if every marked value
was rejected.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

# Characters NFKC leaves alone that mean ASCII punctuation, a minus sign or an operator in answers.
_TRANSLATE = str.maketrans({
    "\u2212": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\ufe63": "-", "\uff0d": "-",
    "\u3002": ".", "\uff61": ".", "\u3001": ",", "\uff64": ",", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
    "\u00d7": "*", "\u00f7": "/",
})  # fmt: skip


def normalize_text(text: str) -> str:
    """NFKC (full-width digits and punctuation -> ASCII), minus signs, Chinese punctuation, ``×``
    ``÷``, and GSM8K's calculator annotations (``<<48/2=24>>``) removed."""
    return re.sub(r"<<[^<>]*>>", "", unicodedata.normalize("NFKC", text).translate(_TRANSLATE))


_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_NUM = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?"
_NUM_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_.$])(-?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![\d])")
_NUMBER_KIND = re.compile(  # a number after cleaning: plain, percent, a fraction
    r"^[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)%?$|^[-+]?\d+\s*/\s*\d+$|^[-+]?\\[dt]?frac\{\d+\}\{\d+\}$"
)

# Cue words (lower case).  A value that contains one is not a clean answer; which list names why.
NEGATION = frozenset("not no never isn't isnt aren't wasn't won't can't cannot don't doesn't nope neither nor "
                     "wrong incorrect false none".split())  # fmt: skip
HEDGE = frozenset("about approximately approx approximate around roughly nearly almost probably perhaps possibly "
                  "maybe likely unlikely estimate estimated guess ish circa some somewhere close between range "
                  "least most more less fewer over under like think believe sure unsure bet".split())  # fmt: skip
ALTERNATIVE = frozenset("or either".split())
CONDITIONAL = frozenset("if unless assuming assume suppose supposing provided providing given otherwise whether "
                        "when whenever".split())  # fmt: skip
CORRECTION = frozenset("wait oops actually sorry correction mistake mistaken hmm rather instead scratch recheck "
                       "recalculate redo typo oh uh um err no nope corrected revise revised reconsider miscalculated "
                       "kidding jk joking lol".split())  # fmt: skip
_CORRECTION_PHRASE = re.compile(r"\b(?:i\s+mean|hold\s+on|should\s+(?:be|have\s+been)|make\s+(?:that|it)|"
                                r"correct\s+answer)\b", re.IGNORECASE)
_REVISING_HEDGE = frozenset("or either maybe perhaps possibly probably approximately approx about around "
                            "roughly".split())  # fmt: skip
CUES = NEGATION | HEDGE | ALTERNATIVE | CONDITIONAL | CORRECTION
# Words of a sentence (never of a unit or a maths expression).
STOPWORDS = frozenset("the is are was were be been it its it's this that that's these those and but as for with i we "
                      "you he she they his her their our has have had will would could can do does did get got "
                      "what how many much which who then so thus therefore hence answer equals because since to "
                      "than there here my me".split())  # fmt: skip
MATH_WORDS = frozenset("sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan log ln lg exp sqrt pi max min "
                       "gcd lcm mod deg det dim ker lim sup inf infty infinity arg cis".split())  # fmt: skip
_ATTACHED_UNITS = frozenset("km cm mm kg mg lb lbs oz ft mph hr hrs min mins sec secs ml cal kcal".split())
_CJK_CUES = {  # characters that make a Chinese value negated, several, hedged or conditional
    "negated": "不非没错", "several": "或还", "hedged": "约概左右差吗呢吧", "conditional": "如若假设",
}  # fmt: skip
_CONDITIONAL_PREFIX = frozenset("if unless assuming suppose supposing provided otherwise".split())

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_NEGATED_NUMBER = re.compile(
    rf"(?:\bnot|n't|\bnever|\bno)\s+(?:be\s+|equal\s+to\s+|exactly\s+)?({_NUM})"
    rf"|({_NUM})\s*(?:[A-Za-z]+\s+)?(?:is|was|seems|would\s+be)?\s*(?:wrong|incorrect|false|not\s+(?:right|correct|"
    rf"the\s+answer)|a\s+mistake)\b"
)
_CONTRAST = [
    re.compile(rf"^(?P<m>{_NUM})(?:\s+[A-Za-z]+)?\s*,?\s*(?:and\s+|but\s+)?not\s+(?P<n>{_NUM})(?:\s+[A-Za-z]+)?$"),
    re.compile(rf"^not\s+(?P<n>{_NUM})(?:\s+[A-Za-z]+)?(?:\s*[,;]\s*|\s+)(?:but\s+)?(?P<m>{_NUM})(?:\s+[A-Za-z]+)?$"),
    re.compile(rf"^(?P<m>{_NUM})(?:\s+[A-Za-z]+)?\s+(?:rather\s+than|instead\s+of)\s+(?P<n>{_NUM})(?:\s+[A-Za-z]+)?$"),
]
_RANGE = re.compile(rf"{_NUM}\s*(?:-|to|through|thru|~)\s*{_NUM}|\bbetween\s+{_NUM}\s+and\s+{_NUM}")
_RESTATED = re.compile(rf"^(?:so\s+)?(?:it|that|this)(?:'s|\s+is|\s+was)\s+({_NUM})\W*$", re.IGNORECASE)
_LIST = re.compile(rf"^{_NUM}(?:\s*(?:,|\band\b|&|\s)\s*{_NUM})+$")
_BOUNDARY = re.compile(r"[.!?]+(?=\s|$)")
_HEDGE_SIGNS = re.compile(r"[~\u2248\u2243\u223c\u00b1]|\\approx|\\sim\b")
_RETRACTED = re.compile(  # a later sentence that withdraws the answer without naming a new one
    r"\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake)\b"
    r"|\b(?:doesn't|does\s+not|don't)\s+(?:look|seem|sound)\s+right\b|^\W*(?:no|nope|not\s+really|wrong)\W*$",
    re.IGNORECASE,
)


def numeric_key(value: str) -> str:
    """A comparison key: numbers without thousands separators, ``+`` or trailing zeros."""
    v = value.replace("$", "").strip()
    if _NUMBER.match(v):
        v = re.sub(r"^(-?)0+(?=\d)", r"\1", v.replace(",", "").lstrip("+"))  # 018 -> 18
        if "." in v:
            v = v.rstrip("0").rstrip(".")
        return "0" if v in ("-0", "") else v
    return re.sub(r"\s+", "", v)


def _numbers(text: str) -> set[str]:
    return {numeric_key(m.group(1) + m.group(2)) for m in _NUM_IN_TEXT.finditer(text)}


def _last_number(text: str) -> str | None:
    found = list(_NUM_IN_TEXT.finditer(text))
    return numeric_key(found[-1].group(1) + found[-1].group(2)) if found else None


def _negated_numbers(text: str) -> frozenset[str]:
    """Numbers the text negates: "not 18", "isn't 18", "18 is wrong"."""
    return frozenset(numeric_key(g.replace("$", "")) for m in _NEGATED_NUMBER.finditer(text) for g in m.groups() if g)


def _words(text: str) -> list[str]:
    """Words outside LaTeX commands, lower case."""
    return [w.lower() for w in _WORD.findall(re.sub(r"\\[A-Za-z]+", " ", text))]


def _boxed_spans(text: str) -> list[tuple[str, int, int]]:
    """``(content, start, end)`` of every ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced."""
    out, i = [], 0
    while True:
        m = re.compile(r"\\(?:boxed|fbox)\s*\{").search(text, i)
        if not m:
            return out
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:  # unbalanced: no answer from this box
            return out
        out.append((text[m.end() : j - 1], m.start(), j))
        i = j


def _after_marker(pattern: str):
    marker = re.compile(pattern, re.IGNORECASE)

    def find(text: str) -> list[tuple[str, int, int]]:
        out = []
        for m in marker.finditer(text):
            # the value runs to the end of the line or of the segment (';' ends a step trace segment)
            stop = re.search(r"[\n;]", text[m.end() :])
            end = m.end() + stop.start() if stop else len(text)
            value = text[m.end() : end]
            if not value.strip() and (stop is None or text[end] == "\n"):  # "The answer is:\n18"
                nxt = re.match(r"\n\s*([^\n]*)", text[end:])
                if nxt and nxt.group(1).strip():
                    value, end = nxt.group(1), end + nxt.end()
            start = m.start() + len(m.group()) - len(m.group().lstrip("\n;, \t"))  # the marker itself
            out.append((value, start, end))
        return out

    return find


def _last_line(text: str) -> list[tuple[str, int, int]]:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return [(lines[-1], text.rfind(lines[-1]), len(text))] if lines else []


# name -> function(text) -> [(raw value, start, end)].  Order is the documented priority.
SPAN_POLICIES = {
    "boxed": _boxed_spans,
    "gsm8k": _after_marker(r"(?:^|\n)[ \t]*####[ \t]*"),
    "answer": _after_marker(r"(?:^|[\s;,])answer[ \t]*[=:][ \t]*"),
    "答案": _after_marker(r"(?:答案|得数)[ \t]*(?:[=:]|是|为)[ \t]*"),
    "the-answer-is": _after_marker(r"\b(?:the\s+)?(?:final\s+)?answer\s+is(?![\w'])[ \t]*:?[ \t]*"),
    "last-line": _last_line,
}


def _values_only(find):
    return lambda text: [value for value, _, _ in find(text)]


# name -> function(text) -> raw candidate values (what each marker names, before any reading).
POLICIES = {name: _values_only(find) for name, find in SPAN_POLICIES.items()}
MARKER_POLICIES = ("boxed", "gsm8k", "answer", "答案", "the-answer-is")
DEFAULT_POLICIES = (*MARKER_POLICIES, "last-line")
KINDS = ("maths", "number")


def _policy(name: str):
    """A named policy, or ``prefix=WORD``: the marker ``WORD=`` / ``WORD:`` (e.g. ``prefix=result``)."""
    if name in SPAN_POLICIES:
        return SPAN_POLICIES[name]
    if name.startswith("prefix=") and name[7:].strip():
        return _after_marker(rf"(?<![A-Za-z0-9_]){re.escape(name[7:].strip())}[ \t]*[=:][ \t]*")
    raise ValueError(f"unknown answer policies {[name]}; known: {list(POLICIES)} or 'prefix=WORD'")


@dataclass(frozen=True)
class Extraction:
    """``status``: ``ok`` (one answer), ``none`` (no answer found, or none that is a clean answer),
    ``ambiguous`` (several).  ``reason`` says why no answer was taken: ``negated``, ``retracted``,
    ``hedged``, ``conditional``, ``prose``, ``no final answer`` (status none); ``several`` (two values
    in one statement), ``range``, ``revised`` (a new value after a stated one), ``distinct`` (two
    statements with different strings, which a maths check may still find equal: ``spans``)."""

    status: str
    answer: str | None = None  # the normalised answer when status == "ok"
    candidates: tuple[str, ...] = ()  # every distinct value found
    policy: str = ""  # the policy that found it
    reason: str = ""
    spans: tuple[str, ...] = ()  # the accepted statements' raw values (boxes whole), for a maths parser


_FILLER = re.compile(r"^(?:therefore|thus|so|then|just|exactly|equal to|:)[\s,]*", re.IGNORECASE)
_UNIT = r"\(?[A-Za-z][A-Za-z ./]*(?:\^?[23])?\)?"  # "pints", "miles per hour", "cm^2", "(dollars)"
_NUMBER_WITH_UNIT = re.compile(  # number, %, then unit words / an attached unit (18km) / a Chinese measure word
    rf"^\$?\s*({_NUM[:-2]}(?:\s*/\s*\d+)?)(\s*%)?(?:\s+({_UNIT})|([A-Za-z]+)|\s*([\u4e00-\u9fff]{{1,3}}))?$"
)
_MATHS_WITH_UNIT = re.compile(rf"^(\S.*[\d}}])\s+({_UNIT})$")  # "12\pi square units", "\frac{{3}}{{4}} of the pizza"
_NOT_IN_UNITS = CUES | (STOPWORDS - {"the"})


def _unit_tail_ok(tail: str | None, attached: str | None, cjk: str | None) -> bool:
    if attached is not None:
        return attached.lower() in _ATTACHED_UNITS
    if cjk is not None:
        return not any(c in cue for cue in _CJK_CUES.values() for c in cjk)
    words = _words(tail or "")
    return len(words) <= 4 and not any(w in _NOT_IN_UNITS or w in MATH_WORDS for w in words)


def clean_value(value: str) -> str:
    """Strip what surrounds an answer value: whitespace, ``$``, ``**``, filler words, a trailing period,
    a worked expression before the last ``=`` (unless a cue word is in it), unit words after a
    number (``120 pints`` -> ``120``; not ``18 if ...`` or ``18 is wrong``)."""
    v = value.strip()
    v = re.sub(r"^\$([^$]+)\$(?=\s+[A-Za-z(])", r"\1", v)  # "$18$ apples", "$\frac{3}{4}$ of the pizza"
    v = re.sub(r"^\$+|\$+$", "", v).strip()
    v = re.sub(r"^\\\(|\\\)$", "", v).strip()
    v = re.sub(r"^\*+|\*+$", "", v).strip()
    v = v.rstrip(".").strip()
    boxed = _boxed_spans(v)
    if len(boxed) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", v, re.DOTALL):
        v = boxed[0][0].strip()  # "The answer is \boxed{x}" names x
    while _FILLER.match(v) and _FILLER.match(v).end():
        v = v[_FILLER.match(v).end() :]
    if "=" in v and not re.search(r"[\\<>!\u2264\u2265\u2260]|==", v):  # "15 * 8 = 120" -> "120" (not x >= 5)
        lhs, rhs = v.rsplit("=", 1)
        if not any(w in CUES for w in _words(lhs)):
            v = rhs.strip()
    v = re.sub(r"\\(?:text|mathrm)\{\s*\}", "", v).strip()
    m = _NUMBER_WITH_UNIT.match(v)
    if m and _unit_tail_ok(m.group(3), m.group(4), m.group(5)):
        return m.group(1) + ("%" if m.group(2) else "")
    m = _MATHS_WITH_UNIT.match(v)
    if m and len(m.group(2)) > 1 and _unit_tail_ok(m.group(2), None, None):
        return m.group(1).strip()
    return v


def _is_clean(v: str, kind: str) -> bool:
    """Is the cleaned value an answer of this kind (a number; a maths expression, not a sentence)?"""
    if not re.search(r"[0-9A-Za-z\\]", v) or _HEDGE_SIGNS.search(v) or re.search(r"\?|[A-Za-z]'[A-Za-z]", v):
        return False  # a question, a hedge sign, a contraction ("isn't 18") are not maths
    if kind == "number":
        return bool(_NUMBER_KIND.match(v))
    if re.search(r"[\u3040-\u9fff]", re.sub(r"\\(?:text|mbox|mathrm)\{[^{}]*\}", "", v)):
        return False
    for inner in re.findall(r"\\(?:text|mbox|mathrm|textbf)\{([^{}]*)\}", v):  # words allowed: \text{Monday}
        words = _words(inner)
        if len(words) >= 3 or any(w in CUES or (w in STOPWORDS and w != "and") for w in words):
            return False
    outside = re.sub(r"\\(?:text|mbox|mathrm|textbf)\{[^{}]*\}", " ", v)
    return not any(
        len(w) > 1 and w not in MATH_WORDS and (w in CUES or w in STOPWORDS or len(w) >= 4) for w in _words(outside)
    )


@dataclass(frozen=True)
class _Read:
    """How one stated value reads: ``answer`` (value), ``several`` (values), ``not`` (reason), ``empty``."""

    kind: str
    value: str = ""
    reason: str = ""
    span: str = ""  # the raw text of the value as stated (a box kept whole), for a maths parser
    negated: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()


def _classify(v: str, rest: str) -> _Read:
    """Why ``v`` (with ``rest``, the remainder of its line) is not a clean answer."""
    text = f"{v} {rest}"
    words, nums = set(_words(text)), _numbers(text)
    cjk = {why for why, chars in _CJK_CUES.items() if any(c in text for c in chars)}
    negated = _negated_numbers(text)
    if negated or words & NEGATION or "negated" in cjk:
        return _Read("not", reason="negated", negated=negated, numbers=frozenset(nums))
    if words & CONDITIONAL or "conditional" in cjk:
        return _Read("not", reason="conditional", numbers=frozenset(nums))
    several = len(nums) > 1
    if several and (_RANGE.search(text) or words & {"between", "range"}):
        return _Read("several", reason="range", numbers=frozenset(nums))
    if several and (words & (ALTERNATIVE | CORRECTION | HEDGE) or "several" in cjk):
        return _Read("several", reason="several", numbers=frozenset(nums))
    if words & (HEDGE | ALTERNATIVE) or _HEDGE_SIGNS.search(text) or "hedged" in cjk or "several" in cjk:
        return _Read("not", reason="hedged", numbers=frozenset(nums))
    return _Read("not", reason="prose", numbers=frozenset(nums))


def _first_sentence(raw: str) -> tuple[str, str, bool]:
    """``(head, rest, question)``: the value's first sentence, what follows it, whether it ended in ``?``."""
    m = _BOUNDARY.search(raw)
    if not m:
        return raw.strip(), "", False
    return raw[: m.start()].strip(), raw[m.end() :].strip(), "?" in m.group()


def _read_value(raw: str, kind: str, after: str = "", boxed: bool = False) -> _Read:
    """Read one stated value; ``after`` is the rest of the sentence outside it (after a box).  A bare
    list of numbers (``17, 18``) is several answers, except in a box read as maths (a set of solutions)."""
    head, rest, question = _first_sentence(raw)
    v, negated, span = clean_value(head), frozenset(), head
    for pattern in _CONTRAST:
        m = pattern.match(v)
        if m and numeric_key(m["m"].strip("$%")) != numeric_key(m["n"].strip("$%")):
            v, negated, span = clean_value(m["m"]), frozenset({numeric_key(m["n"].replace("$", ""))}), m["m"]
            break
    if not re.search(r"[0-9A-Za-z\\]", v) and not re.search(r"\d", rest):
        return _Read("empty")
    if not _is_clean(v, kind):
        return _classify(head, f"{after} {rest}")
    if (kind == "number" or not boxed) and _LIST.match(v) and len(_numbers(v)) > 1:
        return _Read("several", reason="several", numbers=frozenset(_numbers(v)))
    if question:
        return _Read("not", reason="hedged", numbers=frozenset(_numbers(head)))
    key = numeric_key(v)
    if after:  # "\boxed{18} or so", "\boxed{18} is wrong", "\boxed{17}, not 18" (a contrast: 17)
        qualified = _revision(after, key, same_line=True)
        if qualified is not None:
            return qualified
        words, others = set(_words(after)), _negated_numbers(after) - {key}
        if words & ALTERNATIVE and re.search(r"\\(?:boxed|fbox)|\d", after):  # "\boxed{a} or \boxed{b}"
            return _Read("several", reason="several", numbers=frozenset(_numbers(after)) | {key})
        if words & (CUES - NEGATION) or _HEDGE_SIGNS.search(after) or words & NEGATION and not others:
            return _classify(f"{head} {after}", "")
        negated |= others
    revised = _revision(rest, key, same_line=True)
    if revised is not None:
        return revised
    return _Read("answer", v, negated=negated, numbers=frozenset({key}), span=f"\\boxed{{{span}}}" if boxed else span)


def _revision(tail: str, key: str, same_line: bool = False) -> _Read | None:
    """Does text after a stated answer withdraw, qualify or revise it?"""
    lead = re.match(r"^[\s$)]*(?:(?:is|was|seems|would\s+be)\s+)?(?:wrong|incorrect|false|a\s+mistake|not\s+(?:right|"
                    r"correct|the\s+answer|it)\b)", tail, re.I)
    if lead:
        return _Read("not", reason="negated", negated=frozenset({key}))
    for n, line in enumerate(tail.splitlines()):
        for sentence in re.split(r"(?<=[.!?])\s+", line):
            words, new = set(_words(sentence)), _last_number(sentence)  # a revision ends with the new value
            new = new if new not in (None, key) else None
            if key in _negated_numbers(sentence):
                return _Read("not", reason="negated", negated=frozenset({key}))
            if same_line and n == 0 and words & CONDITIONAL:
                return _Read("not", reason="conditional")
            if same_line and n == 0 and (words & _REVISING_HEDGE or _HEDGE_SIGNS.search(sentence)) and new:
                return _Read("several", reason="several", numbers=frozenset({key, new}))
            if _RETRACTED.search(sentence.strip()):
                return _Read("not", reason="retracted", negated=frozenset({key}))
            bare = re.fullmatch(rf"[\s*$(]*{_NUM}[\s*.!)]*", sentence) or _RESTATED.match(sentence.strip())
            cue = words & CORRECTION or _CORRECTION_PHRASE.search(sentence) or any(c in sentence for c in "错改")
            if (bare or cue) and new:
                return _Read("several", reason="revised", numbers=frozenset({key, new}))
    return None


def _sentence_prefix(text: str, start: int) -> str:
    """The part of the sentence before ``start`` (and the sentence before it, if this one opens with
    "then": "Suppose she sold 24. Then the answer is 18.")."""
    before = text[:start]
    cut = max(before.rfind("\n"), before.rfind(";"), *(m.end() - 1 for m in _BOUNDARY.finditer(before)))
    prefix = before[cut + 1 :]
    if re.match(r"\s*(?:then|in\s+that\s+case)\b", prefix, re.IGNORECASE) and cut > 0:
        prefix = _sentence_prefix(text, cut) + " " + prefix
    return prefix


def _read_statement(text: str, name: str, raw: str, start: int, end: int, kind: str) -> _Read:
    if set(_words(_sentence_prefix(text, start))) & _CONDITIONAL_PREFIX:
        return _Read("not", reason="conditional") if re.search(r"\S", raw) else _Read("empty")
    after = ""
    if name == "boxed":  # the rest of the sentence after the box qualifies it too ("\boxed{18} or so")
        after = re.split(r"(?<=[.!?])\s|\n", text[end:], maxsplit=1)[0].strip(" $.")
    return _read_value(raw, kind, after, boxed=name == "boxed")


class _Statement(NamedTuple):
    policy: str
    start: int  # where the statement (its marker) starts in the normalised text
    end: int  # where its value ends
    read: _Read


def extract_answer(text: str, policies: tuple[str, ...] = DEFAULT_POLICIES, kind: str = "maths") -> Extraction:
    """The one final answer ``text`` names, read strictly (see the module docstring).

    Marker policies are consulted together: if two of them (or two matches of one) name different
    values the result is ambiguous.  ``last-line`` is used only when no marker names anything.
    ``kind``: ``maths`` (a maths expression, not a sentence) or ``number`` (a number after cleaning).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    finders = {name: _policy(name) for name in policies}
    text = normalize_text(text)
    found = [_Statement(name, s, e, _read_statement(text, name, raw, s, e, kind))
             for name, find in finders.items() if name != "last-line" for raw, s, e in find(text)]  # fmt: skip
    found = [x for x in found if x.read.kind != "empty"]
    if not found and "last-line" in finders:
        found = [_Statement("last-line", s, e, _read_value(raw, kind)) for raw, s, e in _last_line(text)]
        found = [x for x in found if x.read.kind != "empty"]
    if not found:
        return Extraction("none", reason="no final answer")
    answers = [x for x in found if x.read.kind == "answer"]
    distinct: dict[str, str] = {}  # comparison key -> the first spelling
    for x in answers:
        distinct.setdefault(numeric_key(x.read.value), x.read.value)
    spans = tuple(dict.fromkeys(x.read.span for x in answers))
    several = [x for x in found if x.read.kind == "several"]
    if several:
        numbers = tuple(n for x in several for n in sorted(x.read.numbers) if n not in distinct)
        first = several[0]
        return Extraction("ambiguous", None, tuple(distinct.values()) + numbers, first.policy, first.read.reason)
    if len(distinct) > 1:  # different strings: a maths check may still find them equal (spans)
        return Extraction("ambiguous", None, tuple(distinct.values()), answers[0].policy, "distinct", spans)
    if not distinct:
        return Extraction("none", policy=found[0].policy, reason=found[0].read.reason)
    key, value = next(iter(distinct.items()))
    if any(key in x.read.negated for x in found):  # stated and denied
        return Extraction("none", None, (value,), answers[0].policy, "negated")
    last_end = max(x.end for x in answers)
    if any(x.start >= last_end and x.read.numbers - {key} for x in found):  # a later statement of another value
        return Extraction("ambiguous", None, (value,), answers[0].policy, "revised")
    revised = _revision(text[last_end:], key, same_line=True)
    if revised is not None:
        status = "ambiguous" if revised.kind == "several" else "none"
        return Extraction(status, None, (value,), answers[0].policy, revised.reason)
    return Extraction("ok", value, (value,), answers[0].policy, "", spans)
