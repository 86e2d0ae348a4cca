"""Final-answer extraction: named policies, normalisation, and the statements combined.

A completion's *final answer* is what a marker names: ``answer=N`` / ``answer: N`` (or
``Answer $N$`` opening a line), ``答案=N`` / ``得数为N``, ``#### N``, ``\\boxed{...}``, "The
answer is N", or (only where no marker is present and the policy allows it) the last line.  Text is
normalised first: full-width characters to ASCII (NFKC: ``１２`` -> ``12``, ``＝`` -> ``=``), Chinese
punctuation (``。`` ``，`` ``：``), U+2212 and other dashes to ``-``, ``×`` ``÷`` to ``*`` ``/``.  When
the completion closes a reasoning block (``</think>``) and writes anything after it, only what
follows is read: the reasoning before it is not the answer.

Each statement is read strictly by ``answer_rules`` (its module docstring lists the rules): a value
that is negated, hedged, a range, conditional, revised or prose is no answer; so is one in a sentence
that opens with a condition ("If she sold 24, the answer is 18") or says it repeats the question
("The question says she sold \\boxed{18} clips"), and a box in a question ("\\boxed{18} clips?").
Across statements: two statements with different values (``#### 5`` and ``\\boxed{6}``, two boxes)
are *ambiguous* (``distinct``; ``Extraction.spans`` lets a maths check find that ``1/2`` and
``0.5`` are one value); two values in one statement (``20 or 9``, ``答案=20或9``) are *ambiguous*
(``several``): a verifier scores them 0 and says so, because rewarding the first (or any) of several
answers teaches hedging.  A value that one statement states and another negates is no answer
(``negated``); a later statement of another value revises it (``revised``).  "Final Answer: The
final answer is N" is one statement.  When a marker is present the last line is not read, even if
every marked value was rejected.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

from veriloop.errors import InputError
from veriloop.verifiers.answer_rules import (
    SENTENCE_END,
    Read,
    boxed_spans,
    clean_value,
    conditional_prefix,
    numeric_key,
    read_value,
    revision,
)

__all__ = ["DEFAULT_POLICIES", "KINDS", "MARKER_POLICIES", "POLICIES", "SPAN_POLICIES", "Extraction", "answer_key",
           "clean_value", "extract_answer", "normalize_text", "numeric_key"]  # fmt: skip

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


def after_reasoning(text: str) -> str:
    """What follows the last ``</think>``, when anything does; else the whole text (tags as line breaks)."""
    cut = text.rfind("</think>")
    if cut >= 0 and text[cut + len("</think>") :].strip():
        return text[cut + len("</think>") :]
    return re.sub(r"</?think>", "\n", text)


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
    "boxed": boxed_spans,
    "gsm8k": _after_marker(r"(?:^|\n)[ \t]*####[ \t]*"),
    # "answer: N", "answer=N"; "Answer $N$" / "Answer \[N\]" opening a line (delimited maths closed on it)
    "answer": _after_marker(r"(?:^|[\s;,])answer[ \t]*[=:][ \t]*"
                            r"|(?:^|\n)[ \t]*(?:final[ \t]+)?answer[ \t]+"
                            r"(?=\$\$?[^$\n]*[^$\s][^$\n]*\$|\\\[[^\n]*\S[^\n]*\\\]|\\\([^\n]*\S[^\n]*\\\))"),
    "答案": _after_marker(r"(?:答案|得数)[ \t]*(?:[=:]|是|为)[ \t]*"),
    "the-answer-is": _after_marker(r"\b(?:the\s+)?(?:final\s+)?answer\s+is(?![\w'])[ \t]*:?[ \t]*"),
    "last-line": _last_line,
}  # fmt: skip


def _values_only(find):
    return lambda text: [value for value, _, _ in find(text)]


# name -> function(text) -> raw candidate values (what each marker names, before any reading).
POLICIES = {name: _values_only(find) for name, find in SPAN_POLICIES.items()}
MARKER_POLICIES = ("boxed", "gsm8k", "answer", "答案", "the-answer-is")
DEFAULT_POLICIES = (*MARKER_POLICIES, "last-line")
KINDS = ("maths", "number")
_NESTED_MARKER = re.compile(r"\s*\**\s*(?:the\s+)?(?:final\s+)?answer\s+is(?![\w'])", re.IGNORECASE)


def _policy(name: str):
    """A named policy, or ``prefix=WORD``: the marker ``WORD=`` / ``WORD:`` (e.g. ``prefix=result``)."""
    if name in SPAN_POLICIES:
        return SPAN_POLICIES[name]
    if name.startswith("prefix=") and name[7:].strip():
        return _after_marker(rf"(?<![A-Za-z0-9_]){re.escape(name[7:].strip())}[ \t]*[=:][ \t]*")
    raise InputError(f"unknown answer policies {[name]}; known: {list(POLICIES)} or 'prefix=WORD'")


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


# a sentence that says it repeats the question: what it states is an echo, not an answer
_QUOTING = re.compile(r"\b(?:question|problem)\s+(?:says|said|states|stated|tells|told|gives|gave|mentions)\b"
                      r"|\baccording\s+to\s+the\s+(?:question|problem)\b|\b(?:restat|repeat)\w*\s+the\s+question\b"
                      r"|\bas\s+(?:given|stated)\s+in\s+the\s+(?:question|problem)\b", re.IGNORECASE)


def _sentence_prefix(text: str, start: int) -> str:
    """The part of the sentence before ``start`` (and the sentence before it, if this one opens with
    "then": "Suppose she sold 24. Then the answer is 18.")."""
    before = text[:start]
    cut = max(before.rfind("\n"), before.rfind(";"), *(m.end() - 1 for m in SENTENCE_END.finditer(before)))
    prefix = before[cut + 1 :]
    if re.match(r"\s*(?:then|in\s+that\s+case)\b", prefix, re.IGNORECASE) and cut > 0:
        prefix = _sentence_prefix(text, cut) + " " + prefix
    return prefix


def _read_statement(text: str, name: str, raw: str, start: int, end: int, kind: str) -> Read:
    prefix = _sentence_prefix(text, start)
    if not re.search(r"\S", raw):
        return Read("empty")
    if conditional_prefix(prefix):  # "If she sold 24, the answer is 18."
        return Read("not", reason="conditional")
    if _QUOTING.search(prefix):  # "The question says she sold \boxed{18} clips": an echo
        return Read("not", reason="prose")
    after = ""
    if name == "boxed":  # the rest of the sentence after the box qualifies it too ("\boxed{18} or so")
        after = re.split(r"(?<=[.!?])\s|\n", text[end:], maxsplit=1)[0].strip(" $")
        if after.endswith("?"):  # "... to \boxed{18} friends?": a question, not an answer
            return Read("not", reason="hedged")
        after = after.rstrip(".").strip(" $")
    return read_value(raw, kind, after, boxed=name == "boxed", stated=name != "boxed")


class _Statement(NamedTuple):
    policy: str
    start: int  # where the statement (its marker) starts in the normalised text
    end: int  # where its value ends
    read: Read


def extract_answer(text: str, policies: tuple[str, ...] = DEFAULT_POLICIES, kind: str = "maths") -> Extraction:
    """The one final answer ``text`` names, read strictly (see the module docstring).

    Marker policies are consulted together: if two of them (or two matches of one) name different
    values the result is ambiguous.  ``last-line`` is used only when no marker names anything.
    ``kind``: ``maths`` (a maths expression, not a sentence) or ``number`` (a number after cleaning).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    finders = {name: _policy(name) for name in policies}
    text = after_reasoning(normalize_text(text))
    found = [_Statement(name, s, e, _read_statement(text, name, raw, s, e, kind))
             for name, find in finders.items() if name != "last-line" for raw, s, e in find(text)
             if not (name == "answer" and "the-answer-is" in finders and _NESTED_MARKER.match(raw))]  # fmt: skip
    found = [x for x in found if x.read.kind != "empty"]
    if not found and "last-line" in finders:
        found = [_Statement("last-line", s, e, read_value(raw, kind, last_line=True)) for raw, s, e in _last_line(text)]
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
    revised = revision(text[last_end:], key, same_line=True)
    if revised is not None:
        status = "ambiguous" if revised.kind == "several" else "none"
        return Extraction(status, None, (value,), answers[0].policy, revised.reason)
    return Extraction("ok", value, (value,), answers[0].policy, "", spans)


def answer_key(text: str) -> str | None:
    """The final answer's comparison key (``numeric_key`` of the value an answer marker names:
    ``answer=``, ``####``, ``\\boxed{}``...); None if there is none or it is ambiguous.  Votes (majority,
    maj@k) group completions by it."""
    ex = extract_answer(text, MARKER_POLICIES)
    return numeric_key(ex.answer) if ex.status == "ok" and ex.answer is not None else None
