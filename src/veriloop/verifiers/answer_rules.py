"""How one stated final answer reads: its value cleaned, its polarity, and the rules that refuse it.

``answers.py`` finds the statements, ``assertions.py`` combines them; this module reads one.  Its
first sentence is the value, and it must be clean (``kind="number"``: a number after cleaning, e.g.
``$1,250.``, ``18 apples``, ``1/2``, ``1 000``, ``1000,99``; ``kind="maths"``: a maths expression,
not a sentence; cleaning is ``answer_values.py``'s).  What is not clean is never handed over, so
free text cannot fall through to an expression parser that would pick a number out of it.

**Polarity** (``polarity.py``): operators before the value ("definitely 45", "probably 45", "not
45") or an operator-only comment after it ("45, no doubt", "45, I think", "45 is wrong", "\\boxed{45}
for sure") give the value an inner polarity, which composes with the operators of the statement's
sentence (``read_value(before=...)``): "I don't think the answer is 45" and "It is false that the
answer is 45" are ``negated``, "There is no doubt the answer is 45" and "It is false that the answer
is not 45" are asserted, "I'm not sure the answer is 45" is ``hedged``.  The rules, by the
``reason`` they report:

* ``negated``: ``not 18``, ``isn't 18``, ``18 is wrong``, ``\\boxed{18} is not the answer``, a
  statement under one negation: no answer.  ``retracted``: a later sentence withdraws it ("That's
  not right.", "Scratch that.", "No."; ``speech_acts.py``).  A contrast names M: exactly ``M,
  not N`` / ``not N but M`` / ``M rather than N`` / ``M instead of N`` / ``(it's) not N, it's M`` /
  ``not N which is M``.
* ``revised`` (*ambiguous*): a later sentence that is a bare other number, restates one ("It's
  18."), has a correction cue ("Oops, 18", "Wait, actually it's 18", "I mean 18") or retracts, and
  ends with another number; the text's closing sentence stating another value ("So she has 52
  left.").  Explanations after the answer with other numbers and no cue are allowed.
* ``hedged``: ``about 18``, ``~18``, ``x \\approx 11``, ``18?``, a box in a question, ``18 or so``,
  a statement under a hedge ("Maybe the answer is 18", "The answer is 18, I think"), a later sentence
  that doubts it ("I might be wrong."): no answer; but ``x = \\frac{1}{3} \\approx 0.33`` states its
  exact value (then a decimal of it).  ``range`` / ``several`` (*ambiguous*): ``between 17 and 19``,
  ``17 to 19``, ``18 or 19``, a bare list ``17, 18`` (outside a box read as maths), ``17-19`` read as
  a number.
* ``conditional``: ``If she sold 24, the answer is 18``, ``When x = 2, the answer is 18``, ``the
  answer is 18 if we ignore the tax``, ``\\boxed{18}, assuming no tax``: no answer.  A condition
  counts in the answer's sentence, the sentence opening its marker and the sentence after it;
  ``given``, ``when``, ``whenever``, ``provided`` only opening a clause or after a value ("Given
  that ...", "18 when x = 2"), not as ordinary words ("the three given conditions", "We are given
  that ...", "When multiplying by the identity:", "the solution provided"); "if you have any
  questions" is no condition on the answer.
* ``prose``: a sentence with a number in it (an echo of the question: "Tom has 18 apples."), and a
  value followed by anything but an operator-only comment ("answer=3 because 24/8").  After an
  explicit marker ("Final Answer:", "The answer is", ``####``) "the <quantity> is N" ("The largest
  $n$ is 34.") names N when its subject holds no number, no cue word and no pointer to the question
  ("the number in the question is 18" stays prose); a sentence that states one value the working
  arrived at names it ("Final Answer: Weng earned $10 for babysitting.", ``closing.sentence_value``);
  "N, which is the total" passes over a relative clause that only describes N; for maths, values
  joined by "and" are one answer of two parts ("12 and 13"), "or" gives two.  An unmarked last line
  is read as the text's **closing sentence** (``closing.py``: licensed by a conclusion connective, a
  bold value, or a value the working computed; declarative, asserted, one value); otherwise one of
  several sentences is judged by its last sentence with maths (and what follows): a negation anywhere
  in the line still counts, a correction cue there after an earlier value is ``revised``.
"""

