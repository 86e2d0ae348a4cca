"""Polarity: whether a statement of an answer is asserted, negated, hedged or questioned.

A final answer is stated by a clause ("the answer is N", ``#### N``, ``\\boxed{N}``, a label line),
and that clause may sit under operators in its sentence.  This module reads them by *class* and
composes them by *scope* and *sign*; it never looks for whole phrases.

Classes (``LEXICON``, ``PHRASES``): ``neg`` (not, n't, never, no, nobody, without: flips the sign of
what it governs; the exceptives "anything but", "anything other than" negate their value, and under a
negation anywhere in their clause mean "only": "can't be anything other than 14" asserts 14),
``neg-pred`` (false, wrong, incorrect, doubt, deny, "no way": a predicate saying its complement is not
so), ``neg-strong`` (impossible, "rule out": negating it leaves a possibility), ``hedge``
(maybe, probably, guess, unlikely, unclear, "in my opinion": no commitment), ``possible`` (might,
could, possible) and ``raiser`` (think, believe, seem, expect): hedges whose negation negates ("I
don't think P", "it is not possible that P"; "no one could deny P" asserts P), ``commit`` (sure,
definitely, clearly, know, conclude, show, prove, precisely, "for sure": intensifiers and
commitment; negated they leave no commitment: "not sure P" is hedged, not "sure not P"), ``truth``
(true, correct, right, "the case", agree: negated, negated) and ``question`` (whether, wonder).
Reporting verbs (say, claim, suggest) commit the speaker after I / we / one / "to" ("we can say"),
and are someone else's claim, a hedge, otherwise ("some people say").  Intensifiers are not hedges.

Composition (``compose``): operators in scope are applied from the innermost (nearest the answer)
out.  Two negations cancel ("There is no doubt the answer is 45", "It is not false that ..."); a
negated commitment is hedged ("I'm not sure the answer is 45", "We cannot conclude ..."); a hedge
stays a hedge under negation.  A value's own polarity ("the answer is not 45") is the innermost
operator (``scope_polarity(before, inner)``): "It is false that the answer is not 45" asserts 45.

Scope (``scope_polarity``): the operators before the answer in its clause.  A clause ends at a
sentence end (also one inside maths: ``$14.$``), a line break, ``;`` ``:``, a spaced dash, a
parenthesis, a conclusion connective after a comma (", so", ", therefore"), "but" / "however".  A
hedge with nothing after it carries across "but" and ":" ("I'm not sure, but the answer is 45", "I'm
not sure. But ...", "My best guess: ..."); a negation does not ("Not 52: the answer is 45").  Asides
between commas (", which is the answer,", ", after 3 days,") are passed over.  Inside the clause,
commas (and "and") separate chunks: an operator in an earlier chunk reaches the answer only if its
chunk names nothing else ("No doubt, ...", "Clearly, ..."), not if the chunk has its own content
("I don't think it's 52, the answer is 45", "Although 52 seemed right, ...", "I'm not sure about
step 2, but ...").  A negator that governs a word that is no operator negates only that word ("Not
counting tax, ...", "Not 52, ...", "Since 52 is not divisible by 4, ...", "Without tax, ..."); one
directly before the answer negates it ("the answer is not \\boxed{45}").  "No," / "Not really,"
opening a chunk is a reply, not a negator.  The month May is no modal.

What this module does not decide: which text is a statement of an answer (``answers.py``), whether
a value is clean, approximate, a range or conditional (``answer_rules.py``), which later sentences
withdraw a statement (``speech_acts.py``) and what that means for the final answer
(``assertions.py``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

ASSERTED, NEGATED, HEDGED, QUESTIONED = "asserted", "negated", "hedged", "questioned"
NEG, NEG_PRED, NEG_STRONG, HEDGE, POSSIBLE, RAISER, COMMIT, TRUTH, QUESTION = (
    "neg",
    "neg-pred",
    "neg-strong",
    "hedge",
    "possible",
    "raiser",
    "commit",
    "truth",
    "question",
)

LEXICON = {  # operator class -> words (lower case; "n't" is split off its verb)
    NEG: "not n't never no none nobody nothing neither nor nowhere noone without hardly scarcely",
    NEG_PRED: "false untrue wrong incorrect mistaken erroneous invalid inaccurate doubt doubts doubted doubting deny "
    "denies denied denying distrust distrusts mistrust refute refutes refuted disprove disproves disproved "
    "disagree disagrees reject "
    "rejects rejected nonsense absurd bogus refuse refuses refused",
    NEG_STRONG: "impossible",
    HEDGE: "maybe perhaps probably presumably likely unlikely plausibly plausible apparently seemingly supposedly "
    "allegedly guess guessing guessed suspect suspects suspected reckon estimate estimated unsure uncertain "
    "unclear doubtful questionable hopefully roughly approximately thought hypothetically hypothetical "
    "theoretically tentatively tentative provisionally provisional sceptical skeptical dubious ballpark rough "
    "approx torn",
    POSSIBLE: "might may could possibly possible conceivably conceivable",
    RAISER: "think thinks believe believes believed expect expects feel feels seem seems seemed appear appears "
    "appeared imagine",
    COMMIT: "sure certain certainly definitely definite clearly clear obviously obvious evidently evident surely "
    "undoubtedly indubitably unquestionably absolutely confident confidently know knows known conclude "
    "concludes concluded show shows shown showed prove proves proved proven confirm confirms confirmed "
    "verify verifies verified establish establishes established demonstrate demonstrates demonstrated "
    "guarantee guaranteed assert asserts tell determine determined necessarily indeed must exactly precisely "
    "convinced confidence settle settled decide decided undeniably indisputably unarguably inarguably "
    "incontestably unmistakably",
    # "I don't agree that P": not P
    TRUTH: "true correct right accurate valid agree agrees agreed accept accepts accepted",
    QUESTION: "whether wonder wonders wondering",
}
PHRASES = {  # several words, one operator (matched before single words)
    "no way": NEG_PRED,
    "by no means": NEG_PRED,
    "in no way": NEG_PRED,
    "no one": NEG,
    "the case": TRUTH,
    "a fact": TRUTH,
    "for sure": COMMIT,
    "for certain": COMMIT,
    "of course": COMMIT,
    "only possible": COMMIT,
    "100 %": COMMIT,
    "beyond doubt": COMMIT,
    "beyond any doubt": COMMIT,
    "beyond a doubt": COMMIT,
    "beyond all doubt": COMMIT,
    "beyond question": COMMIT,
    "every reason to believe": COMMIT,
    "every reason to think": COMMIT,
    "without question": COMMIT,
    "beyond dispute": COMMIT,
    "nothing other than": COMMIT,
    "nothing but": COMMIT,
    "anything other than": NEG,
    "anything but": NEG,
    "anything except": NEG,
    "anything else than": NEG,
    "in my mind": "function",
    "in the ballpark of": HEDGE,
    "rule out": NEG_STRONG,
    "rules out": NEG_STRONG,
    "ruled out": NEG_STRONG,
    "ruling out": NEG_STRONG,
    "make no mistake": COMMIT,
    "other than": NEG,
    "anything besides": NEG,
    "no question": COMMIT,
    "no maybe": COMMIT,
    "no maybes": COMMIT,
    "no chance": NEG_PRED,
    "not a chance": NEG_PRED,
    "quote me": COMMIT,
    "in the neighbourhood of": HEDGE,
    "in the neighborhood of": HEDGE,
    "on the order of": HEDGE,
    "in the region of": HEDGE,
    "in the vicinity of": HEDGE,
    "somewhere near": HEDGE,
    "close to": HEDGE,
    "in my opinion": HEDGE,
    "as far as i know": HEDGE,
    "as far as i can tell": HEDGE,
    "kind of": HEDGE,
    "sort of": HEDGE,
    "more or less": HEDGE,
    "or so": HEDGE,
    "give or take": HEDGE,
    "would say": HEDGE,
    "'d say": HEDGE,
    "chances are": HEDGE,
    "looks like": HEDGE,
    "seems like": HEDGE,
    "sounds like": HEDGE,
    "never mind": "discourse",
    "nevermind": "discourse",
    "in fact": "function",
    "about it": "function",
    "about this": "function",
    "about that": "function",
    "in this": "function",
    "in that": "function",
}
_OPS = {w: cls for cls, ws in LEXICON.items() for w in ws.split()}
_REPORTS_WORDS = "say says said claim claims claimed argue argues argued suggest suggests suggested"
# reporting verbs: the speaker's commitment after I / we / one / "to", someone else's claim (a hedge) otherwise
_REPORTS = frozenset(_REPORTS_WORDS.split())
_SPEAKER = frozenset("i we one to nobody anybody anyone".split())  # "nobody could argue P": P, once negated
_AUXILIARIES = frozenset("would could can will 'd 'll must should do does did may might also just".split())
_PHRASE_WORDS = {tuple(p.split()): cls for p, cls in PHRASES.items()}
_MAX_PHRASE = max(len(p) for p in _PHRASE_WORDS)
# words that carry no content of their own: an operator's scope passes over them
FUNCTION = frozenset(
    "i we you he she they it one 's 'm 're 've 'd 'll am is are was were be been being do does did "
    "doing have has had will would shall should can to the a an my our your his her their its this "
    "these those there here just really truly actually very quite too even still also then at all "
    "any anyone anybody everyone everybody me us him them final answer answers result $ honestly "
    "frankly personally simply fully totally completely entirely highly strongly seriously so "
    "that though anyway now again which most best honest humble own whatsoever reasonably yet educated wild".split()
)
_PRO_FORMS = frozenset("it so this".split())  # "I doubt it," "I think so,": the complement is filled
_INTERJECTIONS = frozenset("no nope nah wait well ok okay yes yeah oh hmm hmmm um uh ah alright".split())
# a quick test: can ``text`` hold an operator at all? (a word of the lexicon or of an operator phrase, n't)
_OPERATOR_WORDS = {*_OPS, *_REPORTS_WORDS.split()} | {
    w
    for p, cls in PHRASES.items()
    if cls not in ("discourse", "function")
    for w in p.split()
    if w.isalpha() and w not in FUNCTION and w not in ("a", "i", "in", "of", "as", "or", "for", "my", "would")
}
_ANY_OPERATOR = re.compile(r"n't|%|\b(?:" + "|".join(sorted(_OPERATOR_WORDS, key=len, reverse=True)) + r")\b", re.I)


def may_hold_operators(text: str) -> bool:
    """False when ``text`` certainly holds no operator (a fast test before reading it)."""
    return bool(_ANY_OPERATOR.search(text))


_CONNECTIVES = r"so|therefore|thus|hence|then|which\s+means|meaning|consequently|and\s+so"
# where a clause ends (the operators before it do not reach past it)
_HARD = re.compile(
    rf"[.!?](?:\$+|\\[)\]])?(?=\s|$)|[;\n(]|(?P<colon>:)|(?P<dash>\s[-\u2013\u2014]+\s|--|\u2014)"
    rf"|(?<![\w'])(?<!anything\s)(?<!nothing\s)(?P<but>but|however(?!\s*,))\b|,\s*(?=(?:{_CONNECTIVES})\b)|\band\s+so\b",
    re.IGNORECASE,
)
_PARENTHETICAL = re.compile(r"\([^()]*\)")
# ", which is the answer," ", after 3 days,": an aside inside a clause, which the scope passes over
_ASIDE = re.compile(
    r",\s*(?:which|who|whom|whose|where|after|before|in|on|at|by|for|from|during|as|with|without|"
    r"including|excluding)\b[^,;:]*,",
    re.IGNORECASE,
)
_OPENS_CONCESSION = re.compile(r"\s*(?:but|however)\b", re.IGNORECASE)
_TOKEN = re.compile(r"(?P<num>\d+(?:,\d{3})*(?:\.\d+)?)|(?P<word>[A-Za-z]+(?:'[A-Za-z]+)?|'[a-z]+)|(?P<sep>,)|%|\S")
_CONTRACTION = re.compile(r"n't$|'(?:s|m|re|ve|d|ll)$")
_IRREGULAR = {"ca": "can", "wo": "will", "sha": "shall"}


class Item(NamedTuple):
    kind: str  # op, fn, num, word, sep, disc
    text: str
    cls: str = ""  # the operator class when kind == "op"


def tokens(text: str) -> list[Item]:
    """Items of a clause: operators (phrases first), function words, numbers, other words, commas."""
    text = re.sub(r"(?<=[a-z,] )May\b", "Mayo", text.replace("\u2019", "'"))  # the month is no modal
    words: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text):
        if m.group("num"):
            words.append(("num", m.group()))
        elif m.group("sep"):
            words.append(("sep", ","))
        elif m.group("word"):
            w = m.group().lower()
            if w == "cannot":
                words += [("word", "can"), ("word", "not")]
                continue
            c = _CONTRACTION.search(w) if len(w) > 2 else None
            if c and c.start():
                base = w[: c.start()]
                words += [("word", _IRREGULAR.get(base, base)), ("word", c.group())]
            else:
                words.append(("word", w))
        elif m.group() == "%":
            words.append(("word", "%"))
        elif m.group() in "=<>+*/^\\{}[]":
            words.append(("num", m.group()))  # maths is content
    out, i = [], 0
    while i < len(words):
        for n in range(min(_MAX_PHRASE, len(words) - i), 1, -1):
            cls = _PHRASE_WORDS.get(tuple(w for _, w in words[i : i + n]))
            if cls:
                phrase = " ".join(w for _, w in words[i : i + n])
                out.append(Item("disc" if cls == "discourse" else "fn" if cls == "function" else "op", phrase, cls))
                i += n
                break
        else:
            kind, w = words[i]
            if kind == "word":
                if w in _OPS:
                    kind = "op"
                elif w in FUNCTION or w in _INTERJECTIONS:
                    kind = "fn"
            if w in _REPORTS:
                before = next(
                    (x for _, x in reversed(words[:i]) if x not in _AUXILIARIES and not x.endswith("ly")), "to"
                )  # "no one could reasonably claim": the speaker is "one"
                kind, cls = "op", COMMIT if before in _SPEAKER else HEDGE  # "we can say" / "some people say"
            else:
                cls = _OPS.get(w, "") if kind == "op" else ""
            out.append(Item(kind, w, cls))
            i += 1
    return out


def compose(ops: list[str]) -> str:
    """The polarity of an asserted proposition under ``ops`` (outermost first)."""
    p, strong, raised = ASSERTED, False, None
    for op in reversed(ops):
        if op in (NEG, NEG_PRED, NEG_STRONG):
            if raised is not None and op == NEG:  # think not P; not possibly P
                p = raised
            elif strong and op == NEG:  # "not sure P": no commitment either way
                p = HEDGED
            else:
                p = _flip(p)
            strong, raised = op == NEG_STRONG, None
        elif op == HEDGE:
            p, strong, raised = (p if p == QUESTIONED else HEDGED), False, None
        elif op in (RAISER, POSSIBLE):  # a hedge whose negation negates: "don't think P", "no one could deny P"
            p, raised, strong = (p if p == QUESTIONED else HEDGED), _flip(p), False
        elif op == COMMIT:
            strong, raised = True, None
        elif op == TRUTH:
            strong, raised = False, None
        elif op == QUESTION:
            p, strong, raised = QUESTIONED, False, None
    return p


def _flip(p: str) -> str:
    return {ASSERTED: NEGATED, NEGATED: ASSERTED}.get(p, p)


def _next_meaningful(items: list[Item], k: int) -> Item | None:
    for it in items[k + 1 :]:
        if it.kind != "fn":
            return it
    return None


# exceptives: "anything but P" negates P, and under a negation anywhere in its clause means "only P"
_EXCEPTIVES = frozenset(
    {"anything other than", "anything but", "anything except", "anything else than", "other than", "anything besides"}
)


def chunk_operators(chunk: list[Item], final: bool) -> list[tuple[str, int]]:
    """(class, index) of the operators of one chunk whose scope is the rest of the clause.  A negator
    governs the next word that is not a function word: an operator (then it scopes with it), the
    answer itself (the end of the final chunk), or anything else (then it negates only that)."""
    out = []
    for k, it in enumerate(chunk):
        if it.kind != "op":
            continue
        if it.cls == NEG:
            nxt = _next_meaningful(chunk, k)
            if nxt is None and not final:  # "No," "Not really,": a reply, not a negator
                continue
            if nxt is not None and nxt.kind != "op" and not any(x.text in _EXCEPTIVES for x in chunk[k + 1 :]):
                continue  # "not 52", "not counting", "no tax"; not "can't get anything but 300" (only 300)
        out.append((it.cls, k))
    return out


def _open_ops(items: list[Item], end_is_answer: bool) -> list[str]:
    """The operators (outermost first) whose scope reaches the end of ``items``."""
    chunks: list[list[Item]] = [[]]
    for it in items:
        if it.kind == "sep" or (it.kind == "word" and it.text == "and"):
            chunks.append([])
        else:
            chunks[-1].append(it)
    out: list[str] = []
    for n, chunk in enumerate(chunks):
        final = n == len(chunks) - 1 and end_is_answer
        for cls, k in chunk_operators(chunk, final):
            if not final and (_has_content(chunk[:k], before=True) or _has_content(chunk[k + 1 :], before=False)):
                continue  # its chunk names something else: "I don't think it's 52," "Although 52 seemed right,"
            out.append(cls)
    return out


_SUBORDINATORS = frozenset("although though since because as while whereas after before once even".split())


def _has_content(items: list[Item], before: bool) -> bool:
    for j, it in enumerate(items):
        if it.kind in ("num", "word") and not (before and it.text in _SUBORDINATORS):
            return True
        if not before and it.kind == "fn" and it.text in _PRO_FORMS and j == len(items) - 1:
            return True  # "I doubt it," "I think so,"
    return False


def _clause(text: str) -> tuple[str, str | None]:
    """(the clause that ends ``text``, the clause conceded before it by "but"/"however": in the same
    sentence, or the sentence before one that opens with "But")."""
    text = text[-400:]
    line = text.rfind("\n")  # a line break ends a clause: read from the line (and the one before it for "But")
    if line >= 0:
        if not text[line + 1 :].strip():
            return "", None  # the marker opens its line ("#### 45")
        start = text.rfind("\n", 0, line) if _OPENS_CONCESSION.match(text, line + 1) else line
        text = text[start + 1 :]
    text = _PARENTHETICAL.sub(" ", text) if "(" in text else text
    cuts = list(_HARD.finditer(text))
    if not cuts:
        return _ASIDE.sub(" ", text), None
    last = cuts[-1]
    clause = _ASIDE.sub(" ", text[last.end() :])
    if last.group("but") or last.group("colon") or last.group("dash"):  # "I'm not sure, but ...", "Tentatively — ..."
        k = len(cuts) - 2
        while k >= 0 and not text[cuts[k].end() : (cuts[k + 1].start())].strip():  # "... sure. But": go back
            k -= 1
        return clause, text[cuts[k].end() if k >= 0 else 0 : cuts[k + 1].start() if k + 1 < len(cuts) else 0]
    return clause, None


def clause(before: str) -> str:
    """The clause that ends ``before`` (where the operators before a statement are read)."""
    return _clause(before)[0]


# a word of approximation right before the answer ("about \\boxed{45}", "around $45$")
_APPROXIMATOR = re.compile(
    r"\b(?:about|around|approximately|roughly|nearly|almost|circa|close\s+to|(?:in\s+the\s+"
    r"(?:neighbou?rhood|region|vicinity)|on\s+the\s+order)\s+of)\s*\$*\s*$",
    re.IGNORECASE,
)
_INNER = {NEGATED: [NEG_PRED], HEDGED: [HEDGE], QUESTIONED: [QUESTION]}  # a value's own polarity, as an operator


def scope_polarity(before: str, inner: str = ASSERTED) -> str:
    """Polarity of a statement whose marker follows ``before`` (the text before it, any length), when
    the value itself reads ``inner`` ("the answer is not 45": negated inside)."""
    clause, conceded = _clause(before)
    if _APPROXIMATOR.search(before):  # "there are about $\boxed{45}$ books": an approximation, no answer
        inner = HEDGED if inner == ASSERTED else inner
    if not clause.strip() and conceded is None:
        return inner
    ops = _open_ops(tokens(clause), end_is_answer=True) + _INNER.get(inner, [])
    if conceded is not None and compose(_open_ops(tokens(conceded), end_is_answer=False)) == HEDGED:
        ops = [HEDGE] + ops  # "I'm not sure, but the answer is 45"; "I might be wrong, but ..."
    return compose(ops)


def whole_polarity(before: str) -> str | None:
    """Polarity of a statement after ``before`` (one sentence) when every operator of its own clause
    reaches it ("Without a doubt, she earned $60": asserted; "I'm not sure she earned $60": hedged; "No
    doubt whatsoever: 9"; "I didn't believe it at first, but it's 42"; "None of the others fits; it
    cannot be other than 600"): ``scope_polarity``, which also reads a hedge a "but", ":" or dash carries
    over.  None when one governs something else ("She did not earn $60"): the caller then reads the
    operators without scope."""
    items = tokens(_clause(before)[0])
    count = sum(it.kind == "op" for it in items)
    if len(_open_ops(items, end_is_answer=True)) != count:
        return None
    return scope_polarity(before)


def comment_polarity(text: str) -> str | None:
    """Polarity an operator-only comment gives the value it follows ("definitely", "I think", "no
    doubt", "for sure", "is wrong", "but I'm not sure"); None when it has no operator or says
    something else (a word that is no operator, a number)."""
    items = [it for it in tokens(text) if it.kind != "sep" and not (it.kind == "word" and it.text in ("but", "and"))]
    if not any(it.kind == "op" for it in items) or any(it.kind in ("num", "word") for it in items):
        return None
    return compose([cls for cls, _ in chunk_operators(items, final=True)])


def leading_operators(value: str) -> tuple[str, int] | None:
    """(polarity, where the rest starts) when ``value`` opens with operators ("definitely 45",
    "clearly not 18", "probably 45", "I'm sure it's 45"), else None."""
    items, ends = [], []
    for m in re.finditer(r"[A-Za-z']+|[,:]|\S+", value):
        if not re.match(r"[A-Za-z',:]", m.group()):
            break
        items.append(m.group())
        ends.append(m.end())
    for n in range(len(items), 0, -1):
        head = tokens(" ".join(items[:n]))
        if head and all(it.kind in ("op", "fn", "sep") for it in head) and any(it.kind == "op" for it in head):
            return compose([cls for cls, _ in chunk_operators(head, final=True)]), ends[n - 1]
    return None
