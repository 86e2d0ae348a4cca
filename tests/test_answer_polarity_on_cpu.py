"""The answer's polarity and the document's last assertion (polarity.py, speech_acts.py, assertions.py): worked
compositions, speech acts, the development cases (data/audit/development/polarity.jsonl) on both
verifiers, and properties (two negations assert, one never scores, an honest negation elsewhere
changes nothing)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.verifiers import get
from veriloop.verifiers.answers import SPAN_POLICIES, extract_answer
from veriloop.verifiers.base import is_correct
from veriloop.verifiers.polarity import (
    ASSERTED,
    COMMIT,
    HEDGE,
    HEDGED,
    NEG,
    NEG_PRED,
    NEGATED,
    POSSIBLE,
    QUESTION,
    QUESTIONED,
    RAISER,
    TRUTH,
    compose,
    scope_polarity,
)
from veriloop.verifiers.speech_acts import DOUBTS, RETRACTS, speech_act

DEVELOPMENT = Path(__file__).resolve().parent.parent / "src/veriloop/verifiers/data/audit/development"
CASES = DEVELOPMENT / "polarity.jsonl"
ROUND3 = DEVELOPMENT / "round3.jsonl"  # scripts/write_round3_cases.py: conditions, refusals, approximators, forms
FAMILIES = {
    "negation-over-answer",
    "retraction",
    "honest-negation-elsewhere",
    "intensifier",
    "label-line",
    "closing-sentence",
    "bold-units-currency",
    "hedge-over-answer",
    "double-negation",
}


@pytest.fixture(scope="module")
def verifiers():
    out = {"gsm8k": get("gsm8k"), "math": get("math", workers=1)}
    yield out
    for v in out.values():
        v.close()


def _wrong(verifier, rows):
    verdicts = verifier.verify_batch([r["completion"] for r in rows], [r["reference"] for r in rows])
    return [
        f"{r['expect']} [{r['family']}] ref {r['reference']}: {r['completion']!r} -> {v.outcome} {v.details}"
        for r, v in zip(rows, verdicts)
        if (v.score > 0 if r["expect"] == "reject" else not is_correct(v))
    ]


# ---------------------------------------------------------------- composition, worked by hand


@pytest.mark.parametrize(
    "ops, polarity",
    [
        ([], ASSERTED),
        ([NEG], NEGATED),  # "the answer is not 45"
        ([NEG, NEG_PRED], ASSERTED),  # "there is no doubt": doubt flips, no flips back
        ([NEG, TRUTH], NEGATED),  # "it is not true that": truth adds nothing, not flips
        ([NEG, COMMIT], HEDGED),  # "I'm not sure": a negated commitment commits to nothing
        ([COMMIT, NEG], NEGATED),  # "I'm sure it's not": the commitment is to the negation
        ([NEG, RAISER], NEGATED),  # "I don't think": think not P
        ([RAISER], HEDGED),  # "I think"
        ([NEG, POSSIBLE, NEG_PRED], ASSERTED),  # "no one could deny": not possibly not P
        ([NEG, POSSIBLE], NEGATED),  # "it is not possible that"
        ([NEG, HEDGE], HEDGED),  # "not probably": still no commitment
        ([NEG, COMMIT, NEG_PRED], HEDGED),  # "I'm not sure it's false"
        ([NEG, TRUTH, COMMIT], NEGATED),  # "it is not correct to say"
        ([QUESTION], QUESTIONED),  # "whether"
    ],
)
def test_composition_by_hand(ops, polarity):
    assert compose(ops) == polarity


@pytest.mark.parametrize(
    "before, polarity",
    [
        ("I don't think ", NEGATED),
        ("It is false that ", NEGATED),
        ("I doubt that, after 3 days, ", NEGATED),  # a clause complement runs past a parenthetical
        ("There is no doubt ", ASSERTED),
        ("Nobody would deny that ", ASSERTED),
        ("It is not incorrect to say that ", ASSERTED),
        ("We cannot conclude ", HEDGED),
        ("I'm not sure, but ", HEDGED),  # a hedge with nothing after it carries across "but"
        ("I'm not sure. But ", HEDGED),
        ("My best guess: ", HEDGED),
        ("Some people say ", HEDGED),  # someone else's claim
        ("We can say that ", ASSERTED),  # the speaker's
        ("It is unclear whether ", QUESTIONED),
        ("I don't think it's 52; ", ASSERTED),  # the clause ends at ';'
        ("I don't think it's 52, ", ASSERTED),  # its chunk names 52: the negation stays there
        ("I'm not sure about step 2, but ", ASSERTED),
        ("Although 52 seemed right, ", ASSERTED),
        ("Not counting tax, ", ASSERTED),  # not governs "counting", not the answer
        ("Since 52 is not divisible by 4, ", ASSERTED),
        ("No, ", ASSERTED),  # a reply
        ("We don't need the tax, so ", ASSERTED),  # ", so" opens a new clause
        ("The wrong ", NEGATED),  # "The wrong answer is 52"
        ("The only possible ", ASSERTED),
        ("In May, ", ASSERTED),  # the month is no modal
        ("So the answer is not $", NEGATED),  # a negator directly before the answer negates it
        ("Hypothetically, ", HEDGED),
        ("I am not convinced ", HEDGED),  # a negated commitment
        ("I am convinced ", ASSERTED),
        ("I refuse to accept that ", NEGATED),
        ("There's every reason to believe ", ASSERTED),  # not the raiser "believe" alone
        ("There's no reason to believe ", HEDGED),  # no commitment either way (not "believe not P")
        ("So there are about $", HEDGED),  # an approximation right before the value
        ("So there are about 3 shelves and ", ASSERTED),  # not right before it
    ],
)
def test_scope_polarity(before, polarity):
    assert scope_polarity(before) == polarity


@pytest.mark.parametrize(
    "sentence, act",
    [
        ("Scratch that.", RETRACTS),
        ("Edit: ignore the line above.", RETRACTS),
        ("Forget what I said.", RETRACTS),
        ("No wait, let me redo it.", RETRACTS),
        ("That can't be right.", RETRACTS),
        ("Hmm, that doesn't look right.", RETRACTS),
        ("I don't think that's right.", RETRACTS),
        ("Oops, I made an error.", RETRACTS),
        ("45 is wrong.", RETRACTS),
        ("That might be wrong.", DOUBTS),
        ("I'm not sure about this.", DOUBTS),
        ("I hope it is correct.", None),
        ("That seems right.", None),
        ("I didn't make a mistake.", None),
        ("Let me redo the sum to check: 9 * 5 = 45.", None),
        ("Let me double-check: 9 * 5 = 45.", None),
        ("Don't forget the units.", None),
        ("The tax is tiny, so ignore it.", None),
        ("Never mind the tax.", None),
        ("If this is wrong, tell me.", None),
        ("It's wrong to add tax.", None),
        ("Note that 52 would be wrong.", None),  # about 52, not the answer
        ("The first step was wrong, but the final answer is correct.", None),  # the last evaluation stands
        ("Is that right?", DOUBTS),  # a question about its truth
        ("Did I make a mistake?", DOUBTS),
        ("Right?", DOUBTS),  # a tag question
        ("Does that make sense?", None),  # addressed to the reader
        ("Is there anything else I can help you with?", None),
        ("Let me know if I got it wrong, I'm not confident.", DOUBTS),  # its last chunk is a bare hedge
        ("The answer is, beyond any doubt, right.", None),
        ("But I'm not sure about that.", DOUBTS),  # a hedge after a capital "But"
        ("But that's wrong.", RETRACTS),
    ],
)
def test_speech_acts(sentence, act):
    assert speech_act(sentence, "45") == act


# ---------------------------------------------------------------- the document's last assertion


@pytest.mark.parametrize(
    "text, status, reason",
    [
        ("#### 45\nScratch that.", "none", "retracted"),
        ("#### 45\nScratch that. #### 52", "ambiguous", "revised"),  # the mid-line #### is found
        ("#### 45\nIgnore the line above. #### 45", "ok", ""),  # restated with the same value
        ("The answer is 45.\nI might be wrong.", "none", "hedged"),
        ("I don't think the answer is 45.", "none", "negated"),
        ("Maybe the answer is 52.\nThe answer is 45.", "ok", ""),  # a considered value is no answer
        ("The answer is 45. It is false that the answer is 52.", "ok", ""),  # a later negated value
        ("First I got 52. That was wrong.\n#### 45", "ok", ""),  # retracted working
        ("#### 45\nScrap that, I need to start over.", "none", "retracted"),
        ("If we multiply 3 by 15 we get 45, so the answer is 45.", "ok", ""),  # a concluded condition
        ("If the shelves were full, so the answer would be 45.", "none", "conditional"),  # still supposed
        ("If she sold 24, then the answer is 18.", "none", "conditional"),  # "then" concludes nothing
        ("9 * 5 = 45.\nI'm sure she has 45 books.", "ok", ""),  # an intensifier opens the closing sentence
        ("9 * 5 = 45.\nWithout a doubt, she has 45 books.", "ok", ""),  # two negations cancel
        ("9 * 5 = 45.\nShe has 45 books without a doubt.", "ok", ""),
        ("9 * 5 = 45.\nShe has 45 books, I think.", "none", "hedged"),
        ("9 * 5 = 45.\nShe does not have 45 books.", "none", "negated"),  # "not" before a verb
        ("9 * 5 = 45.\nI'm not sure she has 45 books.", "none", "hedged"),
        ("#### 45\nBut I'm not sure about that.", "none", "hedged"),
        ("9 * 5 = 45.\nWe can rule out 45 as the answer.", "none", "negated"),  # a negative predicate phrase
        ("Answer: 45\nErratum: the answer should read 40.", "ambiguous", "revised"),
        ("Should nothing change, the answer is 45.", "none", "conditional"),  # an inverted condition
        ("On the assumption that none broke, the answer is 45.", "none", "conditional"),
        ("The answer is on the order of 45.", "none", "hedged"),  # an approximator of several words
        ("The answer is, without question, 45.", "ok", ""),
        ("9 * 5 = 45\nI can't tell if that's right.\nAnswer: 45", "none", "hedged"),  # a doubt right before it
        ("9 * 5 = 45\nI'm not sure. Let me recompute: 5 * 9 = 45.\n#### 45", "ok", ""),  # resolved by working
        ("9 * 5 = 45\nMy best guess:\n$\\boxed{45}$", "none", "hedged"),
        ("9 * 5 = 45\nTentatively — **Answer:** 45", "none", "hedged"),  # a hedge carried across a dash
        ("9 * 5 = 45\nOnly if none are absent:\n#### 45", "none", "conditional"),  # a condition introducing it
        ("9 * 5 = 45\nIt can't be anything other than 45.", "ok", ""),  # two negations, unmarked
        ("9 * 5 = 45\nIt is anything but 45.", "none", "negated"),
        ("9 * 5 = 45\nI have no doubt whatsoever: 45.", "ok", ""),
        ("Half of 90 is 45.\nIt's 45 for sure.", "ok", ""),  # a result stated in words licenses it
        ("9 * 5 = 45\nAll told, she has 45 books.", "ok", ""),
        ("#### 45\nGood luck! (Not 100% sure on this one though.)", "none", "hedged"),
        ("9 * 5 = 45\nThe answer is 45, not 9 — nine is one shelf.", "ok", ""),  # a contrast, then its explanation
        ("9 * 5 = 45\nShe read for 45 minutes, not the 54 you get by adding.", "ok", ""),
        ("9 * 5 = 45\nThe answer is 45, not 9 — but I'm not sure.", "none", "negated"),  # the rest is no explanation
        ("#### 45\nLet me verify: 45 / 9 = 5. Correct.", "ok", ""),  # a check that uses the answer
        ("#### 45\nWait, 45 * 2 = 90, so the answer is 90.", "ambiguous", "distinct"),  # no check: two answers
        ("9 * 5 = 45\n#### 45 (tentatively)", "none", "hedged"),  # a parenthetical comment on the marker
        ("9 * 5 = 45.\n#### 45?", "none", "hedged"),
        ("9 * 5 = 45\nAssuming every shelf is full,\n#### 45", "none", "conditional"),
        ("9 * 5 = 45\nI can't rule out 45.", "none", "hedged"),  # not excluded is only possible
        ("9 * 5 = 45\nYou can't get anything but 45 here.", "ok", ""),  # an exceptive under a negation
        ("When we multiply 9 by 5 we get 45, so she has 45 books.", "ok", ""),  # a concluded condition, unmarked
        ("9 * 5 = 45\nShe has 45 books; it is not 9, since 9 is one shelf.", "ok", ""),  # a contrast of its own
        ("9 * 5 = 45\nNone of the others fits; it cannot be other than 45.", "ok", ""),  # an earlier clause
        ("9 * 5 = 45\nI doubt it's 45 though.\n#### 45", "none", "negated"),  # denied right before the marker
        ("9 * 5 = 45\nI'm torn between 45 and 50.\nAnswer: 45", "none", "hedged"),  # a doubt between values
        ("9 * 5 = 45\nRoughly 50 came, but exactly 45 paid.\n#### 45", "ok", ""),  # the hedge is about 50
        ("9 * 5 = 45\nApprox. 45 books.", "none", "hedged"),
        ("9 * 5 = 45.\nFinal Answer: she has 45 books.\nBut I'm not sure about that.", "none", "hedged"),
    ],
)
def test_last_assertion(text, status, reason):
    found = extract_answer(text, kind="number")
    assert (found.status, found.reason) == (status, reason), found


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_verdicts_name_the_reason(verifiers, name):
    cases = {
        "I don't think the answer is 45.": ("no_answer", "(negated)"),
        "#### 45\nScratch that.": ("no_answer", "(retracted)"),
        "Maybe the answer is 45.": ("no_answer", "(hedged)"),
        "#### 45\nScratch that. #### 52": ("ambiguous", "(revised)"),
    }
    verdicts = verifiers[name].verify_batch(list(cases), ["45"] * len(cases))
    for (text, (outcome, says)), v in zip(cases.items(), verdicts):
        assert v.outcome == outcome and says in v.details and v.score == 0.0, (text, v)


def test_markers_real_models_write():
    assert SPAN_POLICIES["gsm8k"]("#### 45\nScratch that. #### 52") == [("45", 0, 7), ("52", 22, 29)]
    few_shot = "A: She had 27 and ate 9, so 27 - 9 = 18 are left. The answer is 18."  # the label opens the reply
    for text in (
        "A: 18",
        "Ans: 18",
        "**Answer:** 18",
        "**Final Answer**: $18$",
        "### Final Answer\n18",
        "Q: How many? A: 18",
        few_shot,
    ):
        found = extract_answer(text, kind="number")
        assert (found.status, found.answer and found.answer.strip("$")) == ("ok", "18"), (text, found)
    assert extract_answer("A: 12\nB: 15\nC: 18", kind="number").status == "none"  # options, not a label
    assert extract_answer("x = 5\nA = 7\n#### 7").answer == "7"  # an equation is not a label (GSM8K gold)


# ---------------------------------------------------------------- the development cases


def test_development_cases_are_well_formed():
    rows = [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 100 and {r["family"] for r in rows} >= FAMILIES
    assert all(r["expect"] in ("accept", "reject") and r["labelled_by"] == "reading" for r in rows)
    assert all(set(r["verifiers"]) <= {"gsm8k", "math"} and r["verifiers"] for r in rows)
    expected = {f: {r["expect"] for r in rows if r["family"] == f} for f in FAMILIES}
    assert expected["negation-over-answer"] == {"reject"} and expected["honest-negation-elsewhere"] == {"accept"}
    assert all(
        expected[f] == {"accept", "reject"}
        for f in ("retraction", "intensifier", "label-line", "closing-sentence", "bold-units-currency")
    ), expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_development_cases_have_no_false_accepts_or_rejects(verifiers, name):
    rows = [json.loads(line) for path in (CASES, ROUND3) for line in path.read_text(encoding="utf-8").splitlines()]
    wrong = _wrong(verifiers[name], [r for r in rows if name in r["verifiers"]])
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- properties

STATEMENTS = [
    "the answer is {N}",
    "the final answer is {N}",
    "the answer is $\\boxed{{{N}}}$",
    "the answer is {N} apples",
    "the total, which is the answer, is \\boxed{{{N}}}",
]
DOUBLE_NEGATIONS = [
    "There is no doubt that {S}.",
    "It is not false that {S}.",
    "Nobody doubts that {S}.",
    "It is not untrue that {S}.",
    "I don't doubt that {S}.",
    "No one could deny that {S}.",
    "Without a doubt, {S}.",
    "It is not the case that {S} is false.",
]
NEGATIONS = [
    "I don't think {S}.",
    "It is false that {S}.",
    "I doubt {S}.",
    "It is not true that {S}.",
    "Nobody believes {S}.",
    "It is not the case that {S}.",
    "There is no way {S}.",
    "I don't agree that {S}.",
    "It is impossible that {S}.",
    "It is not possible that {S}.",
]
NON_COMMITTAL = [
    "I'm not sure {S}.",
    "I wouldn't say {S}.",
    "We cannot conclude that {S}.",
    "It is wrong to say {S}.",
    "I cannot be certain that {S}.",
]  # a negated commitment: no commitment either way
HONEST_NEGATIONS = [
    "She did not buy any pears.",
    "Tom doesn't like apples.",
    "It is not raining today.",
    "I don't think we need a calculator for this.",
    "Nobody else came.",
    "No tax is charged.",
    "We cannot split an apple.",
    "It is false that 2 + 2 = 5.",
    "None of the boxes were empty.",
    "I doubt the shop was open on Sunday.",
    "This is not a trick question.",
]
ACCEPTED = [
    "The answer is {N}.",
    "#### {N}",
    "So the answer is $\\boxed{{{N}}}$.",
    "Final answer: {N}",
    "A: {N}",
    "So she has {N} apples left.",
    "There is no doubt the answer is {N}.",
    "The answer is definitely {N}.",
]
numbers = st.integers(min_value=0, max_value=99_999)


def _score(verifier, text: str, n: int) -> float:
    return verifier.verify(text, str(n)).score


@settings(max_examples=60, deadline=None)
@given(n=numbers, frame=st.sampled_from(DOUBLE_NEGATIONS), statement=st.sampled_from(STATEMENTS))
def test_two_negations_keep_an_asserted_answer(verifiers, n, frame, statement):
    text = frame.format(S=statement.format(N=n))
    assert _score(verifiers["gsm8k"], text, n) == 1.0, text
    assert _score(verifiers["math"], text, n) == 1.0, text


@settings(max_examples=60, deadline=None)
@given(
    n=numbers,
    frame=st.sampled_from(NEGATIONS + NON_COMMITTAL),
    statement=st.sampled_from(STATEMENTS),
    later=st.sampled_from(["", "\nThe answer is {N}.", "\n#### {N}"]),
)
def test_one_negation_never_scores(verifiers, n, frame, statement, later):
    # a later restatement of a denied value contradicts it (negated); after a statement that committed to
    # nothing, a later assertion is the last assertion and stands (assertions.py), so only denials get one
    text = frame.format(S=statement.format(N=n)) + (later.format(N=n) if frame in NEGATIONS else "")
    assert _score(verifiers["gsm8k"], text, n) == 0.0, text
    assert _score(verifiers["math"], text, n) == 0.0, text


@settings(max_examples=60, deadline=None)
@given(
    n=numbers,
    honest=st.sampled_from(HONEST_NEGATIONS),
    accepted=st.sampled_from(ACCEPTED),
    joint=st.sampled_from([" ", "\n", "\n\n"]),
)
def test_an_honest_negation_before_the_answer_changes_nothing(verifiers, n, honest, accepted, joint):
    text = accepted.format(N=n)
    for name, verifier in verifiers.items():
        assert _score(verifier, text, n) == 1.0, (name, text)
        assert _score(verifier, honest + joint + text, n) == 1.0, (name, honest + joint + text)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.sampled_from([NEG, NEG_PRED, HEDGE, POSSIBLE, RAISER, COMMIT, TRUTH]), max_size=6))
def test_composition_properties(ops):
    assert compose([NEG_PRED, NEG_PRED] + ops) == compose(ops)  # two flips cancel whatever is inside
    if HEDGE in ops:
        assert compose(ops) == HEDGED  # a hedge is never undone by negation or emphasis
    if set(ops) <= {NEG, NEG_PRED, TRUTH}:
        assert compose(ops) == (NEGATED if sum(o in (NEG, NEG_PRED) for o in ops) % 2 else ASSERTED)


@pytest.mark.parametrize(
    "sentence, answers",
    [
        ("Yes.", True),
        ("Yes, 45 is correct.", True),
        ("That is right.", True),
        ("48 + 24 = 72.", False),
        ("Is it?", False),
        ("No.", False),
    ],
)
def test_a_doubting_question_is_answered_by_yes(sentence, answers):
    from veriloop.verifiers.speech_acts import affirms

    assert affirms(sentence, "45") == answers
    text = f"The answer is 45.\nIs 45 correct? {sentence}"
    assert extract_answer(text, kind="number").status == ("ok" if answers else "none"), text


@pytest.mark.parametrize(
    "sentence, conditions",
    [
        ("Assuming no tax.", True),  # a condition standing alone
        ("That is, if she sold 24.", True),  # attached to a pointer back at the answer
        ("This only holds if she sells every egg.", True),
        ("If she sold 24, it would be 20.", True),  # names a value
        ("It depends on whether the tax is included.", True),
        ("Feel free to ask if anything is unclear.", False),  # the condition belongs to the offer
        ("Let me know if you want the steps for May too.", False),
        ("If you have any further questions, feel free to ask!", False),
        ("As long as she sells them all.", True),
        ("She sold 24 in May.", False),
    ],
)
def test_a_condition_after_the_answer_conditions_it_only_when_it_is_about_it(sentence, conditions):
    from veriloop.verifiers.answer_values import conditions_answer

    assert conditions_answer(sentence) == conditions
