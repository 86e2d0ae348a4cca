"""Polarity: whether a statement of an answer is asserted, negated, hedged or questioned, and
whether a later sentence withdraws or doubts it.

A final answer is stated by a clause ("the answer is N", ``#### N``, ``\\boxed{N}``, a label line),
and that clause may sit under operators in its sentence.  This module reads them by *class* and
composes them by *scope* and *sign*; it never looks for whole phrases.

Classes (``LEXICON``): ``neg`` (not, n't, never, no, nobody, without ...: flips the sign),
``neg-pred`` (false, wrong, incorrect, doubt, deny ...: a predicate saying its complement is not
so), ``neg-strong`` (impossible: negating it leaves a possibility), ``hedge`` (maybe, probably,
might, could, guess, unlikely, unclear ...: no commitment), ``raiser`` (think, believe, seem,
expect: a hedge, but under a negation it negates its complement: "I don't think P" is "I think not
P"), ``commit`` (sure, definitely, clearly, know, conclude, show, prove, say ...: intensifiers and
commitment; negated they leave no commitment: "not sure P" is hedged, not "sure not P"),
``truth`` (true, correct, right, the case, agree: negated, negated) and ``question`` (whether, wonder).
Intensifiers are not hedges.

Composition (``compose``): operators in scope are applied from the innermost (nearest the answer)
out.  Two negations cancel ("There is no doubt the answer is 45", "It is not false that ...");
a negated commitment is hedged ("I'm not sure the answer is 45", "We cannot conclude ...");
a hedge stays a hedge under negation.

Scope (``scope_polarity``): the operators before the answer in its clause.  A clause ends at a
sentence end, ``;`` ``:``, a spaced dash, a parenthesis, a conclusion connective after a comma
(", so", ", therefore"), "but" / "however".  Inside the clause, commas (and "and") separate
chunks: an operator in an earlier chunk reaches the answer only if its chunk names nothing else
("No doubt, ...", "Clearly, ...", "I'm not sure, but ...": a hedge with nothing after it carries
across "but"), not if the chunk has its own content ("I don't think it's 52, the answer is 45",
"Although 52 seemed right, ...", "I'm not sure about step 2, but ...").  A negator that governs
a word that is no operator negates only that word ("Not counting tax, ...", "Not 52, ...",
"Since 52 is not divisible by 4, ...", "Without tax, ..."); one directly before the answer negates
it ("the answer is not \\boxed{45}").  "No," / "Not really," opening a chunk is a reply, not a
negator.

Speech acts (``speech_act``): a sentence after a statement *retracts* it (imperatives that
withdraw what came before: scratch / ignore / disregard / forget / strike that, the above, the
previous line, what I said; "never mind"; "I take that back"; "no wait", "wait, no", "oops", "my
bad", "on second thought"; "let me redo / recompute / start over" unless it says it only checks;
an evaluation of what came before, composed as above, that comes out negated: "that's wrong",
"that can't be right", "I don't think that's right", "I made a mistake", "45 is wrong"), or
*doubts* it (an evaluation that comes out hedged through a negation: "I might be wrong", "I'm not
sure that's right"; a bare hedge: "I'm not sure.", "Maybe.").  A positive or hedged-positive
evaluation ("That's right", "I hope it is correct", "That seems right") withdraws nothing, nor
does a conditional one ("If this is wrong, tell me").

What this module does not decide: which text is a statement of an answer (``answers.py``), whether
a value is clean, approximate, a range or conditional (``answer_rules.py``), and what a withdrawn
statement means for the final answer (``assertions.py``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

ASSERTED, NEGATED, HEDGED, QUESTIONED = "asserted", "negated", "hedged", "questioned"
NEG, NEG_PRED, NEG_STRONG, HEDGE, POSSIBLE, RAISER, COMMIT, TRUTH, QUESTION = (
    "neg", "neg-pred", "neg-strong", "hedge", "possible", "raiser", "commit", "truth", "question")  # fmt: skip

LEXICON = {  # operator class -> words (lower case; "n't" is split off its verb)
    NEG: "not n't never no none nobody nothing neither nor nowhere noone without hardly scarcely",
    NEG_PRED: "false untrue wrong incorrect mistaken erroneous invalid inaccurate doubt doubts doubted doubting deny "
              "denies denied denying refute refutes refuted disprove disproves disproved disagree disagrees reject "
              "rejects rejected nonsense absurd bogus",
    NEG_STRONG: "impossible",
    HEDGE: "maybe perhaps probably presumably likely unlikely plausibly plausible apparently seemingly supposedly "
           "allegedly guess guessing guessed suspect suspects suspected reckon estimate estimated unsure uncertain "
           "unclear doubtful questionable hopefully roughly approximately thought",
    POSSIBLE: "might may could possibly possible conceivably conceivable",
    RAISER: "think thinks believe believes believed expect expects feel feels seem seems seemed appear appears "
            "appeared imagine",
    COMMIT: "sure certain certainly definitely definite clearly clear obviously obvious evidently evident surely "
            "undoubtedly indubitably unquestionably absolutely confident confidently know knows known conclude "
            "concludes concluded show shows shown showed prove proves proved proven confirm confirms confirmed "
            "verify verifies verified establish establishes established demonstrate demonstrates demonstrated "
            "guarantee guaranteed assert asserts tell determine determined necessarily indeed must exactly precisely",
    TRUTH: "true correct right accurate valid agree agrees agreed",  # "I don't agree that P": not P
    QUESTION: "whether wonder wonders wondering",
}  # fmt: skip
PHRASES = {  # several words, one operator (matched before single words)
    "no way": NEG_PRED, "by no means": NEG_PRED, "in no way": NEG_PRED, "no one": NEG, "the case": TRUTH,
    "a fact": TRUTH,
    "for sure": COMMIT, "for certain": COMMIT, "of course": COMMIT, "only possible": COMMIT, "100 %": COMMIT,
    "in my opinion": HEDGE, "as far as i know": HEDGE, "as far as i can tell": HEDGE, "kind of": HEDGE,
    "sort of": HEDGE, "more or less": HEDGE, "or so": HEDGE, "give or take": HEDGE, "would say": HEDGE,
    "'d say": HEDGE, "chances are": HEDGE, "looks like": HEDGE, "seems like": HEDGE, "sounds like": HEDGE,
    "never mind": "discourse", "nevermind": "discourse", "in fact": "function", "about it": "function",
    "about this": "function", "about that": "function",
}  # fmt: skip
_OPS = {w: cls for cls, ws in LEXICON.items() for w in ws.split()}
_REPORTS_WORDS = "say says said claim claims claimed argue argues argued suggest suggests suggested"
# reporting verbs: the speaker's commitment after I / we / one / "to", someone else's claim (a hedge) otherwise
_REPORTS = frozenset(_REPORTS_WORDS.split())
_SPEAKER = frozenset("i we one to".split())
_AUXILIARIES = frozenset("would could can will 'd 'll must should do does did may might also just".split())
_PHRASE_WORDS = {tuple(p.split()): cls for p, cls in PHRASES.items()}
def may_hold_operators(text: str) -> bool:
    """False when ``text`` certainly holds no operator (a fast test before reading it)."""
    return bool(_ANY_OPERATOR.search(text))
_MAX_PHRASE = max(len(p) for p in _PHRASE_WORDS)
# words that carry no content of their own: an operator's scope passes over them
FUNCTION = frozenset("i we you he she they it one 's 'm 're 've 'd 'll am is are was were be been being do does did "
                     "doing have has had will would shall should can to the a an my our your his her their its this "
                     "these those there here just really truly actually very quite too even still also then at all "
                     "any anyone anybody everyone everybody me us him them final answer answers result $ honestly "
                     "frankly personally simply fully totally completely entirely highly strongly seriously so "
                     "that though anyway now again which most best honest humble own".split())  # fmt: skip
_PRO_FORMS = frozenset("it so this".split())  # "I doubt it," "I think so,": the complement is filled
_INTERJECTIONS = frozenset("no nope nah wait well ok okay yes yeah oh hmm hmmm um uh ah alright".split())
# a quick test: can ``text`` hold an operator at all? (a word of the lexicon or of an operator phrase, n't)
_OPERATOR_WORDS = {*_OPS, *_REPORTS_WORDS.split()} | {
    w for p, cls in PHRASES.items() if cls not in ("discourse", "function") for w in p.split()
    if w.isalpha() and w not in FUNCTION and w not in ("a", "i", "in", "of", "as", "or", "for", "my", "would")}
_ANY_OPERATOR = re.compile(r"n't|%|\b(?:" + "|".join(sorted(_OPERATOR_WORDS, key=len, reverse=True)) + r")\b", re.I)


_CONNECTIVES = r"so|therefore|thus|hence|then|which\s+means|meaning|consequently|and\s+so"
# where a clause ends (the operators before it do not reach past it)
_HARD = re.compile(rf"[.!?](?:\$+|\\[)\]])?(?=\s|$)|[;\n(]|(?P<colon>:)|\s[-\u2013\u2014]+\s|--|\u2014"
                   rf"|(?<![\w'])(?P<but>but|however(?!\s*,))\b|,\s*(?=(?:{_CONNECTIVES})\b)|\band\s+so\b",
                   re.IGNORECASE)  # fmt: skip
_PARENTHETICAL = re.compile(r"\([^()]*\)")
# ", which is the answer," ", after 3 days,": an aside inside a clause, which the scope passes over
_ASIDE = re.compile(r",\s*(?:which|who|whom|whose|where|after|before|in|on|at|by|for|from|during|as|with|without|"
                    r"including|excluding)\b[^,;:]*,", re.IGNORECASE)
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
                out.append(Item("disc" if cls == "discourse" else "fn" if cls == "function" else "op", "", cls))
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
                before = next((x for _, x in reversed(words[:i]) if x not in _AUXILIARIES), "to")
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


def _chunk_ops(chunk: list[Item], final: bool) -> list[tuple[str, int]]:
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
            if nxt is not None and nxt.kind != "op":  # "not 52", "not counting", "no tax"
                continue
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
        for cls, k in _chunk_ops(chunk, final):
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
    if last.group("but") or last.group("colon"):  # "I'm not sure, but ...", "My best guess: ..."
        k = len(cuts) - 2
        while k >= 0 and not text[cuts[k].end() : (cuts[k + 1].start())].strip():  # "... sure. But": go back
            k -= 1
        return clause, text[cuts[k].end() if k >= 0 else 0 : cuts[k + 1].start() if k + 1 < len(cuts) else 0]
    return clause, None


_INNER = {NEGATED: [NEG_PRED], HEDGED: [HEDGE], QUESTIONED: [QUESTION]}  # a value's own polarity, as an operator


def scope_polarity(before: str, inner: str = ASSERTED) -> str:
    """Polarity of a statement whose marker follows ``before`` (the text before it, any length), when
    the value itself reads ``inner`` ("the answer is not 45": negated inside)."""
    clause, conceded = _clause(before)
    if not clause.strip() and conceded is None:
        return inner
    ops = _open_ops(tokens(clause), end_is_answer=True) + _INNER.get(inner, [])
    if conceded is not None and compose(_open_ops(tokens(conceded), end_is_answer=False)) == HEDGED:
        ops = [HEDGE] + ops  # "I'm not sure, but the answer is 45"; "I might be wrong, but ..."
    return compose(ops)


def comment_polarity(text: str) -> str | None:
    """Polarity an operator-only comment gives the value it follows ("definitely", "I think", "no
    doubt", "for sure", "is wrong", "but I'm not sure"); None when it has no operator or says
    something else (a word that is no operator, a number)."""
    items = [it for it in tokens(text) if it.kind != "sep" and not (it.kind == "word" and it.text in ("but", "and"))]
    if not any(it.kind == "op" for it in items) or any(it.kind in ("num", "word") for it in items):
        return None
    return compose([cls for cls, _ in _chunk_ops(items, final=True)])


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
            return compose([cls for cls, _ in _chunk_ops(head, final=True)]), ends[n - 1]
    return None


# ---------------------------------------------------------------- speech acts after a statement

RETRACTS, DOUBTS, CONFIRMS = "retracts", "doubts", "confirms"
_TRIGGER = re.compile(r"scratch|kidding|\bjk\b|ignore|disregard|forget|strike|delete|discard|erase|cancel|undo|"
                      r"retract|withdraw|cross|"
                      r"throw|back|mind|wrong|incorrect|false|mistake|error|typo|right|correct|true|accurate|valid|off|"
                      r"bogus|nonsense|flaw|miscalc|misread|miscount|mess|erred|re-?do|recomput|recalcul|rework|"
                      r"re-solve|reconsider|rethink|over|again|fix|oops|bad|second|\bno\b|nope|nah|not|n't|sure|"
                      r"certain|confident|doubt|maybe|probabl|perhaps|think|guess|might|could", re.IGNORECASE)
_POINTER = (r"(?:that|this|it|these|those|everything(?:\s+(?:above|before|so\s+far))?|all\s+(?:of\s+)?(?:that|this|it)"
            r"|(?:the\s+|my\s+|our\s+)?(?:above|previous|prior|preceding|last|earlier|first|old|original|former)"
            r"(?:\s+[a-z]+){0,2}|what\s+(?:i|we)\s+(?:just\s+)?(?:said|wrote|did|had|got|found|computed|calculated)"
            r"|(?:the|my|our)\s+(?:line|answer|result|value|step|calculation|computation|work|part|number|solution"
            r"|attempt)s?\s+(?:above|before))\b")  # fmt: skip
_OPENING = r"^\W*(?:(?:wait|hmm+|oh|ah|uh|um|actually|well|ok|okay|sorry|oops|whoops|no|nope|please)\W+)*"
_WITHDRAW = re.compile(  # the speech acts that withdraw what came before, opening their clause
    rf"{_OPENING}(?:(?:you\s+(?:can|should|may|must)\s+)?(?:scratch|ignore|disregard|forget|strike|delete|discard|erase"
    rf"|cancel|undo|retract|withdraw|cross\s+out|throw\s+out)\s+(?:about\s+)?(?:all\s+(?:of\s+)?)?{_POINTER}"
    rf"|i\s+(?:take|took)\s+(?:that|it|this|my\s+\w+(?:\s+\w+)?)\s+back|i\s+(?:retract|withdraw)\b"
    rf"|(?:oops|whoops|my\s+bad|my\s+mistake|on\s+second\s+thought|(?:just\s+|i'm\s+)?kidding|jk)\b"
    rf"|never\s*mind(?!\s+(?!(?:that|this|it|what)\b)[a-z])"
    rf"|(?:(?:wait|hmm+|actually|well|hold\s+on|hang\s+on)\W+)*(?:no|nope|nah)(?:\W*$|\s*[,.!;:\u2014-]|\s+(?:wait|actually"
    rf"|no)\b)|(?:that's\s+|that\s+is\s+)?(?:wrong|incorrect|not\s+(?:quite|really|right|correct|so))\W*$)",
    re.IGNORECASE)  # fmt: skip
_REDO = re.compile(r"(?:^\W*|(?:let\s+me|let's|let\s+us|i\s+(?:need|have|should|must|will|'ll|'d\s+better|had\s+better)"
                   r"\s+(?:to\s+)?|we\s+(?:need|have|should|must|will)\s+(?:to\s+)?|time\s+to)\s+)(?:re-?do(?:ing)?|"
                   r"recomput(?:e|ing)|recalculat(?:e|ing)|rework(?:ing)?|re-solv(?:e|ing)|reconsider(?:ing)?|"
                   r"rethink(?:ing)?|start(?:ing)?\s+over|try(?:ing)?\s+(?:(?:this|that|it)\s+)?again|fix(?:ing)?\s+"
                   r"(?:this|that|it|my)|correct(?:ing)?\s+(?:this|that|it|my))\b", re.IGNORECASE)  # fmt: skip
_CHECKING = re.compile(r"\bto\s+(?:check|verify|confirm|be\s+(?:sure|safe|certain)|make\s+sure|double[-\s]?check|"
                       r"validate)|\bjust\s+to\b|\bas\s+a\s+check\b", re.IGNORECASE)
_EVAL_NEG = frozenset("wrong incorrect false mistaken off invalid inaccurate bogus nonsense flawed mistake mistakes "
                      "error errors typo miscalculated miscalculation misread miscounted messed erred".split())
_EVAL_POS = frozenset("right correct true accurate valid fine".split())
_POINTS_BACK = frozenset("that this it above previous earlier last first answer result value calculation computation "
                         "line step work reasoning solution there i we my our".split())  # fmt: skip
_EVAL_VERBS = frozenset("make made makes making have has had up somewhere".split())  # "I made a mistake somewhere"
_ABOUT_ELSE = frozenset("to that about for of with".split())  # "it's wrong to add tax": about something else
_CONDITION = frozenset("if unless when whenever in case".split())


def speech_act(sentence: str, key: str = "") -> str | None:
    """``RETRACTS`` when ``sentence``, read after a statement, withdraws it; ``DOUBTS`` when it casts
    doubt on it; else None (``key``: the stated value, which may itself be the evaluated subject)."""
    if not _TRIGGER.search(sentence):
        return None
    s = sentence.replace("\u2019", "'").strip()
    if re.match(r"\W*(?:if|unless|in\s+case|when(?:ever)?)\b", s, re.IGNORECASE):
        return None
    if any(_WITHDRAW.search(c) for c in re.split(r"(?<=:)|(?<=;)", s)) or (_REDO.search(s) and not _CHECKING.search(s)):
        return RETRACTS  # "Scratch that.", "Edit: ignore the above."
    acts = [_evaluation(tokens(chunk), key) for chunk in re.split(r"[,;:]|\bbut\b", s)]
    acts = [a for a in acts if a is not None]
    if acts:  # the last evaluation stands: "The first step was wrong, but the final answer is correct."
        return acts[-1] if acts[-1] != CONFIRMS else None
    bare = re.sub(r"\s+(?:about|of|on)\s+(?:this|that|it|the\s+(?:answer|result))(?=\W*$)", "", s, flags=re.I)
    items = [it for it in tokens(bare) if it.kind not in ("sep", "disc")]  # "I'm not sure about this."
    if any(it.text in _EVAL_NEG | _EVAL_POS for it in items):
        return None  # an evaluation that is neither negative nor doubtful ("That seems right.")
    if items and all(it.kind in ("op", "fn") for it in items) and any(it.kind == "op" for it in items):
        p = compose([cls for cls, _ in _chunk_ops(items, final=True)])  # "I'm not sure." "Maybe." "I doubt it."
        return RETRACTS if p == NEGATED else DOUBTS if p in (HEDGED, QUESTIONED) else None
    return None


def _evaluation(items: list[Item], key: str) -> str | None:
    """An evaluation of what came before ("that's wrong", "I made a mistake", "45 is not right"),
    composed with its operators: negated retracts, hedged through a negation doubts, else confirms;
    None when the sentence evaluates nothing that came before."""
    at = max((k for k, it in enumerate(items) if it.text in _EVAL_NEG | _EVAL_POS), default=None)
    if at is None or any(it.text in _CONDITION for it in items):
        return None
    subject = items[:at]
    if not any(it.text in _POINTS_BACK or (key and it.kind == "num" and it.text.replace(",", "") == key)
               for it in subject):  # fmt: skip
        return None
    if at + 1 < len(items) and items[at + 1].text in _ABOUT_ELSE:
        return None  # "it's wrong to add tax", "I was wrong about the units"
    if any(it.kind == "num" and it.text.replace(",", "") != key for it in subject):
        return None  # "the attempt that gave 52 was wrong": about 52
    word = items[at].text
    head = [Item("fn", it.text) if it.text in _EVAL_VERBS else it for it in subject]
    head.append(Item("op", word, NEG_PRED if word in _EVAL_NEG else TRUTH))
    ops = [cls for cls, _ in _chunk_ops(head, final=True)]
    p = compose(ops)
    if p == NEGATED:
        return RETRACTS
    if p == HEDGED and any(c in (NEG, NEG_PRED, NEG_STRONG) for c in ops):
        return DOUBTS
    return CONFIRMS  # "That's right.", "I hope it is correct.", "That seems right."


_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?![\s.!?]|$))+[.!?]*")  # "3.5" and "$1,250.00" stay inside


def speech_acts(text: str, key: str = "") -> list[tuple[int, str]]:
    """(offset, act) of every sentence of ``text`` that retracts or doubts what came before it."""
    out = []
    for m in _SENTENCE.finditer(text):
        act = speech_act(m.group(), key) if m.group().strip() else None
        if act:
            out.append((m.start(), act))
    return out
