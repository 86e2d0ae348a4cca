"""Speech acts after a statement of an answer: does a sentence withdraw it, doubt it, or neither?

A sentence read after a statement *retracts* it when it is a speech act that withdraws what came
before, opening its clause: imperatives (scratch / ignore / disregard / forget / strike / delete /
undo + that, this, the above, the previous line, my last answer, what I said; "Edit: ignore that");
"I take that back", "I retract"; "never mind" (not "never mind the tax"); replies and interjections
("No.", "No wait", "Wait, no", "Actually, no", "Oops", "My bad", "On second thought", "Just
kidding", "Wrong.", "Not quite."); "let me redo / recompute / start over / try again / fix that"
unless it says it only checks ("to check", "to be sure", "just to"); or an evaluation of what came
before whose composed polarity (``polarity.compose``) is negated: its subject points back (that,
this, it, the above, the previous answer, my answer, I / we, the stated value itself) and its
predicate evaluates ("that's wrong", "that can't be right", "I don't think that's right", "I made a
mistake", "45 is wrong", "that doesn't seem right").  It *doubts* it when such an evaluation comes
out hedged through a negation ("I might be wrong", "I'm not sure that's right") or the sentence is
a bare hedge, or ends in one ("I'm not sure (about this).", "Maybe.", "Not 100% sure though.",
"Let me know if I got it wrong, I'm not confident."), and when it is a question about what came
before ("Is that right?", "Did I make a mistake?", "Right?"); ``affirms`` says whether a later
sentence answers such a question with yes ("Yes.", "Yes, 72 is correct.").  A question addressed to
the reader ("Does that make sense?", "Anything else I can help you with?") is no act.

Nothing is withdrawn by a positive evaluation, even a hedged one ("That's right.", "I hope it is
correct.", "That seems right."), a conditional one ("If this is wrong, tell me."), one about
something else ("It's wrong to add tax.", "I was wrong about the units.", "Note that 52 would be
wrong."), a negated one ("I didn't make a mistake."), or an imperative not opening its clause ("so
ignore it", "Don't forget the units").  When a sentence evaluates several things, its last
evaluation stands ("The first step was wrong, but the final answer is correct.").

What this module does not decide: what a withdrawn statement means for the final answer
(``assertions.py``: retracted, or revised when another value follows).
"""

from __future__ import annotations

import re

from veriloop.verifiers.polarity import (
    HEDGED,
    NEG,
    NEG_PRED,
    NEG_STRONG,
    NEGATED,
    QUESTIONED,
    RAISER,
    TRUTH,
    Item,
    chunk_operators,
    compose,
    tokens,
)

