"""The document's last assertion: which of a completion's statements of an answer still stands.

``answers.py`` finds the statements and reads each one (``answer_rules.read_value``, with the
polarity of its sentence from ``polarity.scope_polarity``); this module combines them in text order.

* A statement is *withdrawn* by a later sentence that retracts or doubts it (``speech_acts.speech_act``:
  "Scratch that.", "Ignore the line above.", "That's wrong.", "I might be wrong.") before the next
  statement, or by a retraction in its own line ("#### 45 scratch that").
* **Policy for a withdrawn answer**: a marked answer that is later withdrawn, or followed by a
  statement of another value, gives *no final answer*, whichever value the reference is:
  ``retracted`` (status ``none``) when no statement stands after it, ``revised`` (status
  ``ambiguous``) when another value is stated after it.  This is the self-correction policy of
  ``audit.argued_answers_suite`` ("#### a\\nCorrection: b" scores 0 for a and for b): rewarding
  either of several stated answers teaches a model to state several.  A withdrawn answer restated
  with the *same* value stands ("#### 45\\nWait, that's wrong. ... The answer is 45.").
* A retraction before the first statement withdraws only working ("First I got 52. That was
  wrong. ... #### 45" is 45); a doubt or denial in the sentence right before it decides it ("I can't
  tell which is right.\nAnswer: 30", "I doubt it's 84.\n#### 84"), and a condition that introduces it
  conditions it ("Only if nobody is absent:\n#### 72").  A later statement of the same value that is
  hedged, negated or conditional decides too ("A: 24 / 3 = 8.\n#### 8?"), unless a yes answers it.
* Of the statements that stand: two values in one statement are ``several`` / ``range``; two
  statements with different strings are ``distinct`` (a maths check may still find them equal);
  a value one statement states and another negates is ``negated``; a later statement of another
  value is ``revised``, unless that statement negates it ("The answer is 45. It isn't 52.");
  what follows the last one is read by ``answer_rules.revision`` (retracted, hedged, conditional,
  revised; the text's closing sentence stating another value revises it).

What is left to the outcome: whether the value equals the reference (``mathequiv``), and the
reference's own form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from veriloop.verifiers.answer_rules import Read, numeric_key, revision
from veriloop.verifiers.answer_values import NUM, conditional
from veriloop.verifiers.polarity import HEDGED, NEGATED, whole_polarity
from veriloop.verifiers.speech_acts import DOUBTS, SENTENCE, affirms, speech_act, speech_acts


@dataclass(frozen=True)
class Extraction:
    """``status``: ``ok`` (one answer), ``none`` (no answer found, or none that is a clean answer),
    ``ambiguous`` (several).  ``reason`` says why no answer was taken: ``negated``, ``retracted``,
    ``hedged``, ``conditional``, ``prose``, ``no final answer`` (status none); ``several`` (two values
    in one statement), ``range``, ``revised`` (a new value after a stated one, or after it was
    withdrawn), ``distinct`` (two statements with different strings, which a maths check may still
    find equal: ``spans``)."""

    status: str
    answer: str | None = None  # the normalised answer when status == "ok"
    candidates: tuple[str, ...] = ()  # every distinct value found
    policy: str = ""  # the policy that found it
    reason: str = ""
    spans: tuple[str, ...] = ()  # the accepted statements' raw values (boxes whole), for a maths parser


class Statement(NamedTuple):
    policy: str
    start: int  # where the statement (its marker) starts in the normalised text
    end: int  # where its value ends
    read: Read


_STATED = ("answer", "several")
_SENTENCE_REST = re.compile(r"(?<=[.!?])\s|\n")  # where the sentence a box ends in ends


def _withdrawn(found: list[Statement], text: str) -> set[int]:
    """Indices of the stated answers withdrawn by a retraction or doubt before a later stated answer."""
    stated = [i for i, x in enumerate(found) if x.read.kind in _STATED]
    out = {i for i, x in enumerate(found) if x.read.reason == "retracted"}
    if not stated:
        return out
    first, last = min(found[i].end for i in stated), max(found[i].start for i in stated)
    for offset, _ in speech_acts(text[first:]) if last > first else ():  # whole sentences, that start before
        if first + offset < last:  # the last stated answer (after it, ``revision`` reads the rest)
            out |= {i for i in stated if found[i].end <= first + offset}
    return out


def _affirmed(text: str, key: str) -> bool:
    """Does a sentence of ``text`` answer a question about the answer with yes ("... 48 + 24 = 72. Yes.")?"""
    return any(affirms(m.group(), key) for m in SENTENCE.finditer(text) if m.group().strip())


def _lead_in(first: Statement, text: str, key: str) -> str | None:
    """How the sentence right before the first stated answer, with nothing between, bears on it:
    ``hedged`` when it doubts it ("I can't tell which is right.\nAnswer: 30", "Not confident this is
    right...\n#### 150", "My best guess:\n#### 45") or hesitates between it and another value ("I'm torn
    between 54 and 60.\nAnswer: 54"); ``negated`` when it denies the value ("I doubt it's 84.\n#### 84");
    ``conditional`` when it is a condition introducing it ("Only if nobody is absent:\n#### 72"); else
    None.  A doubt that working or a check follows ("I'm not sure. Let me recompute: 9 * 5 = 45.\n#### 45")
    is resolved by it; a hedged statement of the value itself is not a doubt ("The answer is probably
    18.\n#### 18": the marker commits), nor is a computation ("could have watched 3+6=9 movies")."""
    before = re.sub(
        r"(?:[\s*_#>$]|\\\[|\\\()+$", "", text[max(0, first.start - 400) : first.start]
    )  # markup, "$", "\\["
    last = [m.group().strip() for m in SENTENCE.finditer(before) if m.group().strip()]
    if not last:
        return None
    if last[-1].endswith((":", ",")) and conditional(last[-1]):  # "Assuming the store was open,\n#### 240"
        return "conditional"
    said = [m for m in re.finditer(NUM, last[-1]) if numeric_key(m.group()) == key]
    if not said or "=" in last[-1]:  # a computation is working, whatever its modality ("could have ... 3+6=9")
        return "hedged" if speech_act(last[-1], key) == DOUBTS else None
    if whole_polarity(last[-1][: said[-1].start()].rstrip("$ ")) == NEGATED:
        return "negated"  # "I doubt it's 84.\n#### 84": denied, then stated
    values = {numeric_key(m.group()) for m in re.finditer(NUM, last[-1])}
    if (
        len(values) > 1
        and re.search(r"\b(?:between|or|either|versus|vs)\b", last[-1], re.I)
        and whole_polarity(last[-1][: said[0].start()].rstrip("$ ")) == HEDGED
    ):
        return "hedged"  # "I'm torn between 54 and 60.\nAnswer: 54": a doubt between values, unresolved
    return "hedged" if speech_act(last[-1], key) == DOUBTS else None


def decide(found: list[Statement], text: str) -> Extraction:
    """The final answer of a text from its statements (see the module docstring)."""
    if not found:
        return Extraction("none", reason="no final answer")
    found = sorted(found, key=lambda x: x.start)
    withdrawn = _withdrawn(found, text)
    gone = {k for i in withdrawn for k in found[i].read.numbers}
    live = [x for i, x in enumerate(found) if i not in withdrawn]
    answers = [x for x in live if x.read.kind == "answer"]
    distinct: dict[str, str] = {}  # comparison key -> the first spelling
    for x in answers:
        distinct.setdefault(numeric_key(x.read.value), x.read.value)
    if gone and not answers and not any(x.read.kind == "several" for x in live):
        reasons = [found[i].read.reason for i in sorted(withdrawn)]
        reason = "hedged" if reasons and all(r == "hedged" for r in reasons) else "retracted"
        return Extraction("none", None, tuple(sorted(gone)), found[min(withdrawn)].policy, reason)
    if gone - set(distinct):  # withdrawn, then another value stated: a revision
        return Extraction(
            "ambiguous",
            None,
            tuple(distinct.values()) + tuple(sorted(gone - set(distinct))),
            found[min(withdrawn)].policy,
            "revised",
        )
    spans = tuple(dict.fromkeys(x.read.span for x in answers))
    several = [x for x in live if x.read.kind == "several"]
    if several:
        numbers = tuple(n for x in several for n in sorted(x.read.numbers) if n not in distinct)
        first = several[0]
        return Extraction("ambiguous", None, tuple(distinct.values()) + numbers, first.policy, first.read.reason)
    if len(distinct) > 1:  # different strings: a maths check may still find them equal (spans)
        return Extraction("ambiguous", None, tuple(distinct.values()), answers[0].policy, "distinct", spans)
    if not distinct:
        first = next((x for x in live if x.read.reason in ("negated", "hedged", "conditional")), live[0])
        return Extraction("none", policy=first.policy, reason=first.read.reason)
    key, value = next(iter(distinct.items()))
    if any(key in x.read.negated for x in live):  # stated and denied
        return Extraction("none", None, (value,), answers[0].policy, "negated")
    last = max(answers, key=lambda x: x.end)
    if any(x.start >= last.end and x.read.numbers - {key} - x.read.negated for x in live):  # another value after it
        return Extraction("ambiguous", None, (value,), answers[0].policy, "revised")
    later = [x for x in live if x.start >= last.end and x.read.kind == "not" and key in x.read.numbers]
    if (
        later
        and later[-1].read.reason in ("hedged", "negated", "conditional")
        and not (later[-1].read.reason == "hedged" and _affirmed(text[later[-1].start :], key))
    ):
        return Extraction("none", None, (value,), later[-1].policy, later[-1].read.reason)  # "A: 8.\n#### 8?"
    tail = text[last.end :]
    if last.policy == "boxed":  # the rest of a box's sentence was read with the box ("\boxed{45}, no doubt.")
        tail = tail[m.end() :] if (m := _SENTENCE_REST.search(tail)) else ""
    lead = _lead_in(answers[0], text, key)
    if lead is not None:
        return Extraction("none", None, (value,), answers[0].policy, lead)
    revised = revision(tail, key, same_line=True, closing=True)
    if revised is not None:
        status = "ambiguous" if revised.kind == "several" else "none"
        return Extraction(status, None, (value,), answers[0].policy, revised.reason)
    return Extraction("ok", value, (value,), answers[0].policy, "", spans)
