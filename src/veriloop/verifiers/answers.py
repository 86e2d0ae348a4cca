"""Final-answer extraction: named policies, normalisation, and ambiguity as its own result.

A completion's *final answer* is what a marker names: ``answer=N``, ``答案=N``, ``#### N``,
``\\boxed{...}``, "The answer is N", or (only where no marker is present and the policy allows
it) the last line.  Text is normalised first: full-width characters to ASCII (NFKC: ``１２``
-> ``12``, ``＝`` -> ``=``), Chinese punctuation (``。`` ``，`` ``：``), U+2212 and other dashes
to ``-``.  An output that names two different final answers (``20 or 9``, ``答案=20或9``, two
boxes with different values, ``#### 5`` and ``\\boxed{6}``) is *ambiguous*: a verifier scores it
0 and says so, because rewarding the first (or any) of several answers teaches hedging.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Characters NFKC leaves alone that mean ASCII punctuation or a minus sign in answers.
_TRANSLATE = str.maketrans({
    "\u2212": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\ufe63": "-", "\uff0d": "-",
    "\u3002": ".", "\uff61": ".", "\u3001": ",", "\uff64": ",", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
})  # fmt: skip


def normalize_text(text: str) -> str:
    """NFKC (full-width digits and punctuation -> ASCII), minus signs, Chinese punctuation, and
    GSM8K's calculator annotations (``<<48/2=24>>``) removed."""
    return re.sub(r"<<[^<>]*>>", "", unicodedata.normalize("NFKC", text).translate(_TRANSLATE))


# Words that join two answers: a value containing one of them names more than one answer.
_ALTERNATIVES = re.compile(r"\bor\b|或|\bmaybe\b|\beither\b", re.IGNORECASE)
_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")


def _boxed_spans(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced."""
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
        out.append(text[m.end() : j - 1])
        i = j


def _after_marker(pattern: str):
    marker = re.compile(pattern, re.IGNORECASE)

    def find(text: str) -> list[str]:
        values = []
        for m in marker.finditer(text):
            rest = text[m.end() :]
            # the value runs to the end of the line or of the segment (';' ends a step trace segment)
            value = re.split(r"[\n;]", rest, maxsplit=1)[0]
            values.append(value)
        return values

    return find


def _last_line(text: str) -> list[str]:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return [lines[-1]] if lines else []


# name -> function(text) -> raw candidate values.  Order is the documented priority.
POLICIES = {
    "boxed": _boxed_spans,
    "gsm8k": _after_marker(r"(?:^|\n)\s*####\s*"),
    "answer": _after_marker(r"(?:^|[\s;])answer\s*[=:]\s*"),
    "答案": _after_marker(r"答案\s*(?:[=:]|是|为)\s*"),
    "the-answer-is": _after_marker(r"\b(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*"),
    "last-line": _last_line,
}
MARKER_POLICIES = ("boxed", "gsm8k", "answer", "答案", "the-answer-is")
DEFAULT_POLICIES = (*MARKER_POLICIES, "last-line")


@dataclass(frozen=True)
class Extraction:
    """``status``: ``ok`` (one answer), ``none`` (no answer found), ``ambiguous`` (several)."""

    status: str
    answer: str | None = None  # the normalised answer when status == "ok"
    candidates: tuple[str, ...] = ()  # every distinct value found
    policy: str = ""  # the policy that found it


_FILLER = re.compile(r"^(?:therefore|thus|so|then|just|exactly|equal to|:)\s*", re.IGNORECASE)
_NUMBER_WITH_UNIT = re.compile(
    r"^\$?\s*([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*(%?)\s*(?:[A-Za-z][A-Za-z ./]*)?$"
)


def clean_value(value: str) -> str:
    """Strip what surrounds an answer value: whitespace, ``$``, filler words, a trailing period,
    a worked expression before the last ``=``, unit words after a number (``120 pints`` -> ``120``)."""
    v = value.strip()
    v = re.sub(r"^\$+|\$+$", "", v).strip()
    v = re.sub(r"^\\\(|\\\)$", "", v).strip()
    v = v.rstrip(".").strip()
    boxed = _boxed_spans(v)
    if len(boxed) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", v, re.DOTALL):
        v = boxed[0].strip()  # "The answer is \boxed{x}" names x
    while _FILLER.match(v) and _FILLER.match(v).end():
        v = v[_FILLER.match(v).end() :]
    if "=" in v and "\\" not in v:  # "15 * 8 = 120" -> "120" (LaTeX relations are left to the maths check)
        v = v.rsplit("=", 1)[1].strip()
    v = re.sub(r"\\(?:text|mathrm)\{\s*\}", "", v).strip()
    m = _NUMBER_WITH_UNIT.match(v)
    if m:
        v = m.group(1) + m.group(2)
    return v


def numeric_key(value: str) -> str:
    """A comparison key: numbers without thousands separators, ``+`` or trailing zeros."""
    v = value.replace("$", "").strip()
    if _NUMBER.match(v):
        v = v.replace(",", "").lstrip("+")
        if "." in v:
            v = v.rstrip("0").rstrip(".")
        return "0" if v in ("-0", "") else v
    return re.sub(r"\s+", "", v)


def extract_answer(text: str, policies: tuple[str, ...] = DEFAULT_POLICIES) -> Extraction:
    """The one final answer ``text`` names, by the first policy (in ``POLICIES`` order) that finds one.

    Marker policies are consulted together: if two of them (or two matches of one) name
    different values the result is ambiguous.  ``last-line`` is used only when no marker matched.
    """
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown answer policies {unknown}; known: {list(POLICIES)}")
    text = normalize_text(text)
    found: list[tuple[str, str]] = []
    for name in policies:
        if name in MARKER_POLICIES:
            found += [(name, clean_value(v)) for v in POLICIES[name](text)]
    if not found and "last-line" in policies:
        found = [("last-line", clean_value(v)) for v in POLICIES["last-line"](text)]
    found = [(p, v) for p, v in found if v]
    if not found:
        return Extraction("none")
    distinct: dict[str, str] = {}
    for _, v in found:
        distinct.setdefault(numeric_key(v), v)
    candidates = tuple(distinct.values())
    if len(candidates) > 1 or _ALTERNATIVES.search(candidates[0]):
        return Extraction("ambiguous", None, candidates, found[0][0])
    return Extraction("ok", candidates[0], candidates, found[0][0])