from __future__ import annotations

import re

from veriloop.verifiers.answer_values import (  # noqa: F401  (re-exported: the reader's public names)
    ALTERNATIVE,
    CJK_CUES,
    CONDITIONAL,
    CONDITIONAL_PREFIX,
    CORRECTION,
    CORRECTION_PHRASE,
    CUES,
    DECIMAL_COMMA,
    HEDGE,
    HEDGE_SIGNS,
    MATH_WORDS,
    NEGATION,
    NUM,
    REVISING_HEDGE,
    STOPWORDS,
    THOUSANDS,
    boxed_spans,
    clean_value,
    conditional,
    conditional_prefix,
    conditions_answer,
    is_clean,
    last_number,
    negated_numbers,
    numbers_in,
    numeric_key,
    trailing_contrast,
    words,
)
from veriloop.verifiers.closing import POINTS_AT_QUESTION, closing_value, sentence_value, sentences, worked_out
from veriloop.verifiers.polarity import (
    ASSERTED,
    NEGATED,
    comment_polarity,
    leading_operators,
    may_hold_operators,
    scope_polarity,
)
from veriloop.verifiers.reading import Read, not_asserted
from veriloop.verifiers.speech_acts import DOUBTS, RETRACTS, affirms, speech_act

_U = r"(?:\s+[A-Za-z]+|[A-Za-z\u20ac\u00a3\u00a5]+\d?)?"  # a unit word after a number ("apples", "m2", "€")
_CONTRAST = [
    re.compile(rf"^(?P<m>{NUM}){_U}\s*,?\s*(?:and\s+|but\s+)?not\s+(?P<n>{NUM}){_U}$"),
    re.compile(rf"^(?P<m>{NUM}){_U}\s*\(\s*not\s+(?P<n>{NUM}){_U}\s*\)$"),  # "72 (not 96)"
    re.compile(rf"^not\s+(?P<n>{NUM}){_U}(?:\s*[,;]\s*|\s+)(?:but\s+)?(?P<m>{NUM}){_U}$"),
    re.compile(rf"^(?P<m>{NUM}){_U}\s+(?:rather\s+than|instead\s+of)\s+(?P<n>{NUM}){_U}$"),
    re.compile(
        rf"^(?:(?:no|not)\W+)?(?:(?:the\s+[a-z]+|it|this|that)(?:(?:'s|\s+is|\s+was)\s+not|\s+(?:isn't|wasn't))"
        rf"|not)\s+(?P<n>{NUM}){_U}"
        rf"\s*[,;]?\s*(?:(?:it|which|that)(?:'s|\s+is|\s+was)|but\s+it(?:'s|\s+is))\s+(?P<m>{NUM}){_U}$",
        re.I,
    ),
]
_SURE = re.compile(r"\s*(?:[,;\u2013\u2014]|\s-)?\s*100\s*%\s*(?:sure|certain|confident)\W*$", re.IGNORECASE)
_PAREN_COMMENT = re.compile(r"(.*?[\d}$%*])\s*\(([^()]*)\)\W*")
_CHECK = re.compile(
    r"\b(?:verify|verifying|check|checking|double[-\s]?check|confirm|confirming)\b|[\u2713\u2714]", re.I
)
_RANGE = re.compile(rf"{NUM}\s*(?:-|to|through|thru|~)\s*{NUM}|\bbetween\s+{NUM}\s+and\s+{NUM}")
_RESTATED = re.compile(
    rf"^(?:so\s+)?(?:it|that|this|the\s+(?:final\s+)?(?:answer|result|total|value))"
    rf"(?:'s|\s+is|\s+was)\s+({NUM})\W*$",
    re.IGNORECASE,
)
_LIST = re.compile(rf"^{NUM}(?:\s*(?:,|\band\b|&|\s)\s*{NUM})+$")
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
# "x = 1/3 \approx 0.33": an exact value, then a decimal approximation of it
_EXACT_THEN_APPROX = re.compile(r"^(?P<exact>[^=]+=.+?)\s*(?:\\approx|\u2248)\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")
# "the largest $n$ is 34": after an explicit marker, a sentence that names the quantity it answers
_NAMED_VALUE = re.compile(
    r"^(?P<subject>(?:the|its|their|our|his|her)\s.+?)\s+(?:is|are|was|equals)\s+"
    r"(?P<value>\S.*)$",
    re.IGNORECASE,
)
_MATHS_IN = re.compile(r"\$|\\[(\[]")  # delimited maths; with a number, what makes a sentence state something


