"""How an answer value is cleaned and compared: numbers, units, boxes, and the cue words.

``clean_value`` strips what surrounds a stated value (``$``, ``**``, filler words, a worked expression
before the last ``=``, unit words after a number, spaces between thousands); ``is_clean`` says whether
what is left is an answer of a kind (``number``: a number, a percent or a fraction; ``maths``: a maths
expression, not a sentence); ``numeric_key`` is the comparison key of a number (no separators, ``+``
or trailing zeros).  The cue-word sets (``NEGATION``, ``HEDGE``, ``ALTERNATIVE``, ``CONDITIONAL``,
``CORRECTION``) are read by ``answer_rules`` on values that are not clean; how a clause's operators
compose (negations, hedges, intensifiers) is ``polarity``'s.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
NUM = r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?"
_NUM_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_.$])(-?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![\d])")
_NUMBER_KIND = re.compile(  # a number after cleaning: plain, percent, a fraction
    r"^[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)%?$|^[-+]?\d+\s*/\s*\d+$"
    r"|^[-+]?\\[dt]?frac(?:\{\d+\}\{\d+\}|\d\d)$"  # \frac{1}{4}, \frac14
)
# LaTeX's ways of writing a thousands separator or a percent sign: 1{,}250, 1,\!250, 1\,250, 75\%
_LATEX_NUMBER = [
    (re.compile(r"(?<=\d)\{,\}(?=\d{3})"), ","),
    (re.compile(r"(?<=\d,)\\!(?=\d{3})"), ""),
    (re.compile(r"(?<=\d)\\[,;:! ](?=\d{3}(?!\d))"), ""),
    (re.compile(r"\\%"), "%"),
]
# a currency sign or code before or after an amount ("$1,250", "USD 1,250", "1,250$", "€12"), and a degree sign
_CURRENCY = r"(?:US\$|\\\$|\$|USD|EUR|GBP|INR|CAD|AUD|Rs\.?|\u20ac|\u00a3|\u00a5|\u20b9)"
_CURRENCY_BEFORE = re.compile(rf"^([-+]?)\s*{_CURRENCY}\s*(?=\d|\.\d)")
_CURRENCY_AFTER = re.compile(rf"(?<=\d)\s*{_CURRENCY}$")
_DEGREES = re.compile(r"(?<=\d)\s*(?:\u00b0|\^\s*\{?\\circ\}?)\s*[CF]?$")
_SPACED_THOUSANDS = re.compile(r"^([-+]?\$?\d{1,3}(?: \d{3})+)(?=$|[.%]|\s*[A-Za-z])")  # "1 000", "12 500 apples"
DECIMAL_COMMA = re.compile(r"^([-+]?\d+),(\d+)$")  # one comma, not thousands: "1000,99", "2,74", "0,5"
THOUSANDS = re.compile(r"^[-+]?[1-9]\d{0,2}(?:,\d{3})+$")

# Cue words (lower case).  A value that contains one is not a clean answer; which list names why.
NEGATION = frozenset(
    "not no never isn't isnt aren't wasn't won't can't cannot don't doesn't nope neither nor "
    "wrong incorrect false none".split()
)
HEDGE = frozenset(
    "about approximately approx approximate around roughly nearly almost probably perhaps possibly "
    "maybe likely unlikely estimate estimated guess ish circa some somewhere close between range "
    "least most more less fewer over under like think believe sure unsure bet".split()
)
ALTERNATIVE = frozenset("or either".split())
CONDITIONAL = frozenset(
    "if unless assuming assume suppose supposing provided providing given otherwise whether when whenever".split()
)
WEAK_CONDITIONAL = frozenset("given when whenever provided providing".split())  # also ordinary words
CORRECTION = frozenset(
    "wait oops actually sorry correction mistake mistaken hmm rather instead scratch recheck "
    "recalculate redo typo oh uh um err no nope corrected revise revised reconsider miscalculated "
    "kidding jk joking lol erratum errata corrigendum amendment amended".split()
)
CORRECTION_PHRASE = re.compile(
    r"\b(?:i\s+mean|hold\s+on|(?:should|ought\s+to)\s+(?:be|have\s+been|read|say)|"
    r"make\s+(?:that|it)|correct\s+answer)\b",
    re.IGNORECASE,
)
REVISING_HEDGE = frozenset(
    "or either maybe perhaps possibly probably approximately approx about around roughly".split()
)
CUES = NEGATION | HEDGE | ALTERNATIVE | CONDITIONAL | CORRECTION
# Words of a sentence (never of a unit or a maths expression).
STOPWORDS = frozenset(
    "the is are was were be been it its it's this that that's these those and but as for with i we "
    "you he she they his her their our has have had will would could can do does did get got "
    "what how many much which who then so thus therefore hence answer equals because since to "
    "than there here my me".split()
)
MATH_WORDS = frozenset(
    "sin cos tan cot sec csc sinh cosh tanh arcsin arccos arctan log ln lg exp sqrt pi max min "
    "gcd lcm mod deg det dim ker lim sup inf infty infinity arg cis".split()
)
_ATTACHED_UNITS = frozenset("km cm mm kg mg lb lbs oz ft mph hr hrs min mins sec secs ml cal kcal".split())
CJK_CUES = {  # characters that make a Chinese value negated, several, hedged or conditional
    "negated": "不非没错",
    "several": "或还",
    "hedged": "约概左右差吗呢吧",
    "conditional": "如若假设",
}
# words that make the sentence before a marker a condition on it ("If she sold 24, the answer is 18")
CONDITIONAL_PREFIX = frozenset("if unless assuming assume suppose supposing otherwise".split())
# "given" / "when" / "whenever" / "provided" opening a clause or following a value, not before an -ing
# word; "provided that" anywhere ("the solution provided", "the three given conditions" are no conditions)
_WEAK_CONDITION = re.compile(
    r"(?:^|[,;:(]|[\d$}%])\s*(?:given|when|whenever|provided|providing)\b"
    r"(?P<ing>\s+[a-z]+ing\b)?|\bprovid(?:ed|ing)\s+that\b",
    re.I,
)
# conditions of several words, and one opened by inverting its auxiliary ("Had she sold ...", "Were the price ...")
_CONDITION_PHRASE = re.compile(
    r"\b(?:as|so)\s+long\s+as\b|\bin\s+case\b|\bin\s+the\s+(?:case|event)\s+"
    r"(?:that|where|of)\b|\bon\s+(?:the\s+)?condition\s+that\b|\b(?:on|under|with)\s+the\s+"
    r"(?:assumption|premise|supposition|understanding|proviso)\s+that\b|\bbarring\b",
    re.IGNORECASE,
)
# an auxiliary opening a declarative sentence, its subject and a comma: "Should nothing change, ..."
_INVERTED = re.compile(r"^\W*(?:had|were|should)\s+[A-Za-z$\d]\S*\b[^?\n]*,[^?\n]*$", re.IGNORECASE)
_CONDITION_AT = re.compile(
    r"\b(?:if|unless|assum\w*|suppos\w*|provid\w*|given|otherwise|whether|when|whenever|"
    r"(?:as|so)\s+long\s+as|in\s+(?:the\s+)?(?:case|event)|on\s+(?:the\s+)?condition|barring|"
    r"(?:on|under|with)\s+the\s+(?:assumption|premise|supposition|understanding|proviso))\b"
    r"|^\W*(?:had|were|should)\b",
    re.IGNORECASE,
)
# "If its initial value was $x$,": a condition that names a maths variable defines it
_DEFINES_SYMBOL = re.compile(
    r"\b(?:if|when|suppose|assuming)\b[^,;.]*?\b(?:is|was|be|are|were|equals?|denotes?|"
    r"called)\s+\$[A-Za-z]\$\s*,",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(r",\s*(?:so|therefore|thus|hence|consequently)\b", re.IGNORECASE)
_CONDITIONAL_MOOD = re.compile(r"\bwould\b|'d\b", re.IGNORECASE)
_POINTS_BACK = frozenset("this that it these those answer result value total which".split())
_PLEASANTRY = re.compile(
    r"\bif\s+you(?:'d|\s+would)\s+like\b|\bif\s+(?:that|this|it)\s+helps\b|"
    r"\bif\s+you\s+(?:have|need)\s+(?:any\s+)?(?:more\s+|"
    r"further\s+|other\s+)?(?:questions?|help|clarifications?|assistance|explanations?)\b",
    re.I,
)
_TEXT_CMD = r"\\(?:text(?:normal|rm|up|bf|it|sf)?|mbox|mathrm)"  # LaTeX text (units, words) in maths

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
_NEGATED_NUMBER = re.compile(
    rf"(?:\bnot|n't|\bnever|\bno)\s+(?:be\s+|equal\s+to\s+|exactly\s+)?({NUM})"
    rf"|({NUM})\s*(?:[A-Za-z]+\s+)?(?:is|was|seems|would\s+be)?\s*(?:wrong|incorrect|false|not\s+(?:right|correct|"
    rf"the\s+answer)|a\s+mistake)\b"
)
HEDGE_SIGNS = re.compile(r"[~\u2248\u2243\u223c\u00b1]|\\approx|\\sim\b")


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


def last_number(text: str) -> str | None:
    found = list(_NUM_IN_TEXT.finditer(text))
    return numeric_key(found[-1].group(1) + found[-1].group(2)) if found else None


def negated_numbers(text: str) -> frozenset[str]:
    """Numbers the text negates: "not 18", "isn't 18", "18 is wrong"."""
    return frozenset(numeric_key(g.replace("$", "")) for m in _NEGATED_NUMBER.finditer(text) for g in m.groups() if g)


# a contrast after a value: ", not 6", " (not $19, which is one ticket)", " — definitely not 48, that's what he
# kept", ", not the 120 you'd get by ignoring the half hour"; the rest of its clause explains the other value
_TRAILING_CONTRAST = re.compile(
    rf"\s*(?:,|;|\(|\s[-\u2013\u2014]+\s|\u2014)\s*(?:(?:and|but|definitely|certainly|clearly|"
    rf"obviously|surely|so)\s+)*(?:(?:it|that|this)(?:'s|\s+is|\s+was)?\s+)?(?:not|n't|can't\s+be|"
    rf"cannot\s+be|isn't|wasn't|is\s+not)\s+(?:the\s+|a\s+|an\s+)?\\?\$?(?P<n>{NUM})"
    rf"(?P<why>[^.!?\n]*?)[.!?)\s]*$",
    re.IGNORECASE,
)
_EXPLAINS = CUES - NEGATION - CONDITIONAL - {"more", "less", "fewer", "over", "under", "most", "least", "some"}


def trailing_contrast(text: str) -> tuple[str, str] | None:
    """``(the text before it, the other value's key)`` when ``text`` ends in a contrast with another
    value whose explanation holds no cue of its own (no hedge, correction or alternative: "18, not 6 —
    six is only one pack"; not "18, not 6, I think"); else None."""
    m = _TRAILING_CONTRAST.search(text)
    cues = set(words(m["why"])) & _EXPLAINS if m is not None else set()
    if m is None or not re.search(r"\d", text[: m.start()]) or cues - {"instead", "rather"}:
        return None
    if cues and re.search(r"\d", m["why"]):  # "18, not 6, rather 7": a correction, no explanation
        return None
    return text[: m.start()], numeric_key(m["n"])


def words(text: str) -> list[str]:
    """Words outside LaTeX commands, lower case."""
    return [w.lower() for w in _WORD.findall(re.sub(r"\\[A-Za-z]+", " ", text))]


def conditional(text: str) -> bool:
    """A strong cue word or a conditional phrase ("as long as", "in case") anywhere, an inverted
    condition opening the text ("Had she sold 96, ...", "Were the price $3, ..."), or "given" / "when" /
    "provided" opening a clause (not before an -ing word) or after a value; "if you have any questions"
    is addressed to the reader, no condition."""
    text = _PLEASANTRY.sub(" ", text)
    if set(words(text)) & (CONDITIONAL - WEAK_CONDITIONAL) or _CONDITION_PHRASE.search(text) or _INVERTED.match(text):
        return True
    return any(not m["ing"] or re.match(r"[\d$}%]", m.group().lstrip()) for m in _WEAK_CONDITION.finditer(text))


def concluded(sentence: str) -> str:
    """What a conclusion connective after a comma concludes ("When we divide 144 by 12 we get 12, so each
    shelf holds 12 books." concludes "each shelf holds 12 books"); the whole sentence when it has none or
    the conclusion is itself supposed (", so it would be 45")."""
    found = list(_CONCLUSION.finditer(sentence))
    if found and not _CONDITIONAL_MOOD.search(sentence[found[-1].end() :]):
        return sentence[found[-1].end() :]
    return sentence


def conditional_prefix(prefix: str) -> bool:
    """Is the part of a sentence before its marker a condition ("If she sold 24, ...", "When x = 2, ...",
    "In case the discount applies, ...", "Had she sold 96, ...")?  A condition that only names a maths
    variable ("If its initial value was $x$, ...") defines it: no condition.  A conclusion connective
    after a comma ends the condition's reach: "If we multiply 3 by 15 we get 45, so the answer is 45"
    concludes (unless the conclusion is itself in the conditional mood: ", so it would be 45")."""
    prefix = concluded(_DEFINES_SYMBOL.sub(" ", prefix))
    return (
        bool(set(words(prefix)) & CONDITIONAL_PREFIX)
        or bool(_CONDITION_PHRASE.search(prefix))
        or bool(_INVERTED.match(prefix))
        or any(not m["ing"] for m in _WEAK_CONDITION.finditer(prefix))
    )


def conditions_answer(sentence: str) -> bool:
    """Does ``sentence``, read after a stated answer, put a condition on it?  When it is a condition
    standing alone ("Assuming no tax.") or attached to a clause that points back at the answer or names
    a value ("That is, if she sold 24.", "This only holds if ...", "If she sold 24, it would be 20."); not
    when its condition belongs to a clause about something else ("Feel free to ask if anything is
    unclear.")."""
    if not conditional(sentence):
        return False
    m = _CONDITION_AT.search(_PLEASANTRY.sub(" ", sentence))
    if m is None:
        return True
    if re.search(r"[A-Za-z0-9]", sentence[: m.start()]):
        main = sentence[: m.start()]
    else:  # the condition opens the sentence: its clause ends at the first comma
        main = sentence[m.end() :].split(",", 1)[1] if "," in sentence[m.end() :] else ""
    return not re.search(r"[A-Za-z0-9]", main) or bool(re.search(r"\d", main)) or bool(set(words(main)) & _POINTS_BACK)


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
    rf"^\$?\s*({NUM[:-2]}(?:\s*/\s*\d+)?)(\s*%)?(?:\s+({_UNIT})|([A-Za-z]+)|\s*([\u4e00-\u9fff]{{1,3}}))?$"
)
_NUMBER_WITH_TEXT_UNIT = re.compile(rf"^({NUM[:-2]})\s*{_TEXT_CMD}\{{([^{{}}]*)\}}$")  # 125\textnormal{ miles}
_MATHS_WITH_UNIT = re.compile(rf"^(\S.*[\d}}])\s+({_UNIT})$")  # "12\pi square units", "\frac{{3}}{{4}} of the pizza"
_NOT_IN_UNITS = CUES | (STOPWORDS - {"the"})


def _unit_tail_ok(tail: str | None, attached: str | None, cjk: str | None) -> bool:
    if attached is not None:
        return attached.lower() in _ATTACHED_UNITS
    if cjk is not None:
        return not any(c in cue for cue in CJK_CUES.values() for c in cjk)
    ws = words(tail or "")
    return len(ws) <= 4 and not any(w in _NOT_IN_UNITS or w in MATH_WORDS for w in ws)


@lru_cache(maxsize=1 << 15)  # a pure function of a short string, called on every candidate value
def clean_value(value: str) -> str:
    """Strip what surrounds an answer value: whitespace, ``$``, ``\\[ \\]``, ``**``, filler words, a
    trailing period, a worked expression before the last ``=`` (unless a cue word is in it, or it is a
    sentence: two words and working, as in "She sold 48/2 = 24 clips", "So, Tom has 9 - 2 = 7"), unit
    words after a number (``120 pints`` -> ``120``, ``125\\text{ miles}`` -> ``125``; not ``18 if ...``
    or ``18 is wrong``), spaces between thousands (``1 000`` -> ``1000``), LaTeX's separators
    (``1{,}250``, ``1,\\!250``, ``1\\,250``, ``75\\%``), a currency sign or code before or after an
    amount (``USD 1,250``, ``1,250$``, ``\\$1{,}250``) and a degree sign (``-5°F``), markdown emphasis
    (``**18**``, ``__ 18``)."""
    v = value.strip()
    if _NUMBER_KIND.match(v):  # already a plain number, a percent or a fraction
        return v
    for pattern, replacement in _LATEX_NUMBER:
        v = pattern.sub(replacement, v)
    v = re.sub(r"^(?:\\?\"|\u201c|')(.+?)(?:\\?\"|\u201d|')(?=\W*$)", r"\1", v).strip()  # quoted: "72", \"$12$\"
    v = re.sub(r"^\$([^$]+)\$(?=\s+[A-Za-z(])", r"\1", v)  # "$18$ apples", "$\frac{3}{4}$ of the pizza"
    v = re.sub(r"^\\\$\s*(?=\d)", "", v)  # "\$18": an escaped dollar sign
    v = re.sub(r"^\$+|\$+$", "", v).strip()
    v = re.sub(r"^\\[(\[]|\\[)\]]$", "", v).strip()
    v = re.sub(r"^[*_]+|[*_]+$", "", v).strip()  # markdown emphasis: **18**, __Answer:__ 18
    v = v.rstrip(".").strip()
    boxed = boxed_spans(v)
    if len(boxed) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", v, re.DOTALL):
        v = boxed[0][0].strip()  # "The answer is \boxed{x}" names x
    while _FILLER.match(v) and _FILLER.match(v).end():
        v = v[_FILLER.match(v).end() :]
    if "=" in v and not re.search(r"[\\<>!\u2264\u2265\u2260]|==", v):  # "15 * 8 = 120" -> "120" (not x >= 5)
        lhs, rhs = v.rsplit("=", 1)
        sentence = re.search(r"[A-Za-z]{2,},?\s+[A-Za-z]{2,}\b", lhs) and re.search(r"\d", lhs)  # "She sold 48/2 = 24"
        if not sentence and not any(w in CUES for w in words(lhs)):
            v = rhs.strip()
    v = _DEGREES.sub("", _CURRENCY_AFTER.sub("", _CURRENCY_BEFORE.sub(r"\1", v))).strip()  # "USD 1,250", "-5°F"
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
    if not re.search(r"[0-9A-Za-z\\]", v) or HEDGE_SIGNS.search(v) or re.search(r"\?|[A-Za-z]'[A-Za-z]", v):
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


_AMOUNT = re.compile(r"[-+]?\d|\.\d")


def mark_currency(text: str) -> str:
    """``text`` with every ``$`` that is a currency sign, not a maths delimiter, escaped (``\\$``): a
    ``$`` before a number whose span would hold a blank line, end in a space before its closing ``$``
    (``$12 * 5 = $60``), or close just before another amount.  ``$5$``, ``$2^5 = 32$`` stay maths."""
    out, i, n = [], 0, len(text)
    while i < n:
        j = text.find("$", i)
        if j < 0:
            break
        if j > 0 and text[j - 1] == "\\":  # already escaped
            out.append(text[i : j + 1])
            i = j + 1
            continue
        if text.startswith("$$", j):  # display maths: passed over whole
            close = text.find("$$", j + 2)
            stop = n if close < 0 else close + 2
            out.append(text[i:stop])
            i = stop
            continue
        close = j + 1
        while True:  # the next unescaped single $
            close = text.find("$", close)
            if close < 0 or text[close - 1] != "\\":
                break
            close += 1
        content = text[j + 1 : close] if close >= 0 else ""
        currency = _AMOUNT.match(text, j + 1) and (
            close < 0 or "\n\n" in content or content[-1:].isspace() or _AMOUNT.match(text, close + 1)
        )
        if currency:
            out.append(text[i:j] + "\\$")
            i = j + 1
        else:  # a maths span: passed over whole
            stop = n if close < 0 else close + 1
            out.append(text[i:stop])
            i = stop
    out.append(text[i:])
    return "".join(out)
