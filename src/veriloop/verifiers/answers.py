"""Final-answer extraction: named policies, normalisation, and the statements read in order.

A completion's *final answer* is what a marker names: ``answer=N`` / ``answer: N`` (or ``Answer
$N$`` opening a line), a label line (``A: N``, ``Ans: N``, ``Final answer: N``, ``**Answer:** N``,
``**Final Answer**: $N$``, ``Q: ...? A: N``, a heading ``### Final Answer`` with the value on the
next line; ``A: 12`` among listed options ``B: 15`` is no label, ``A = 7`` is algebra), ``答案=N`` /
``得数为N``, ``#### N`` (wherever it starts a word: after a retraction mid-line too, or a ``;``), ``\\boxed{...}``,
"The answer is N", or (only where no marker is present and the policy allows it) the last line,
which may be the text's closing sentence ("So she has 18 apples left.").  Text is normalised first:
full-width characters to ASCII (NFKC: ``１２`` -> ``12``, ``＝`` -> ``=``), Chinese punctuation
(``。`` ``，`` ``：``), U+2212 and other dashes to ``-``, ``×`` ``÷`` to ``*`` ``/``.  Then only the
reply is read (``reply.py``): what follows a closed reasoning block (``</think>``), up to the first
special token after some text (``<|eot_id|>``, ``<|im_end|>``, ``</s>``, ``<end_of_turn>``) or the
next few-shot example after an answer ("\\n\\nQuestion: ...").

Each statement is read strictly by ``answer_rules`` (its module docstring lists the rules), with the
**polarity** of its sentence (``polarity.py``): a value that is negated, hedged, questioned, a range,
conditional, revised or prose is no answer; so is one in a sentence that opens with a condition ("If
she sold 24, the answer is 18") or says it repeats the question ("The question says she sold
\\boxed{18} clips").  A label whose line is working with its own marker ("A: ... The answer is 18."),
or whose sentence is a step of working before another marker, opens the reply: the marker names the
answer.  A box that shows a step's result inside an equation (``= \\boxed{200}``) before a statement
marked *final* ("Final Answer: The final answer is ...") is working.  The statements are then read in order for the
document's **last assertion** (``assertions.py``: a withdrawn answer, or one followed by another
value, gives no final answer, ``retracted`` / ``revised``; two statements with different values are
``distinct``; two values in one are ``several``; a value stated and denied is ``negated``): a
verifier scores all of these 0 and says why, because rewarding the first (or any) of several answers
teaches hedging.  "Final Answer: The final answer is N" is one statement.  When a marker is present
the last line is not read, even if every marked value was rejected.  What is left to the outcome:
whether the value equals the reference (``mathequiv``), and the reference's own form.
"""

from __future__ import annotations

import re
import unicodedata

from veriloop.errors import InputError
from veriloop.verifiers.answer_rules import (
    SENTENCE_END,
    Read,
    boxed_spans,
    clean_value,
    closing_value,
    conditional_prefix,
    numeric_key,
    read_value,
)
from veriloop.verifiers.assertions import Extraction, Statement, decide
from veriloop.verifiers.polarity import clause
from veriloop.verifiers.reply import reply

__all__ = [
    "DEFAULT_POLICIES",
    "KINDS",
    "MARKER_POLICIES",
    "POLICIES",
    "SPAN_POLICIES",
    "Extraction",
    "answer_key",
    "clean_value",
    "extract_answer",
    "normalize_text",
    "numeric_key",
]

# Characters NFKC leaves alone that mean ASCII punctuation, a minus sign or an operator in answers.
_TRANSLATE = str.maketrans(
    {
        "\u2212": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\ufe63": "-",
        "\uff0d": "-",
        "\u3002": ".",
        "\uff61": ".",
        "\u3001": ",",
        "\uff64": ",",
        "\u00a0": " ",
        "\u2009": " ",
        "\u202f": " ",
        "\u00d7": "*",
        "\u00f7": "/",
    }
)


def normalize_text(text: str) -> str:
    """NFKC (full-width digits and punctuation -> ASCII), minus signs, Chinese punctuation, ``×``
    ``÷``, and GSM8K's calculator annotations (``<<48/2=24>>``) removed."""
    return re.sub(r"<<[^<>]*>>", "", unicodedata.normalize("NFKC", text).translate(_TRANSLATE))