def _classify(v: str, rest: str) -> Read:
    """Why ``v`` (with ``rest``, the remainder of its line) is not a clean answer."""
    text = f"{v} {rest}"
    ws, nums = set(words(text)), numbers_in(text)
    cjk = {why for why, chars in CJK_CUES.items() if any(c in text for c in chars)}
    negated = negated_numbers(text)
    if negated or ws & NEGATION or "negated" in cjk:
        return Read("not", reason="negated", negated=negated, numbers=frozenset(nums))
    if conditional(text) or "conditional" in cjk:
        return Read("not", reason="conditional", numbers=frozenset(nums))
    several = len(nums) > 1
    if several and (_RANGE.search(text) or ws & {"between", "range"}):
        return Read("several", reason="range", numbers=frozenset(nums))
    if several and (ws & (ALTERNATIVE | CORRECTION | HEDGE) or "several" in cjk):
        return Read("several", reason="several", numbers=frozenset(nums))
    if ws & (HEDGE | ALTERNATIVE) or HEDGE_SIGNS.search(text) or "hedged" in cjk or "several" in cjk:
        return Read("not", reason="hedged", numbers=frozenset(nums))
    return Read("not", reason="prose", numbers=frozenset(nums))


def _classify_line(line: str) -> Read:
    """Why an unmarked last line is no answer.  A line of several sentences is read by its last
    sentence with maths in it and what follows (what the maths reader takes from it); a negation
    anywhere in the line counts, and a correction cue in that sentence after an earlier value too."""
    whole = _classify(line, "")
    parts = sentences(line)
    last = max((i for i, s in enumerate(parts) if re.search(r"\d", s) or _MATHS_IN.search(s)), default=None)
    if whole.reason == "negated" or last is None or len(parts) < 2 or not _MATHS_IN.search(parts[last]):
        return whole
    first = last - 1 if last and re.match(r"\W*(?:then|in\s+that\s+case)\b", parts[last], re.I) else last
    own, before = parts[last], " ".join(parts[:last])
    if (set(words(own)) & CORRECTION or CORRECTION_PHRASE.search(own)) and re.search(r"\d|\$|\\[(\[]", before):
        return Read("several", reason="revised", numbers=whole.numbers)
    return _classify(" ".join(parts[first:]), "")


def _line_reason(raw: str, kind: str) -> Read:
    """``_classify_line``, except that a last sentence with a number that the polarity reader finds
    asserted ("I'm sure she earned $60.", "Without a doubt, ..."), followed by no cue word, is prose,
    not a hedge or negation by its words: whether it is an answer is for the closing sentence's licence
    to decide (``closing_value``)."""
    parts = sentences(raw)
    at = max((i for i, x in enumerate(parts) if re.search(r"\d", x)), default=None)
    said = sentence_value(parts[at], kind) if at is not None else None
    if said is not None and said.kind == "answer" and _classify(" ".join(parts[at + 1 :]), "").reason == "prose":
        return Read("not", reason="prose", numbers=frozenset(numbers_in(raw)))
    return _classify_line(raw)


def _first_sentence(raw: str) -> tuple[str, str, bool]:
    """``(head, rest, question)``: the value's first sentence, what follows it, whether it ended in ``?``."""
    m = SENTENCE_END.search(raw)
    if not m:
        return raw.strip(), "", False
    return raw[: m.start()].strip(), raw[m.end() :].strip(), "?" in m.group()


