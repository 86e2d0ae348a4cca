"""A sentence that states a result without a marker: the closing sentence, and a sentence after a label.

**One sentence's value** (``sentence_value``): a declarative sentence states a value when it names
exactly one number or fraction (``**18**`` and ``$18`` count as 18), holds no maths, no operator but
intensifiers and truth words (a negation makes it ``negated``; a hedge, possibility, belief or question
``hedged``), no condition, no approximation sign, no cue word (hedges, alternatives, corrections) and
nothing saying its value comes from the question ("the question says ...", "as given in the problem";
not "the three given conditions").  After an answer label ("**Final Answer:**
Weng earned $10 for babysitting.", "### Final Answer\\nNatalia sold 72 clips.") such a sentence names
its value.

**The closing sentence** (``closing_value``): with no marker in the text, its last sentence that names
a value is an answer when nothing after it names a value, doubts it or withdraws it (sign-offs such as
"I hope this helps!" or "Does that make sense?" are passed over; "Is that right?" is not), and when it
is *licensed* as a conclusion by one of:

* a conclusion connective opening it (so, therefore, thus, hence, in total, altogether, all told, as a
  result ...), or after a comma in it ("When we divide 144 by 12 we get 12, so each shelf holds 12
  books.": what it concludes is read);
* its value in bold ("Natalia sold **72** clips altogether."), the way chat models mark an answer;
* (``unmarked``) its value being a result the working computed, the right side of an ``=`` before it
  or in it ("48 + 24 = 72 ... Natalia sold 72 clips altogether in April and May.", "Natalia sold 48+24
  = 72 clips altogether."), a result stated in words ("Half of 32 is 16."), or the value of an
  earlier conclusion.  A number the question gave is an operand, never a result, so an echo of the
  question stays prose.

A contrast with another value at its end names the first ("It takes her 3.5 hours, not 4."; "...,
not the 120 you'd get by ignoring the half hour": the rest explains the other value).

A computation inside the sentence names only its result ("Altogether, she sold 48 + 24 = 72 clips."
names 72).

A sentence in the conditional mood ("would") right after a conditional one ("Were the price $3, she
would make $27.\\nThe answer would be 27.") continues its supposition: ``conditional``.

What this module does not decide: what a marker names (``answers.py``), the reading of a marked value
(``answer_rules.py``), and what the statements together mean (``assertions.py``).
"""

from __future__ import annotations

import re

from veriloop.verifiers.answer_values import (
    CUES,
    HEDGE_SIGNS,
    NUM,
    WEAK_CONDITIONAL,
    clean_value,
    concluded,
    conditional,
    is_clean,
    mark_currency,
    numeric_key,
    trailing_contrast,
    words,
)
from veriloop.verifiers.polarity import (
    ASSERTED,
    COMMIT,
    HEDGED,
    NEGATED,
    TRUTH,
    Item,
    chunk_operators,
    compose,
    tokens,
    whole_polarity,
)
from veriloop.verifiers.reading import Read, not_asserted
from veriloop.verifiers.speech_acts import speech_act