def _after_marker(pattern: str, stop: str = r"[\n;]", keep=None, needles: tuple[str, ...] = ()):
    """A finder of the values after a marker: each runs to the end of its line or segment (``stop``;
    ';' ends a step trace segment), or is the next line when the marker ends its line.  ``keep(text,
    match)`` may refuse a match; ``needles``: the marker needs one of these (lower case) in the text."""
    marker, stops = re.compile(pattern, re.IGNORECASE), re.compile(stop)

    def find(text: str) -> list[tuple[str, int, int]]:
        out = []
        if needles and not any(n in text.lower() for n in needles):  # the common case, without a regex scan
            return out
        for m in marker.finditer(text):
            if keep is not None and not keep(text, m):
                continue
            cut = stops.search(text, m.end())
            end = cut.start() if cut else len(text)
            value = text[m.end() : end]
            if not value.strip() and (cut is None or text[end] == "\n"):  # "The answer is:\n18"
                nxt = re.match(r"\n\s*([^\n]*)", text[end:])
                if nxt and nxt.group(1).strip():
                    value, end = nxt.group(1), end + nxt.end()
            start = m.start() + len(m.group()) - len(m.group().lstrip("\n;, \t"))  # the marker itself
            out.append((value, start, end))
        return out

    return find


# "A: N" is a label unless the text lists options ("A: 12" then "B: 15" opening lines)
_OPTIONS = re.compile(r"(?m)^[ \t]*(?:[*_(]+[ \t]*)?B[ \t]*[*_)]*[ \t]*[:.)]")


def _not_an_option(text: str, m: re.Match) -> bool:
    return not (m.group("short") and m.group("short").lower() == "a" and _OPTIONS.search(text))


def _last_line(text: str) -> list[tuple[str, int, int]]:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return [(lines[-1], text.rfind(lines[-1]), len(text))] if lines else []


# name -> function(text) -> [(raw value, start, end)].  Order is the documented priority.
SPAN_POLICIES = {
    "boxed": boxed_spans,
    # "#### N" wherever it starts a word (after a retraction mid-line too, or a trace's ";": "5*7=35;#### 35");
    # "#### Final Answer" is a heading
    "gsm8k": _after_marker(
        r"(?<![^\s;,:])####(?!#)[ \t]*(?!(?:final[ \t]+)?answers?\b)", r"[\n;]|####", needles=("####",)
    ),
    # label lines ("A: N", "Ans: N", "**Final Answer**: $N$", "Q: ...? A: N", "### Final Answer" then the value
    # on the next line); "answer: N" / "answer=N" anywhere; "Answer $N$" opening a line (delimited maths closed on it)
    "answer": _after_marker(
        r"(?m)(?:^|(?<=[.!?] )|(?<=\?))[ \t]*(?:[#>*_-]+[ \t]*)*"
        r"(?:(?:final[ \t]+)?answer[ \t]*[*_]*[ \t]*[=:]"
        r"|(?P<short>ans|a)[ \t]*[*_]*[ \t]*:)[ \t]*"  # "A = 7" is algebra, "A: 7" a label
        r"|^[ \t]*(?:[#>*_]+[ \t]*)*(?:final[ \t]+)?answer[ \t]*[*_:]*[ \t]*(?=\n)"
        r"|(?<![^\s;,*_])answer[ \t]*[*_]*[ \t]*[=:][ \t]*"
        r"|^[ \t]*(?:final[ \t]+)?answer[ \t]+"
        r"(?=\$\$?[^$\n]*[^$\s][^$\n]*\$|\\\[[^\n]*\S[^\n]*\\\]|\\\([^\n]*\S[^\n]*\\\))",
        keep=_not_an_option,
    ),
    "答案": _after_marker(r"(?:答案|得数)[ \t]*(?:[=:]|是|为)[ \t]*", needles=("答案", "得数")),
    "the-answer-is": _after_marker(
        r"\b(?:the\s+)?(?:final\s+)?answer\s+is(?![\w'])[ \t]*:?[ \t]*", needles=("answer",)
    ),
    "last-line": _last_line,
}


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