def _named_value(v: str, kind: str) -> str | None:
    """The value of "the <quantity> is N" when its subject names a quantity (no number, no cue word,
    nothing pointing at the question), else None."""
    m = _NAMED_VALUE.match(v)
    subject = words(m["subject"]) if m and not re.search(r"\d", m["subject"]) else ["if"]
    if len(subject) > 20 or set(subject) & (CUES | POINTS_AT_QUESTION):
        return None
    value = clean_value(m["value"])
    return value if is_clean(value, kind) else None


# "12 and 13", "$\\frac{1}{5}$ and $\\frac{1}{6}$": values joined by "and" (a conjunction, unlike "or")
_AND = re.compile(r"\s+and\s+|\s*&\s*")


def _conjunction(v: str) -> str | None:
    """For maths, values joined by "and" are one answer of several parts (a set or a pair, for
    math-verify to compare: "between 12 and 13" is no such value, "12 or 13" is two answers); the parts
    as written, joined by "and", or None.  Each part is a clean maths value without a relation."""
    parts = [clean_value(p).strip("$ ") for p in _AND.split(v.replace("$", " "))]
    if len(parts) < 2 or not all(p and is_clean(p, "maths") and not re.search(r"[=<>]", p) for p in parts):
        return None
    return " and ".join(parts)


# "72 clips, which is the total number sold": a relative clause that only describes the value
_ASIDE = re.compile(r"^(?P<value>[^,]+?)\s*,\s*(?P<aside>(?:which|that|i\.e\.|namely)\b[^,;]*)$", re.IGNORECASE)


def _aside(head: str, kind: str) -> str | None:
    """The value of "N, which is the total ..." when the clause after it names no number and holds no
    operator, cue word or condition ("72, which is wrong" / "which I doubt" / "which is about right" keep
    their reading); else None."""
    m = _ASIDE.match(head)
    if not m or re.search(r"\d", m["aside"]) or may_hold_operators(m["aside"]) or conditional(m["aside"]):
        return None
    value = clean_value(m["value"])
    return value if is_clean(value, kind) and not set(words(m["aside"])) & CUES else None


_COMMENT_AT = re.compile(r"\s*[,(\u2014]\s*|\s+-+\s+|\s+")  # where a comment on a value may start


def _comment(comment: str) -> str | None:
    """The polarity an operator-only comment after a value gives it ("retracted" for "scratch that"),
    or None: a comment that says anything else is read by the other rules (trailing prose is no answer)."""
    found = comment_polarity(comment)  # "is not the answer" negates the value it follows
    return found if found is not None else "retracted" if speech_act(comment) == RETRACTS else None


def _operators_around(head: str, kind: str) -> tuple[str, str] | None:
    """``(polarity, value)`` when ``head`` is a clean value with operators before it ("definitely 45",
    "clearly not 18", "probably 45") or an operator-only comment after it ("45, no doubt", "45, I
    think", "45 is wrong", "45 for sure", "45, scratch that"); else None."""
    if not may_hold_operators(head) and not speech_act(head):
        return None
    lead = leading_operators(head)
    polarities, body = ([lead[0]], head[lead[1] :].strip()) if lead else ([], head)
    if not is_clean(clean_value(body), kind):
        for m in reversed(list(_COMMENT_AT.finditer(body))):
            if m.start() and is_clean(clean_value(body[: m.start()]), kind):
                found = _comment(body[m.start() :])
                if found is None:
                    return None
                polarities.append(found)
                body = body[: m.start()]
                break
        else:
            return None
    if not polarities:
        return None
    worst = next((p for p in ("retracted", "hedged", "questioned", NEGATED) if p in polarities), ASSERTED)
    return worst, body


