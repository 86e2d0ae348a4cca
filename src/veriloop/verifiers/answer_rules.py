"""How one stated final answer reads: its value cleaned, and the rules that refuse it.

``answers.py`` finds the statements and combines them; this module reads one.  Its first sentence
is the value, and it must be clean (``kind="number"``: a number after cleaning, e.g. ``$1,250.``,
``18 apples``, ``1/2``, ``1 000``, ``1000,99``; ``kind="maths"``: a maths expression, not a
sentence).  What is not clean is never handed over, so free text cannot fall through to an
expression parser that would pick a number out of it.  The rules, by the ``reason`` they report:

* ``negated``: ``not 18``, ``isn't 18``, ``18 is wrong``, ``\\boxed{18} is not the answer``: no
  answer.  ``retracted``: a later sentence withdraws it ("That's not right.", "No.").  A contrast
  names M: exactly ``M, not N`` / ``not N but M`` / ``M rather than N`` / ``M instead of N`` /
  ``(it's) not N, it's M`` / ``not N which is M``.
* ``revised`` (*ambiguous*): a later sentence that is a bare other number, restates one ("It's
  18."), or has a correction cue ("Oops, 18", "Wait, actually it's 18", "I mean 18") and ends with
  another number.  Explanations after the answer with other numbers and no cue are allowed.
* ``hedged``: ``about 18``, ``~18``, ``x \\approx 11``, ``18?``, a box in a question, ``18 or so``:
  no answer; but ``x = \\frac{1}{3} \\approx 0.33`` states its exact value (then a decimal of it).
  ``range`` / ``several`` (*ambiguous*): ``between 17 and 19``, ``17 to 19``, ``18 or 19``, a bare
  list ``17, 18`` (outside a box read as maths), ``17-19`` read as a number.
* ``conditional``: ``If she sold 24, the answer is 18``, ``When x = 2, the answer is 18``, ``the
  answer is 18 if we ignore the tax``, ``\\boxed{18}, assuming no tax``: no answer.  A condition
  counts in the answer's sentence, the sentence opening its marker and the sentence after it;
  ``given``, ``when``, ``whenever``, ``provided`` only opening a clause or after a value ("Given
  that ...", "18 when x = 2"), not as ordinary words ("the three given conditions", "We are given
  that ...", "When multiplying by the identity:", "the solution provided"); "if you have any
  questions" is no condition on the answer.
* ``prose``: a sentence with a number in it (an echo of the question: "Tom has 18 apples.").
  After an explicit marker ("Final Answer:", "The answer is", ``####``) "the <quantity> is N"
  ("The largest $n$ is 34.") names N when its subject holds no number, no cue word and no pointer
  to the question ("the number in the question is 18" stays prose).  An unmarked last line of
  several sentences is judged by its last sentence with maths (and what follows): a negation
  anywhere in the line still counts, a correction cue there after an earlier value is ``revised``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_NUM = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?"
_NUM_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_.$])(-?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![\d])")
_NUMBER_KIND = re.compile(  # a number after cleaning: plain, percent, a fraction
    r"^[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)%?$|^[-+]?\d+\s*/\s*\d+$|^[-+]?\\[dt]?frac\{\d+\}\{\d+\}$"
)
_SPACED_THOUSANDS = re.compile(r"^([-+]?\$?\d{1,3}(?: \d{3})+)(?=$|[.%]|\s*[A-Za-z])")  # "1 000", "12 500 apples"
_DECIMAL_COMMA = re.compile(r"^([-+]?\d+),(\d+)$")  # one comma, not thousands: "1000,99", "2,74", "0,5"
_THOUSANDS = re.compile(r"^[-+]?[1-9]\d{0,2}(?:,\d{3})+$")

# Cue words (lower case).  A value that contains one is not a clean answer; which list names why.
NEGATION = frozenset("not no never isn't isnt aren't wasn't won't can't cannot don't doesn't nope neither nor "
                     "wrong incorrect false none".split())  # fmt: skip
HEDGE = frozenset("about approximately approx approximate around roughly nearly almost probably perhaps possibly "
                  "maybe likely unlikely estimate estimated guess ish circa some somewhere close between range "
                  "least most more less fewer over under like think believe sure unsure bet".split())  # fmt: skip
ALTERNATIVE = frozenset("or either".split())
CONDITIONAL = frozenset("if unless assuming assume suppose supposing provided providing given otherwise whether "
                        "when whenever".split())  # fmt: skip
_WEAK_CONDITIONAL = frozenset("given when whenever provided providing".split())  # also ordinary words
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
# words that make the sentence before a marker a condition on it ("If she sold 24, the answer is 18")
CONDITIONAL_PREFIX = frozenset("if unless assuming assume suppose supposing otherwise".split())
# "given" / "when" / "whenever" / "provided" opening a clause or following a value, not before an -ing
# word; "provided that" anywhere ("the solution provided", "the three given conditions" are no conditions)
_WEAK_CONDITION = re.compile(r"(?:^|[,;:(]|[\d$}%])\s*(?:given|when|whenever|provided|providing)\b"
                             r"(?P<ing>\s+[a-z]+ing\b)?|\bprovid(?:ed|ing)\s+that\b", re.I)
_PLEASANTRY = re.compile(r"\bif\s+you(?:'d|\s+would)\s+like\b|\bif\s+you\s+(?:have|need)\s+(?:any\s+)?(?:more\s+|"
                         r"further\s+|other\s+)?(?:questions?|help|clarifications?|assistance|explanations?)\b", re.I)
_TEXT_CMD = r"\\(?:text(?:normal|rm|up|bf|it|sf)?|mbox|mathrm)"  # LaTeX text (units, words) in maths

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_NEGATED_NUMBER = re.compile(
    rf"(?:\bnot|n't|\bnever|\bno)\s+(?:be\s+|equal\s+to\s+|exactly\s+)?({_NUM})"
    rf"|({_NUM})\s*(?:[A-Za-z]+\s+)?(?:is|was|seems|would\s+be)?\s*(?:wrong|incorrect|false|not\s+(?:right|correct|"
    rf"the\s+answer)|a\s+mistake)\b"
)
_U = r"(?:\s+[A-Za-z]+|[A-Za-z\u20ac\u00a3\u00a5]+\d?)?"  # a unit word after a number ("apples", "m2", "€")
_CONTRAST = [
    re.compile(rf"^(?P<m>{_NUM}){_U}\s*,?\s*(?:and\s+|but\s+)?not\s+(?P<n>{_NUM}){_U}$"),
    re.compile(rf"^not\s+(?P<n>{_NUM}){_U}(?:\s*[,;]\s*|\s+)(?:but\s+)?(?P<m>{_NUM}){_U}$"),
    re.compile(rf"^(?P<m>{_NUM}){_U}\s+(?:rather\s+than|instead\s+of)\s+(?P<n>{_NUM}){_U}$"),
    re.compile(rf"^(?:(?:no|not)\W+)?(?:(?:the\s+[a-z]+|it|this|that)(?:'s|\s+is|\s+was)\s+)?not\s+(?P<n>{_NUM}){_U}"
               rf"\s*[,;]?\s*(?:(?:it|which|that)(?:'s|\s+is|\s+was)|but\s+it(?:'s|\s+is))\s+(?P<m>{_NUM}){_U}$", re.I),
]  # fmt: skip
_RANGE = re.compile(rf"{_NUM}\s*(?:-|to|through|thru|~)\s*{_NUM}|\bbetween\s+{_NUM}\s+and\s+{_NUM}")
_RESTATED = re.compile(rf"^(?:so\s+)?(?:it|that|this|the\s+(?:final\s+)?(?:answer|result|total|value))"
                       rf"(?:'s|\s+is|\s+was)\s+({_NUM})\W*$", re.IGNORECASE)
_LIST = re.compile(rf"^{_NUM}(?:\s*(?:,|\band\b|&|\s)\s*{_NUM})+$")
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_HEDGE_SIGNS = re.compile(r"[~\u2248\u2243\u223c\u00b1]|\\approx|\\sim\b")
# "x = 1/3 \approx 0.33": an exact value, then a decimal approximation of it
_EXACT_THEN_APPROX = re.compile(r"^(?P<exact>[^=]+=.+?)\s*(?:\\approx|\u2248)\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")
_RETRACTED = re.compile(  # a later sentence that withdraws the answer without naming a new one
    r"\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake)\b"
    r"|\b(?:doesn't|does\s+not|don't)\s+(?:look|seem|sound)\s+right\b|^\W*(?:no|nope|not\s+really|wrong)\W*$",
    re.IGNORECASE,
)
# "the largest $n$ is 34": after an explicit marker, a sentence that names the quantity it answers
_NAMED_VALUE = re.compile(r"^(?P<subject>(?:the|its|their|our|his|her)\s.+?)\s+(?:is|are|was|equals)\s+"
                          r"(?P<value>\S.*)$", re.IGNORECASE)
_POINTS_AT_QUESTION = frozenset("question problem given says said states stated statement told example".split())
_MATHS_IN = re.compile(r"\$|\\[(\[]")  # delimited maths; with a number, what makes a sentence state something


def numeric_key(value: str) -> str:
    """A comparison key: numbers without thousands separators, ``+`` or trailing zeros."""
    v = value.replace("$", "").strip()
    if _NUMBER.match(v):
        v = re.sub(r"^(-?)0+(?=\d)", r"\1", v.replace(",", "").lstrip("+"))  # 018 -> 18
        if "." in v:
            v = v.rstrip("0").rstrip(".")
        return "0" if v in ("-0", "") else v
    return re.sub(r"\s+", "", v)


def numbers_in(text: str) -> set[str]:
    return {numeric_key(m.group(1) + m.group(2)) for m in _NUM_IN_TEXT.finditer(text)}


def _last_number(text: str) -> str | None:
    found = list(_NUM_IN_TEXT.finditer(text))
    return numeric_key(found[-1].group(1) + found[-1].group(2)) if found else None


def negated_numbers(text: str) -> frozenset[str]:
    """Numbers the text negates: "not 18", "isn't 18", "18 is wrong"."""
    return frozenset(numeric_key(g.replace("$", "")) for m in _NEGATED_NUMBER.finditer(text) for g in m.groups() if g)


def words(text: str) -> list[str]:
    """Words outside LaTeX commands, lower case."""
    return [w.lower() for w in _WORD.findall(re.sub(r"\\[A-Za-z]+", " ", text))]


def conditional(text: str) -> bool:
    """A strong cue word anywhere, or "given" / "when" / "provided" opening a clause (not before an -ing
    word) or after a value; "if you have any questions" is addressed to the reader, no condition."""
    text = _PLEASANTRY.sub(" ", text)
    if set(words(text)) & (CONDITIONAL - _WEAK_CONDITIONAL):
        return True
    return any(not m["ing"] or re.match(r"[\d$}%]", m.group().lstrip()) for m in _WEAK_CONDITION.finditer(text))


def conditional_prefix(prefix: str) -> bool:
    """Is the part of a sentence before its marker a condition ("If she sold 24, ...", "When x = 2, ...")?"""
    return bool(set(words(prefix)) & CONDITIONAL_PREFIX) or any(not m["ing"] for m in _WEAK_CONDITION.finditer(prefix))


def boxed_spans(text: str) -> list[tuple[str, int, int]]:
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


_FILLER = re.compile(r"^(?:therefore|thus|so|then|just|exactly|equal to|:)[\s,]*", re.IGNORECASE)
_UNIT = r"\(?[A-Za-z][A-Za-z ./]*(?:\^?[23])?\)?"  # "pints", "miles per hour", "cm^2", "(dollars)"
_NUMBER_WITH_UNIT = re.compile(  # number, %, then unit words / an attached unit (18km) / a Chinese measure word
    rf"^\$?\s*({_NUM[:-2]}(?:\s*/\s*\d+)?)(\s*%)?(?:\s+({_UNIT})|([A-Za-z]+)|\s*([\u4e00-\u9fff]{{1,3}}))?$"
)
_NUMBER_WITH_TEXT_UNIT = re.compile(rf"^({_NUM[:-2]})\s*{_TEXT_CMD}\{{([^{{}}]*)\}}$")  # 125\textnormal{ miles}
_MATHS_WITH_UNIT = re.compile(rf"^(\S.*[\d}}])\s+({_UNIT})$")  # "12\pi square units", "\frac{{3}}{{4}} of the pizza"
_NOT_IN_UNITS = CUES | (STOPWORDS - {"the"})


def _unit_tail_ok(tail: str | None, attached: str | None, cjk: str | None) -> bool:
    if attached is not None:
        return attached.lower() in _ATTACHED_UNITS
    if cjk is not None:
        return not any(c in cue for cue in _CJK_CUES.values() for c in cjk)
    ws = words(tail or "")
    return len(ws) <= 4 and not any(w in _NOT_IN_UNITS or w in MATH_WORDS for w in ws)


def clean_value(value: str) -> str:
    """Strip what surrounds an answer value: whitespace, ``$``, ``\\[ \\]``, ``**``, filler words, a
    trailing period, a worked expression before the last ``=`` (unless a cue word is in it), unit
    words after a number (``120 pints`` -> ``120``, ``125\\text{ miles}`` -> ``125``; not ``18 if ...``
    or ``18 is wrong``), spaces between thousands (``1 000`` -> ``1000``)."""
    v = value.strip()
    v = re.sub(r"^\$([^$]+)\$(?=\s+[A-Za-z(])", r"\1", v)  # "$18$ apples", "$\frac{3}{4}$ of the pizza"
    v = re.sub(r"^\$+|\$+$", "", v).strip()
    v = re.sub(r"^\\[(\[]|\\[)\]]$", "", v).strip()
    v = re.sub(r"^\*+|\*+$", "", v).strip()
    v = v.rstrip(".").strip()
    boxed = boxed_spans(v)
    if len(boxed) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", v, re.DOTALL):
        v = boxed[0][0].strip()  # "The answer is \boxed{x}" names x
    while _FILLER.match(v) and _FILLER.match(v).end():
        v = v[_FILLER.match(v).end() :]
    if "=" in v and not re.search(r"[\\<>!\u2264\u2265\u2260]|==", v):  # "15 * 8 = 120" -> "120" (not x >= 5)
        lhs, rhs = v.rsplit("=", 1)
        if not any(w in CUES for w in words(lhs)):
            v = rhs.strip()
    v = re.sub(rf"{_TEXT_CMD}\{{\s*\}}", "", v).strip()
    m = _SPACED_THOUSANDS.match(v)
    if m:
        v = m.group(1).replace(" ", "") + v[m.end() :]
    m = _NUMBER_WITH_UNIT.match(v)
    if m and _unit_tail_ok(m.group(3), m.group(4), m.group(5)):
        return m.group(1) + ("%" if m.group(2) else "")
    m = _NUMBER_WITH_TEXT_UNIT.match(v)
    if m and words(m.group(2)) and _unit_tail_ok(m.group(2), None, None):
        return m.group(1)
    m = _MATHS_WITH_UNIT.match(v)
    if m and len(m.group(2)) > 1 and _unit_tail_ok(m.group(2), None, None):
        return m.group(1).strip()
    return v


def is_clean(v: str, kind: str) -> bool:
    """Is the cleaned value an answer of this kind (a number; a maths expression, not a sentence)?"""
    if not re.search(r"[0-9A-Za-z\\]", v) or _HEDGE_SIGNS.search(v) or re.search(r"\?|[A-Za-z]'[A-Za-z]", v):
        return False  # a question, a hedge sign, a contraction ("isn't 18") are not maths
    if kind == "number":
        return bool(_NUMBER_KIND.match(v))
    if re.search(r"[\u3040-\u9fff]", re.sub(rf"{_TEXT_CMD}\{{[^{{}}]*\}}", "", v)):
        return False
    for inner in re.findall(rf"{_TEXT_CMD}\{{([^{{}}]*)\}}", v):  # words allowed: \text{Monday}
        ws = words(inner)
        if len(ws) >= 3 or any(w in CUES or (w in STOPWORDS and w != "and") for w in ws):
            return False
    outside = re.sub(rf"{_TEXT_CMD}\{{[^{{}}]*\}}", " ", v)
    return not any(
        len(w) > 1 and w not in MATH_WORDS and (w in CUES or w in STOPWORDS or len(w) >= 4) for w in words(outside)
    )


@dataclass(frozen=True)
class Read:
    """How one stated value reads: ``answer`` (value), ``several`` (values), ``not`` (reason), ``empty``."""

    kind: str
    value: str = ""
    reason: str = ""
    span: str = ""  # the raw text of the value as stated (a box kept whole), for a maths parser
    negated: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()


def _classify(v: str, rest: str) -> Read:
    """Why ``v`` (with ``rest``, the remainder of its line) is not a clean answer."""
    text = f"{v} {rest}"
    ws, nums = set(words(text)), numbers_in(text)
    cjk = {why for why, chars in _CJK_CUES.items() if any(c in text for c in chars)}
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
    if ws & (HEDGE | ALTERNATIVE) or _HEDGE_SIGNS.search(text) or "hedged" in cjk or "several" in cjk:
        return Read("not", reason="hedged", numbers=frozenset(nums))
    return Read("not", reason="prose", numbers=frozenset(nums))


def _sentences(text: str) -> list[str]:
    """Sentences; maths that ends one often swallows its period (``$$ ... .$$ Therefore ...``)."""
    return [s for s in re.split(r"(?<=[.!?$])\s+(?=[A-Z])|(?<=[.!?])\s+|(?<=\\[)\]])\s+(?=[A-Z])", text) if s.strip()]


def _classify_line(line: str) -> Read:
    """Why an unmarked last line is no answer.  A line of several sentences is read by its last
    sentence with maths in it and what follows (what the maths reader takes from it); a negation
    anywhere in the line counts, and a correction cue in that sentence after an earlier value too."""
    whole = _classify(line, "")
    sentences = _sentences(line)
    last = max((i for i, s in enumerate(sentences) if re.search(r"\d", s) or _MATHS_IN.search(s)), default=None)
    if whole.reason == "negated" or last is None or len(sentences) < 2 or not _MATHS_IN.search(sentences[last]):
        return whole
    first = last - 1 if last and re.match(r"\W*(?:then|in\s+that\s+case)\b", sentences[last], re.I) else last
    own, before = sentences[last], " ".join(sentences[:last])
    if (set(words(own)) & CORRECTION or _CORRECTION_PHRASE.search(own)) and re.search(r"\d|\$|\\[(\[]", before):
        return Read("several", reason="revised", numbers=whole.numbers)
    return _classify(" ".join(sentences[first:]), "")


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
    if len(subject) > 20 or set(subject) & (CUES | _POINTS_AT_QUESTION):
        return None
    value = clean_value(m["value"])
    return value if is_clean(value, kind) else None


def read_value(raw: str, kind: str, after: str = "", boxed: bool = False, stated: bool = False,
               last_line: bool = False) -> Read:  # fmt: skip
    """Read one stated value; ``after`` is the rest of the sentence outside it (after a box);
    ``stated``: it follows an explicit marker (``answer:``, "the answer is", ``####``); ``last_line``:
    it is the unmarked last line.  A bare list of numbers (``17, 18``) is several answers, except in a
    box read as maths (a set of solutions)."""
    head, rest, question = _first_sentence(raw)
    v, negated, span = clean_value(head), frozenset(), head
    for pattern in _CONTRAST:
        m = pattern.match(v)
        if m and numeric_key(m["m"].strip("$%")) != numeric_key(m["n"].strip("$%")):
            v, negated, span = clean_value(m["m"]), frozenset({numeric_key(m["n"].replace("$", ""))}), m["m"]
            break
    comma = _DECIMAL_COMMA.match(v)
    if comma and not boxed and not _THOUSANDS.match(v):  # "1000,99" is 1000.99 (a decimal comma)
        v = span = f"{comma.group(1)}.{comma.group(2)}"
    exact = _EXACT_THEN_APPROX.match(v) if kind == "maths" else None
    if exact and is_clean(exact["exact"].strip(), kind):  # "x = 1/3 \approx 0.33" states 1/3
        v = span = exact["exact"].strip()
    if not re.search(r"[0-9A-Za-z\\]", v) and not re.search(r"\d", rest):
        return Read("empty")
    if not is_clean(v, kind):
        named = _named_value(v, kind) if stated and not question else None
        if named is None:
            return _classify_line(raw) if last_line else _classify(head, f"{after} {rest}")
        v = span = named
    if (kind == "number" or not boxed) and _LIST.match(v) and len(numbers_in(v)) > 1:
        return Read("several", reason="several", numbers=frozenset(numbers_in(v)))
    if question:
        return Read("not", reason="hedged", numbers=frozenset(numbers_in(head)))
    key = numeric_key(v)
    if after:  # "\boxed{18} or so", "\boxed{18} is wrong", "\boxed{17}, not 18" (a contrast: 17)
        qualified = revision(after, key, same_line=True)
        if qualified is not None:
            return qualified
        ws, others = set(words(after)), negated_numbers(after) - {key}
        if ws & ALTERNATIVE and re.search(r"\\(?:boxed|fbox)|\d", after):  # "\boxed{a} or \boxed{b}"
            return Read("several", reason="several", numbers=frozenset(numbers_in(after)) | {key})
        if ws & (CUES - NEGATION) or _HEDGE_SIGNS.search(after) or ws & NEGATION and not others:
            return _classify(f"{head} {after}", "")
        negated |= others
    revised = revision(rest, key, same_line=True)
    if revised is not None:
        return revised
    return Read("answer", v, negated=negated, numbers=frozenset({key}), span=f"\\boxed{{{span}}}" if boxed else span)


def revision(tail: str, key: str, same_line: bool = False) -> Read | None:
    """Does text after a stated answer withdraw, qualify or revise it?  A condition counts in its first
    two sentences (the rest of the answer's sentence and the next)."""
    lead = re.match(r"^[\s$)]*(?:(?:is|was|seems|would\s+be)\s+)?(?:wrong|incorrect|false|a\s+mistake|not\s+(?:right|"
                    r"correct|the\s+answer|it)\b)", tail, re.I)
    if lead:
        return Read("not", reason="negated", negated=frozenset({key}))
    k = 0  # sentences so far
    for n, line in enumerate(tail.splitlines()):
        for sentence in (s for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()):
            ws, new = set(words(sentence)), _last_number(sentence)  # a revision ends with the new value
            new = new if new not in (None, key) else None
            if key in negated_numbers(sentence):
                return Read("not", reason="negated", negated=frozenset({key}))
            if (k := k + 1) <= 2 and conditional(sentence):
                return Read("not", reason="conditional")
            if same_line and n == 0 and (ws & _REVISING_HEDGE or _HEDGE_SIGNS.search(sentence)) and new:
                return Read("several", reason="several", numbers=frozenset({key, new}))
            if _RETRACTED.search(sentence.strip()):
                return Read("not", reason="retracted", negated=frozenset({key}))
            bare = re.fullmatch(rf"[\s*$(]*{_NUM}[\s*.!)]*", sentence) or _RESTATED.match(sentence.strip())
            cue = ws & CORRECTION or _CORRECTION_PHRASE.search(sentence) or any(c in sentence for c in "错改")
            if (bare or cue) and new:
                return Read("several", reason="revised", numbers=frozenset({key, new}))
    return None