RETRACTS, DOUBTS, CONFIRMS = "retracts", "doubts", "confirms"
_TRIGGER = re.compile(
    r"scratch|scrap|kidding|\bjk\b|ignore|disregard|forget|strike|delete|discard|erase|cancel|undo|"
    r"retract|withdraw|cross|rul(?:e|es|ed|ing)\s+out|"
    r"throw|back|mind|wrong|incorrect|false|mistake|error|typo|right|correct|true|accurate|valid|off|"
    r"bogus|nonsense|flaw|miscalc|misread|miscount|mess|erred|re-?do|recomput|recalcul|rework|"
    r"re-solve|reconsider|rethink|over|again|fix|oops|bad|second|\bno\b|nope|nah|not|n't|sure|"
    r"certain|confident|doubt|maybe|probabl|perhaps|think|guess|might|could|sceptic|skeptic|"
    r"tentativ|dubious|provisional",
    re.IGNORECASE,
)
_POINTER = (
    r"(?:that|this|it|these|those|everything(?:\s+(?:above|before|so\s+far))?|all\s+(?:of\s+)?(?:that|this|it)"
    r"|(?:the\s+|my\s+|our\s+)?(?:above|previous|prior|preceding|last|earlier|first|old|original|former)"
    r"(?:\s+[a-z]+){0,2}|what\s+(?:i|we)\s+(?:just\s+)?(?:said|wrote|did|had|got|found|computed|calculated)"
    r"|(?:the|my|our)\s+(?:line|answer|result|value|step|calculation|computation|work|part|number|solution"
    r"|attempt)s?\s+(?:above|before))\b"
)
_OPENING = r"^\W*(?:(?:wait|hmm+|oh|ah|uh|um|ugh|argh|ack|actually|well|ok|okay|sorry|oops|whoops|no|nope|please)\W+)*"
_WITHDRAW = re.compile(  # the speech acts that withdraw what came before, opening their clause
    rf"{_OPENING}(?:(?:you\s+(?:can|should|may|must)\s+)?(?:scratch|scrap|ignore|disregard|forget|strike|delete|discard|erase"
    rf"|cancel|undo|retract|withdraw|cross\s+out|throw\s+out)\s+(?:about\s+)?(?:all\s+(?:of\s+)?)?{_POINTER}"
    rf"|i\s+(?:take|took)\s+(?:that|it|this|my\s+\w+(?:\s+\w+)?)\s+back|i\s+(?:retract|withdraw)\b"
    rf"|(?:oops|whoops|my\s+bad|my\s+mistake|on\s+second\s+thought|(?:just\s+|i'm\s+)?kidding|jk)\b"
    rf"|never\s*mind(?!\s+(?!(?:that|this|it|what)\b)[a-z])"
    rf"|(?:(?:wait|hmm+|ugh|argh|ack|actually|well|hold\s+on|hang\s+on)\W+)*(?:no|nope|nah)(?:\W*$|\s*[,.!;:\u2014-]|\s+(?:wait|actually"
    rf"|no)\b)|(?:that's\s+|that\s+is\s+)?(?:wrong|incorrect|not\s+(?:quite|really|right|correct|so))\W*$)",
    re.IGNORECASE,
)
_REDO = re.compile(
    r"(?:^\W*|(?:let\s+me|let's|let\s+us|i\s+(?:need|have|should|must|will|'ll|'d\s+better|had\s+better)"
    r"\s+(?:to\s+)?|we\s+(?:need|have|should|must|will)\s+(?:to\s+)?|time\s+to)\s+)(?:re-?do(?:ing)?|"
    r"recomput(?:e|ing)|recalculat(?:e|ing)|rework(?:ing)?|re-solv(?:e|ing)|reconsider(?:ing)?|"
    r"rethink(?:ing)?|start(?:ing)?\s+over|try(?:ing)?\s+(?:(?:this|that|it)\s+)?again|fix(?:ing)?\s+"
    r"(?:this|that|it|my)|correct(?:ing)?\s+(?:this|that|it|my))\b",
    re.IGNORECASE,
)
_CHECKING = re.compile(
    r"\bto\s+(?:check|verify|confirm|be\s+(?:sure|safe|certain)|make\s+sure|double[-\s]?check|"
    r"validate)|\bjust\s+to\b|\bas\s+a\s+check\b",
    re.IGNORECASE,
)
_EVAL_NEG = frozenset(
    "wrong incorrect false mistaken off invalid inaccurate bogus nonsense flawed mistake mistakes "
    "error errors typo miscalculated miscalculation misread miscounted messed erred".split()
) | {"ruled out", "rule out"}  # the texts of operator phrases
_EVAL_POS = frozenset("right correct true accurate valid fine".split())
_POINTS_BACK = frozenset(
    "that this it above previous earlier last first answer result value calculation computation "
    "line step work reasoning solution there i we my our total sum figure amount something "
    "somewhere".split()
)
_EVAL_VERBS = frozenset("make made makes making have has had up somewhere".split())  # "I made a mistake somewhere"
_APPEARANCE = frozenset("look looks sound sounds".split())  # "that doesn't look right": looks not right
_ABOUT_ELSE = frozenset("to that about for of with".split())  # "it's wrong to add tax": about something else
_CONDITION = frozenset("if unless when whenever in case".split())


# "can't tell if P" asks whether P (not "let me know if ...", an offer)
_EMBEDDED_IF = re.compile(
    r"(?<!let\sme\s)(?<!let\sus\s)\b(tell|know|sure|certain|decide|say|see|wonder|check|settle|"
    r"determine)\s+if\b",
    re.I,
)
# chunks of a sentence: "But I'm not sure about that." is a hedge after "But"; "Cheers — but ..." after a dash
_CHUNK = re.compile(r"[,;:]|\bbut\b|\s[-\u2013\u2014]+\s|\u2014", re.IGNORECASE)


def speech_act(sentence: str, key: str = "") -> str | None:
    """``RETRACTS`` when ``sentence``, read after a statement, withdraws it; ``DOUBTS`` when it casts
    doubt on it; else None (``key``: the stated value, which may itself be the evaluated subject)."""
    if not _TRIGGER.search(sentence):
        return None
    s = sentence.replace("\u2019", "'").strip()
    if re.match(r"\W*(?:if|unless|in\s+case|when(?:ever)?)\b", s, re.IGNORECASE):
        return None
    s = _EMBEDDED_IF.sub(r"\1 whether", s)  # "I can't tell if that's right": an embedded question, no condition
    if any(_WITHDRAW.search(c) for c in re.split(r"(?<=[:;,])", s)) or (_REDO.search(s) and not _CHECKING.search(s)):
        return RETRACTS  # "Scratch that.", "Edit: ignore the above."
    chunks = _CHUNK.split(s)
    acts = [a for a in (_evaluation(tokens(chunk), key) for chunk in chunks) if a is not None]
    if acts and s.endswith("?"):  # "Is that right?", "Did I make a mistake?": asks whether it holds
        return DOUBTS
    if acts:  # the last evaluation stands: "The first step was wrong, but the final answer is correct."
        return acts[-1] if acts[-1] != CONFIRMS else None
    if re.fullmatch(r"\W*(?:right|correct|true|wrong)\W*\?", s, re.IGNORECASE):  # "Right?": a tag question
        return DOUBTS
    return _bare_hedge(s) or (_bare_hedge(chunks[-1]) if len(chunks) > 1 else None)