def read_value(
    raw: str,
    kind: str,
    after: str = "",
    boxed: bool = False,
    stated: bool = False,
    last_line: bool = False,
    before: str | None = None,
    working: str = "",
) -> Read:
    """Read one stated value; ``after`` is the rest of the sentence outside it (after a box);
    ``stated``: it follows an explicit marker (``answer:``, "the answer is", ``####``); ``last_line``:
    it is the unmarked last line; ``before``: the text before the statement's marker, whose operators
    compose with the value's own ("It is false that the answer is not 45" asserts 45; "I doubt the
    answer is 45" does not); ``working``: the whole text before the statement (after a label, a sentence
    names its one value when the working computed or concluded it: "Final Answer: Weng earned $10.").
    A bare list of numbers (``17, 18``) is several answers, except in a box read as maths (a set of
    solutions)."""
    read, inner = _read_value(raw, kind, after, boxed, stated, last_line, working)
    if read.kind not in ("answer", "several"):
        return read
    polarity = scope_polarity(before, inner) if before is not None else inner
    if polarity == ASSERTED:
        return read
    if read.kind == "several":
        return Read("not", reason=not_asserted(polarity, "").reason, numbers=read.numbers)
    return not_asserted(polarity, numeric_key(read.value))


def _contrasted(head: str) -> tuple[str, str, frozenset[str], str]:
    """``(head, value, negated, span)``: a contrast names one value and negates the other ("72 (not 96)",
    "not 52 but 45", "18, not 6 — six is only one pack": the rest of its clause explains 6)."""
    v = clean_value(head)
    for pattern in _CONTRAST:
        m = pattern.match(v)
        if m and numeric_key(m["m"].strip("$%")) != numeric_key(m["n"].strip("$%")):
            return head, clean_value(m["m"]), frozenset({numeric_key(m["n"].replace("$", ""))}), m["m"]
    contrast = trailing_contrast(head)
    if contrast is not None and numeric_key(clean_value(contrast[0])) != contrast[1]:
        return contrast[0], clean_value(contrast[0]), frozenset({contrast[1]}), contrast[0]
    return head, v, frozenset(), head


def _read_value(
    raw: str, kind: str, after: str, boxed: bool, stated: bool, last_line: bool, working: str
) -> tuple[Read, str]:
    """(the reading, the polarity the value's own operators give it)."""
    inner = ASSERTED
    head, rest, question = _first_sentence(raw)
    head = _SURE.sub("", head)  # "$54 — 100% sure": a commitment, not "54 - 100%"
    paren = _PAREN_COMMENT.fullmatch(head)  # "#### 14 (tentatively)": a comment on the value
    if paren and (said := _comment(paren[2])) not in (None, ASSERTED):
        if said == "retracted":
            return not_asserted(said, numeric_key(clean_value(paren[1]))), inner
        head, inner = paren[1], said
    head, v, negated, span = _contrasted(head)
    comma = DECIMAL_COMMA.match(v)
    if comma and not boxed and not THOUSANDS.match(v):  # "1000,99" is 1000.99 (a decimal comma)
        v = span = f"{comma.group(1)}.{comma.group(2)}"
    exact = _EXACT_THEN_APPROX.match(v) if kind == "maths" else None
    if exact and is_clean(exact["exact"].strip(), kind):  # "x = 1/3 \approx 0.33" states 1/3
        v = span = exact["exact"].strip()
    if not re.search(r"[0-9A-Za-z\\]", v) and not re.search(r"\d", rest):
        return Read("empty"), inner
    if not is_clean(v, kind):
        done, v, span, inner = _read_unclean(raw, head, rest, question, v, kind, after, stated, last_line, working)
        if done is not None:
            return done, inner
    if (kind == "number" or not boxed) and _LIST.match(v) and len(numbers_in(v)) > 1:
        return Read("several", reason="several", numbers=frozenset(numbers_in(v))), inner
    if question:
        return Read("not", reason="hedged", numbers=frozenset(numbers_in(head))), inner
    key = numeric_key(v)
    comment = _comment(after) if after else None
    if comment is not None:  # "\boxed{18}, no doubt", "\boxed{18}, I think", "\boxed{18}, scratch that"
        if comment == "retracted":
            return not_asserted(comment, key), inner
        inner = next((p for p in ("hedged", "questioned", NEGATED) if p in (inner, comment)), ASSERTED)
        after = ""
    if after and (other := re.match(rf"(.*?);\s*\$?({NUM})\b", after)) and numeric_key(other[2]) != key:
        after = other[1]  # "\boxed{1250} is the answer; $950 alone would not include utilities": about 950
    if after:  # "\boxed{18} or so", "\boxed{18} is wrong", "\boxed{17}, not 18" (a contrast: 17)
        qualified = revision(after, key, same_line=True)
        if qualified is not None:
            return qualified, inner
        ws, others = set(words(after)), negated_numbers(after) - {key}
        if ws & ALTERNATIVE and re.search(r"\\(?:boxed|fbox)|\d", after):  # "\boxed{a} or \boxed{b}"
            return Read("several", reason="several", numbers=frozenset(numbers_in(after)) | {key}), inner
        if ws & (CUES - NEGATION) or HEDGE_SIGNS.search(after) or ws & NEGATION and not others:
            return _classify(f"{head} {after}", ""), inner
        negated |= others
    revised = revision(rest, key, same_line=True)
    if revised is not None:
        return revised, inner
    span = f"\\boxed{{{span}}}" if boxed else span
    return Read("answer", v, negated=negated, numbers=frozenset({key}), span=span), inner