_CONCLUSION = re.compile(
    r"^\W*(?:so|therefore|thus|hence|consequently|altogether|overall|finally|all\s+in\s+all|all\s+told|"
    r"ultimately|to\s+sum\s+up|in\s+short|"
    r"in\s+(?:total|all|sum|summary|conclusion|the\s+end)|as\s+a\s+result|(?:this|that)\s+"
    r"(?:means|gives))\b",
    re.IGNORECASE,
)
_ONE_VALUE = re.compile(rf"(?<![A-Za-z0-9_.$/]){NUM}(?:\s*/\s*\d+(?!\d|[.,]\d))?(?![\d/])")  # a number, a fraction
_COMPARATIVE = re.compile(r"\b(?:more|less|fewer)\s+than\b|\b(?:more|less|fewer)\b(?=\s+\d)", re.IGNORECASE)
_PLAIN_COMPARATIVES = frozenset("more less fewer".split())  # "12 more boxes" is a number of boxes
POINTS_AT_QUESTION = frozenset("question problem given says said states stated statement told example".split())
# a sentence that says its value comes from the question ("as given in the problem", "the question says"); not
# "the three given conditions" or "the answer to the problem"
_FROM_QUESTION = re.compile(
    r"\b(?:in|from|by|according\s+to)\s+the\s+(?:question|problem|statement|example)\b"
    r"|\b(?:question|problem|statement)\s+(?:says|said|states|stated|gives|gave|tells|told|"
    r"mentions|asks)\b|\b(?:is|are|was|were|as|been)\s+(?:given|stated|told)\b|\bgiven\s+"
    r"(?:in|by|as)\b|\bwe\s+(?:are|were)\s+(?:given|told)\b|\b(?:says|said|states|(?<!all\s)told)\b",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*|__([^_\n]+)__")
_EMPHASIS = re.compile(r"\*\*(?=\\?\$?\s*[-+]?\d)|(?<=[\d%])\*\*")  # "**18**", "**$18**" read as 18
_RESULT = re.compile(rf"=\s*(?:\*\*)?\s*(?:\\?\$)?\s*({NUM[:-2]})")  # the right side of an "="
# a result stated in words: "Half of 32 is 16.", "8 times 2 is 16", "the sum of 10 and 6 is 16"
_WORDED_RESULT = re.compile(
    rf"\b(?:half|double|twice|triple|thrice|(?:a\s+)?(?:third|quarter|fifth|tenth)|sum|product|"
    rf"difference|quotient|total|\d[\d,.]*\s*%?\s*(?:times|plus|minus|less|more|over|divided\s+by|"
    rf"multiplied\s+by|added\s+to|of))\b[^.\n=]{{0,40}}?\b(?:is|are|equals|makes|gives|comes\s+to)"
    rf"\s+(?:\\?\$)?\s*({NUM[:-2]})",
    re.IGNORECASE,
)
# a question addressed to the reader ("Does that make sense?", "Anything else I can help you with?"), not the problem
_TO_READER = re.compile(r"\b(?:you|your)\b|\bmakes?\s+sense\b|\bhelps?\b|\bclear\b", re.IGNORECASE)
_MOOD = re.compile(r"\b(?:would|'d)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """Sentences; maths that ends one often swallows its period (``$$ ... .$$ Therefore ...``)."""
    text = re.sub(r"\b([Aa]pprox|[Cc]a|[Ee]st)\.(?=\s)", r"\1", text)  # "Approx. 500 grams": no sentence end
    return [s for s in re.split(r"(?<=[.!?$])\s+(?=[A-Z])|(?<=[.!?])\s+|(?<=\\[)\]])\s+(?=[A-Z])", text) if s.strip()]


# the left side of an equation in a sentence ("sold 48 + 24 = 72 clips"): working, whose result is the value
_WORKED = re.compile(r"(?:\\?\$?\s*\(?\s*\d[\d,.]*\s*\)?\s*[-+*/x\u00d7]\s*)+\\?\$?\s*\(?\s*\d[\d,.]*\s*\)?\s*=\s*")


_CERTAINTY = re.compile(
    r"(?:^|(?<=[\s(]))100\s*%(?=\s+(?:sure|certain|confident|it|it's|that|this|the|i|i'm)\b)|"
    r"^\W*100\s*%\W*(?=[A-Za-z])",
    re.IGNORECASE,
)


def _values(sentence: str) -> list[str]:
    """The values a sentence names; of a computation in it only the result ("48 + 24 = 72" names 72)."""
    sentence = _CERTAINTY.sub(" ", sentence)  # "100% it's 9": a degree of certainty, no value
    return _ONE_VALUE.findall(_WORKED.sub(" ", _EMPHASIS.sub("", sentence)))


def sentence_value(sentence: str, kind: str) -> Read | None:
    """The value ``sentence`` states (see the module docstring); a ``not`` reading when its operators
    negate or hedge it; None when it states no one value."""
    sentence, contrasted = sentence.strip(), frozenset()
    contrast = trailing_contrast(sentence)  # "She read it in 3.5 hours, not 4.": the value is 3.5
    if contrast is not None and len(_values(contrast[0])) == 1:
        sentence, contrasted = contrast[0].rstrip() + ".", frozenset({contrast[1]})
    found = _values(sentence)
    if sentence.rstrip("*_ ").endswith("?") or len(found) != 1 or re.search(r"[\u3040-\u9fff]", sentence):
        return None  # a question, several values, or Chinese (read by its own cue characters)
    if re.search(r"\\vlmath|(?<!\\)\$[^$]*[^$\d.,\s\\][^$]*(?<!\\)\$", mark_currency(sentence)):
        return None  # maths is the maths reader's (currency dollars are no maths: "9 * $2 = $18")
    value, items = clean_value(found[0]), tokens(sentence)
    polarity = _polarity(sentence, found[0], items)
    if polarity != ASSERTED:
        return not_asserted(polarity, numeric_key(value))
    # the operators are read: "sure" in "I'm sure she earned $60" is no hedge cue
    ws = {w for w in words(sentence) if not any(it.kind == "op" for it in tokens(w))}  # "can't", "sure"
    ws -= {w for it in items if it.kind == "op" for w in it.text.split()}  # the words of operator phrases
    cues = (ws & CUES) - WEAK_CONDITIONAL - (_PLAIN_COMPARATIVES if not _COMPARATIVE.search(sentence) else frozenset())
    cues -= {w for w in ("over", "under") if not re.search(rf"\b{w}\s+\$?\d", sentence, re.I)}  # "over the week"
    if not re.search(r"(?:^|[,;:])\W*actually\b", sentence, re.IGNORECASE):
        cues -= {"actually"}  # "the tiles he can actually use": a correction only when it opens a clause
    if cues or conditional(concluded(sentence)) or HEDGE_SIGNS.search(sentence) or _FROM_QUESTION.search(sentence):
        return None
    if not is_clean(value, kind):
        return None
    return Read("answer", value, negated=contrasted, numbers=frozenset({numeric_key(value)}), span=value)


def _polarity(sentence: str, value: str, items: list[Item]) -> str:
    """``asserted``, ``negated`` or ``hedged``: the operators before the value composed by scope when
    all of them reach it, and those after it when they scope over the rest ("Without a doubt, she earned
    $60." and "She has 45 books without a doubt." assert them; "She earned $60, I think." hedges it);
    otherwise any operator but an intensifier or truth word leaves it unasserted ("She did not earn $60.")."""
    ops = {it.cls for it in items if it.kind == "op"} - {COMMIT, TRUTH}
    at = sentence.rfind(value)
    if not ops or at < 0:
        return ASSERTED if not ops else NEGATED if ops <= {"neg", "neg-pred"} else HEDGED
    head, tail = sentence[:at], sentence[at + len(value) :]
    readings = [
        whole_polarity(head) if any(it.kind == "op" for it in tokens(head)) else ASSERTED,
        _tail_polarity(tokens(tail)),
    ]
    if None not in readings:
        if readings[0] == ASSERTED or readings[1] == ASSERTED:  # one side says nothing: the other's
            found = readings[1] if readings[0] == ASSERTED else readings[0]
            return found if found in (ASSERTED, NEGATED) else HEDGED  # "questioned" reads as hedged here
    return NEGATED if ops <= {"neg", "neg-pred"} else HEDGED


def _tail_polarity(items: list[Item]) -> str | None:
    """The polarity the words after a value give it when each operator there scopes over the rest
    ("45 books without a doubt": asserted; "45 books, I think": hedged); None when one governs a word
    of its own ("45 books without a cover", "45, not 52")."""
    ops = chunk_operators(items, final=True)
    if len(ops) != sum(it.kind == "op" for it in items):
        return None
    return compose([cls for cls, _ in ops])


def _key(value: str) -> str:
    """The comparison key of a number as a sentence writes it ("$18", "**18**", "75%" -> "75")."""
    return numeric_key(value.strip("*_ ")).rstrip("%")


def supported(value: str, before: str) -> bool:
    """Is ``value`` a result of the working in ``before``: the right side of an ``=`` there, or the one
    value of a sentence there opened by a conclusion connective ("So, she started 3 hours ago.")?  A
    number the question gave is an operand, never a result."""
    key = _key(value)
    if any(_key(m.group(1)) == key for m in (*_RESULT.finditer(before), *_WORDED_RESULT.finditer(before))):
        return True
    concluded = (x for line in before.splitlines() for x in sentences(line) if _CONCLUSION.match(x.strip()))
    return any(len(vs) == 1 and _key(vs[0]) == key for vs in map(_values, concluded))


def worked_out(value: str, before: str) -> bool:
    """Does working in ``before`` arrive at ``value``: is it ``supported`` there, or new after working
    (working with numbers before it that never names it)?  A value that working named only as an operand
    or a given ("She sold 48 ... Final Answer: She sold 48 clips.") or one with no working before it
    ("Final Answer: Tom has 18 apples.") may echo the question."""
    if supported(value, before):
        return True
    return bool(re.search(r"\d", before)) and _key(value) not in {_key(v) for v in _ONE_VALUE.findall(before)}


def _licensed(sentence: str, before: str, unmarked: bool) -> bool:
    """Is ``sentence`` a conclusion: opened by a connective, its value in bold, or (``unmarked``) its value
    a result of the working (``supported``)?"""
    if _CONCLUSION.match(sentence):
        return True
    value = _values(sentence)[0]
    bold = [clean_value(a or b) for a, b in _BOLD.findall(sentence)]
    if any(is_clean(b, "number") and _key(b) == _key(value) for b in bold):
        return True
    return unmarked and supported(value, f"{before}\n{sentence}")  # a result of the working, or of its own


def closing_value(text: str, kind: str, unmarked: bool = False) -> Read | None:
    """The value of the text's closing sentence when it states a result (see the module docstring);
    None otherwise: an echo of the question stays prose."""
    lines = text.strip().splitlines()[-20:]  # a capitalised connective opens a sentence ("= 2/3 Therefore, ...")
    found = [
        x.strip()
        for line in lines
        for part in re.split(r"\s(?=(?:So|Therefore|Thus|Hence)\b)", line)
        for x in sentences(part)
        if x.strip()
    ]
    at = max((i for i, x in enumerate(found) if re.search(r"\d", x)), default=None)
    if at is None or any(
        speech_act(x) or x.rstrip("*_ ").endswith("?") and not _TO_READER.search(x) for x in found[at + 1 :]
    ):
        return None  # a doubt, or a new question about the problem ("How much does she make in a week?")
    last = found[at]
    core = trailing_contrast(last)  # "It takes her 3.5 hours, not 4.": its value is 3.5
    body = core[0] if core is not None and len(_values(core[0])) == 1 else last
    if concluded(body) != body:  # "When we divide 144 by 12 we get 12, so each shelf holds 12 books.":
        last = body = "So " + concluded(body).strip()  # read what it concludes, licensed by its connective
    if last.rstrip("*_ ").endswith("?") or len(_values(body)) != 1:
        return None
    before = text[: text.rfind(last)] if last in text else ""
    if not _licensed(body, before, unmarked):
        return None
    if at and _MOOD.search(last) and conditional(found[at - 1]):  # "Were the price $3, ... The answer would be 27."
        return Read("not", reason="conditional")
    return sentence_value(last, kind)