def _bare_hedge(s: str) -> str | None:
    """``RETRACTS`` / ``DOUBTS`` for a sentence or chunk made of operators only ("I'm not sure (about
    this).", "Maybe.", "I doubt it.", "... , I'm not confident."), else None."""
    bare = re.sub(
        r"\s+(?:about|of|on|with|in)\s+(?:(?:this|that|the|my)\s+(?:answer|result|value|number|calculation|"
        r"figure|total)|this|that|it)(?:\s+one)?(?=(?:\s+(?:though|tho))?\W*$)",
        "",
        s,
        flags=re.I,
    )  # "Not 100% sure on this one."
    bare = re.sub(r"^\W*(?:and|but|yet|so|though|still)\b", "", bare.strip(), flags=re.I)  # ", and I can't settle it."
    items = [it for it in tokens(bare) if it.kind not in ("sep", "disc")]  # "I'm not sure about this."
    if any(it.text in _EVAL_NEG | _EVAL_POS for it in items):
        return None  # an evaluation that is neither negative nor doubtful ("That seems right.")
    if items and all(it.kind in ("op", "fn") for it in items) and any(it.kind == "op" for it in items):
        p = compose([cls for cls, _ in chunk_operators(items, final=True)])  # "I'm not sure." "Maybe." "I doubt it."
        return RETRACTS if p == NEGATED else DOUBTS if p in (HEDGED, QUESTIONED) else None
    return None


_YES = re.compile(r"^\W*(?:yes|yep|yeah|indeed|correct|right|exactly|confirmed)\b", re.IGNORECASE)


def affirms(sentence: str, key: str = "") -> bool:
    """Does ``sentence`` answer a doubting question about what came before with yes ("Yes.", "Yes, 72
    is correct.", "That is right.")?"""
    s = sentence.replace("\u2019", "'").strip()
    if s.endswith("?"):
        return False
    if any(_YES.match(part) for part in re.split(r"\s[-\u2013\u2014]+\s|[;:]", s)):
        return True  # "6 + 6 + 6 = 18 — yes, it is."
    acts = [a for a in (_evaluation(tokens(chunk), key) for chunk in _CHUNK.split(s)) if a]
    return bool(acts) and acts[-1] == CONFIRMS


def _evaluation(items: list[Item], key: str) -> str | None:
    """An evaluation of what came before ("that's wrong", "I made a mistake", "45 is not right"),
    composed with its operators: negated retracts, hedged through a negation doubts, else confirms;
    None when the sentence evaluates nothing that came before."""
    at = max((k for k, it in enumerate(items) if it.text in _EVAL_NEG | _EVAL_POS), default=None)
    if at is None or any(it.text in _CONDITION for it in items):
        return None
    subject = items[:at]
    if not any(
        it.text in _POINTS_BACK or (key and it.kind == "num" and it.text.replace(",", "") == key) for it in subject
    ):
        return None
    if at + 1 < len(items) and items[at + 1].text in _ABOUT_ELSE:
        return None  # "it's wrong to add tax", "I was wrong about the units"
    if any(it.kind == "num" and it.text.replace(",", "") != key for it in subject):
        return None  # "the attempt that gave 52 was wrong": about 52
    word = items[at].text
    head = [
        Item("fn", it.text) if it.text in _EVAL_VERBS else Item("op", it.text, RAISER) if it.text in _APPEARANCE else it
        for it in subject
    ]
    head.append(Item("op", word, NEG_PRED if word in _EVAL_NEG else TRUTH))
    ops = [cls for cls, _ in chunk_operators(head, final=True)]
    p = compose(ops)
    if p == NEGATED:
        return RETRACTS
    if p == HEDGED and any(c in (NEG, NEG_PRED, NEG_STRONG) for c in ops):
        return DOUBTS
    return CONFIRMS  # "That's right.", "I hope it is correct.", "That seems right."


SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?![\s.!?]|$))+[.!?]*")  # "3.5" and "$1,250.00" stay inside


def speech_acts(text: str, key: str = "") -> list[tuple[int, str]]:
    """(offset, act) of every sentence of ``text`` that retracts or doubts what came before it."""
    out = []
    for m in SENTENCE.finditer(text):
        act = speech_act(m.group(), key) if m.group().strip() else None
        if act:
            out.append((m.start(), act))
    return out