def _read_unclean(
    raw: str,
    head: str,
    rest: str,
    question: bool,
    v: str,
    kind: str,
    after: str,
    stated: bool,
    last_line: bool,
    working: str,
) -> tuple[Read | None, str, str, str]:
    """A statement that is not one clean value: a sentence around it ("We cannot conclude it is 45"),
    a value the sentence names, the last line's closing sentence, a conjunction or a question.
    (a finished reading or None, the value and span to read on, the polarity of its own operators)."""
    inner, span = ASSERTED, v
    around = _operators_around(head, kind) if not (last_line and rest) else None  # a line's first sentence
    if around is not None and around[0] == "retracted":
        return not_asserted(around[0], numeric_key(clean_value(around[1]))), v, span, inner
    inner = around[0] if around is not None else inner
    named = _named_value(v, kind) if stated and not question and around is None else None
    named = named or (_aside(head, kind) if stated and not question and around is None else None)
    # after a label, a sentence that states one value names it ("Final Answer: Weng earned $10 ...")
    said = sentence_value(head, kind) if stated and not question and around is None and named is None else None
    if said is not None and said.kind == "answer" and not worked_out(said.value, working):
        said = None  # "Final Answer: Tom has 18 apples." with nothing worked out: it may echo the question
    if around is not None:
        v, span = clean_value(around[1]), around[1]
    elif named is not None:
        v = span = named
    elif said is not None:
        if said.kind != "answer":  # "Final Answer: Weng did not earn $10."
            return said, v, span, inner
        v = span = said.value
        if re.search(r"\d\s*=", head):  # a sentence of working ("Answer: She sold 48/2 = 24 in May.")
            return Read("answer", v, numbers=frozenset({numeric_key(v)}), span=span, reason="working"), v, span, inner
    elif last_line:
        return closing_value(raw, kind) or _line_reason(raw, kind), v, span, inner
    elif kind == "maths" and (both := _conjunction(v)) is not None:  # "12 and 13": one answer of two parts
        return Read("answer", both, numbers=frozenset({numeric_key(both)}), span=both), v, span, inner
    elif question:  # "answer: is 72 correct? 48 + 24 = 72.": a question names only its own numbers
        return Read("not", reason="hedged", numbers=frozenset(numbers_in(head))), v, span, inner
    else:
        return _classify(head, f"{after} {rest}"), v, span, inner
    return None, v, span, inner


def _called_wrong(tail: str) -> bool:
    """Text right after the answer that calls it wrong ("... 72 is wrong", "... 72, not right"): the answer is
    negated whatever follows, so this is read before any sentence."""
    return bool(
        re.match(
            r"^[\s$)]*(?:(?:is|was|seems|would\s+be)\s+)?(?:wrong|incorrect|false|a\s+mistake|not\s+(?:right|"
            r"correct|the\s+answer|it)\b)",
            tail,
            re.I,
        )
    )