# a sentence that says it repeats the question: what it states is an echo, not an answer
_QUOTING = re.compile(
    r"\b(?:question|problem)\s+(?:says|said|states|stated|tells|told|gives|gave|mentions)\b"
    r"|\baccording\s+to\s+the\s+(?:question|problem)\b|\b(?:restat|repeat)\w*\s+the\s+question\b"
    r"|\bas\s+(?:given|stated)\s+in\s+the\s+(?:question|problem)\b",
    re.IGNORECASE,
)


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
    if _QUOTING.search(clause(prefix)):  # "The question says she sold \boxed{18} clips": an echo
        return Read("not", reason="prose")
    after = ""
    if name == "boxed":  # the rest of the sentence after the box qualifies it too ("\boxed{18} or so")
        after = re.split(r"(?<=[.!?])\s|\n", text[end:], maxsplit=1)[0].strip(" $")
        if after.endswith("?"):  # "... to \boxed{18} friends?": a question, not an answer
            return Read("not", reason="hedged")
        after = after.rstrip(".").strip(" $")
    if name == "boxed" and re.search(r"(?<!\\)\$", raw):  # a box broken across maths delimiters: \boxed{12 $ and $13}
        raw = re.sub(r"(?<!\\)\$", " ", raw)
    # the sentence's operators compose with the value's: "I don't think the answer is 45", "There is no doubt ..."
    return read_value(
        raw,
        kind,
        after,
        boxed=name == "boxed",
        stated=name != "boxed",
        before=text[max(0, start - 400) : start],
        working=text[:start],
    )


def _introduces(x: Statement, found: list[Statement]) -> bool:
    """A label line whose line is working with its own marker in it ("A: She had 27 and ate 9, so 18
    are left. The answer is 18."), or whose sentence is a step of working followed by another statement
    ("Answer: Natalia sold 48/2 = 24 clips in May.\\n... #### 72"): the label opens the reply, the
    marker after it names the answer."""
    if x.policy != "answer":
        return False
    if x.read.reason == "working":
        return any(y.start > x.start and y.policy != "answer" for y in found)
    return x.read.kind != "answer" and any(y is not x and x.start < y.start < x.end for y in found)


_FINAL = re.compile(r"[\W_]*(?:the\s+)?final\s+answer\b", re.IGNORECASE)


def _interim(x: Statement, found: list[Statement], text: str) -> bool:
    """A box that shows a step's result inside an equation (``... \\cdot \\frac{1}{2} = \\boxed{200}$ So,
    ...``) before a statement the text marks *final* ("Final Answer: The final answer is $10,455$."):
    working, not an answer; the final statement names the answer."""
    return (
        x.policy == "boxed"
        and bool(re.search(r"=\s*$", text[max(0, x.start - 40) : x.start]))
        and any(
            y.policy in ("answer", "the-answer-is") and y.start > x.end and _FINAL.match(text, y.start) for y in found
        )
    )


def extract_answer(text: str, policies: tuple[str, ...] = DEFAULT_POLICIES, kind: str = "maths") -> Extraction:
    """The one final answer ``text`` names, read strictly (see the module docstring).

    Marker policies are consulted together: if two of them (or two matches of one) name different
    values the result is ambiguous.  ``last-line`` is used only when no marker names anything.
    ``kind``: ``maths`` (a maths expression, not a sentence) or ``number`` (a number after cleaning).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    finders = {name: _policy(name) for name in policies}
    text = reply(normalize_text(text))
    found = [
        Statement(name, s, e, _read_statement(text, name, raw, s, e, kind))
        for name, find in finders.items()
        if name != "last-line"
        for raw, s, e in find(text)
        if not (name == "answer" and "the-answer-is" in finders and _NESTED_MARKER.match(raw))
    ]
    found = [x for x in found if x.read.kind != "empty" and not _introduces(x, found) and not _interim(x, found, text)]
    if not found and "last-line" in finders:
        found = [Statement("last-line", s, e, read_value(raw, kind, last_line=True)) for raw, s, e in _last_line(text)]
        found = [x for x in found if x.read.kind != "empty"]
        closing = closing_value(text, kind, unmarked=True) if found and found[0].read.reason == "prose" else None
        if closing is not None:  # "So she has 18 apples left.\nI hope it is correct."
            found = [found[0]._replace(read=closing)]
    return decide(found, text)


def answer_key(text: str) -> str | None:
    """The final answer's comparison key (``numeric_key`` of the value an answer marker names:
    ``answer=``, ``####``, ``\\boxed{}``...); None if there is none or it is ambiguous.  Votes (majority,
    maj@k) group completions by it."""
    ex = extract_answer(text, MARKER_POLICIES)
    return numeric_key(ex.answer) if ex.status == "ok" and ex.answer is not None else None