def _checks_the_answer(sentence: str, key: str, new: str) -> bool:
    """A check that works from the answer to another number ("let me verify: 45 * 3 = 135"): the number it
    ends with is the check's result, not a new answer."""
    return bool(
        _CHECK.search(sentence)
        and re.search(
            rf"(?<![\d.]){re.escape(key)}(?!\d|\.\d)[^=\n]*=\s*\$?{re.escape(new)}(?!\d|\.\d)",
            sentence.replace(",", ""),
        )
    )


def _restates_or_corrects(sentence: str, ws: set) -> bool:
    """A sentence that gives a value bare or restated ("Definitely 18.", "Probably 18.", not "Not 18.") or with
    a correction cue ("Wait, 20.", "Make that 20."): with a value other than the answer's, it revises the answer."""
    restated = _operators_around(sentence.strip().rstrip(".!"), "maths")
    bare = (
        re.fullmatch(rf"[\s*$(]*{NUM}[\s*.!)]*", sentence)
        or _RESTATED.match(sentence.strip())
        or (restated is not None and restated[0] != NEGATED)
    )
    return bool(bare or ws & CORRECTION or CORRECTION_PHRASE.search(sentence) or any(c in sentence for c in "错改"))


def revision(tail: str, key: str, same_line: bool = False, closing: bool = False) -> Read | None:
    """Does text after a stated answer withdraw, doubt, qualify or revise it?  A condition counts in its
    first two sentences (the rest of the answer's sentence and the next) when it is about the answer
    (``conditions_answer``: not "Feel free to ask if anything is unclear.").  A sentence that retracts
    it ("Scratch that.", "That's wrong.", speech_acts.speech_act) is ``retracted``, or ``revised`` when
    it ends with another value (so is a question offering one: "Or is it 96?"); one that doubts it ("I
    might be wrong.") is ``hedged``, and so is a question about it ("Is that right?") that no later
    sentence answers with yes.  ``closing``:
    ``tail`` runs to the end of the text, whose closing sentence stating another value revises it."""
    if _called_wrong(tail):
        return Read("not", reason="negated", negated=frozenset({key}), numbers=frozenset({key}))
    k, asked = 0, False  # sentences so far; a question about the answer not yet answered with yes
    for n, line in enumerate(tail.splitlines()):
        for sentence in (s for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()):
            ws, new = set(words(sentence)), last_number(sentence)  # a revision ends with the new value
            new = new if new not in (None, key) else None
            question = sentence.rstrip(" *_").endswith("?")
            if asked and affirms(sentence, key):  # "... is 72 correct? 48 + 24 = 72. Yes."
                asked = False
                continue
            if key in negated_numbers(sentence):
                return Read("not", reason="negated", negated=frozenset({key}), numbers=frozenset({key}))
            if (k := k + 1) <= 2 and conditions_answer(sentence):
                return Read("not", reason="conditional")
            if same_line and n == 0 and (ws & REVISING_HEDGE or HEDGE_SIGNS.search(sentence)) and new:
                return Read("several", reason="several", numbers=frozenset({key, new}))
            if new and _checks_the_answer(sentence, key, new):
                continue  # "let me verify: 45 * 3 = 135": a check that uses the answer, no new answer
            act = speech_act(sentence, key)
            if new and (_restates_or_corrects(sentence, ws) or act == RETRACTS or question):  # "Or is it 20?"
                return Read("several", reason="revised", numbers=frozenset({key, new}))
            if act == DOUBTS and question:  # "Is that right?": a doubt unless a later sentence says yes
                asked = True
                continue
            if act:
                return Read("not", reason="retracted" if act == RETRACTS else "hedged", numbers=frozenset({key}))
    if asked:
        return Read("not", reason="hedged", numbers=frozenset({key}))
    last = closing_value(tail, "maths") if closing and tail.strip() else None
    if last is not None and last.kind == "answer" and numeric_key(last.value) != key:  # "So she has 52 left."
        return Read("several", reason="revised", numbers=frozenset({key, numeric_key(last.value)}))
    return None
