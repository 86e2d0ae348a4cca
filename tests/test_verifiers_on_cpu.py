"""Arithmetic verifiers: the seeds' candidates, adversarial completions, strictness."""

import re

import pytest

from veriloop import verifiers
from veriloop.verifiers import Verdict, VerifierError, from_reward_function

OUT, FMT, PROC = (verifiers.get(n) for n in ("arithmetic-outcome", "arithmetic-format", "arithmetic-process"))


def scores(completion, reference):
    return (
        OUT.verify(completion, reference).score,
        FMT.verify(completion, reference).score,
        PROC.verify(completion, reference).score,
    )


# The seeds' four candidates for (2+3)*4, written in our format (answer= instead of 答案=).
@pytest.mark.parametrize(
    "completion, expected",
    [
        ("2+3=5;5*4=20;answer=20", (1, 1, 1)),  # candidate 0: right answer, right steps
        ("2+3=5;5+4=9;answer=9", (0, 1, 0)),  # candidate 1: wrong operation, wrong answer
        ("2+3=6;6*4=20;answer=20", (1, 1, 0)),  # candidate 2: right answer through wrong steps
        ("answer=20 or 9", (0, 0, 0)),  # candidate 3: two answers is not an answer
    ],
)
def test_seed_candidates(completion, expected):
    assert scores(completion, "(2+3)*4") == expected


# The seeds' four answers to 24÷(3＋5), "end with 答案=整数" (chapter on verifiable rewards, section 3),
# in the seeds' own characters.  O: the final expressed value is right; F: only the required ending
# 答案=整数; P: the equations are true and support the conclusion; R = 0.8 O + 0.2 F.
SEED_ANSWERS = {
    "A": ("3＋5＝8，24÷8＝3；答案=3", (1, 1, 1, 1.0)),
    "B": ("3＋5＝6，24÷6＝4；答案=4", (0, 1, 0, 0.2)),  # 0.8*0 + 0.2*1
    "C": ("3＋5＝6，24÷6＝4；答案=3", (1, 1, 0, 1.0)),  # right answer, the steps do not support it
    "D": ("3＋5＝8，24÷8＝3；得数为3", (1, 0, 1, 0.8)),  # right maths, wrong ending: 0.8*1 + 0.2*0
}


def test_seed_table_of_four_answers():
    seeds = {"answer_prefix": "答案"}
    o, p = verifiers.get("arithmetic-outcome", **seeds), verifiers.get("arithmetic-process", **seeds)
    f = verifiers.get("arithmetic-format", require="ending", **seeds)
    r = verifiers.get("arithmetic", format_require="ending", **seeds)
    got = {k: tuple(v.verify(text, "24/(3+5)").score for v in (o, f, p, r)) for k, (text, _) in SEED_ANSWERS.items()}
    assert got == {k: pytest.approx(expected) for k, (_, expected) in SEED_ANSWERS.items()}
    # the outcome names say which check failed: D's is a format failure, C's a process failure
    assert [f.verify(SEED_ANSWERS[k][0], "24/(3+5)").outcome for k in "AD"] == ["correct", "bad_format"]
    assert [p.verify(SEED_ANSWERS[k][0], "24/(3+5)").outcome for k in "ABC"] == ["correct", "wrong", "wrong_steps"]
    assert r.verify(SEED_ANSWERS["D"][0], "24/(3+5)").outcome == "correct"  # the outcome part's, not the format's
    # the built-in whole-trace format rejects all four (÷, Chinese separators, 得数为)
    trace = verifiers.get("arithmetic-format", **seeds)
    assert [trace.verify(t, "24/(3+5)").score for t, _ in SEED_ANSWERS.values()] == [0.0] * 4


def test_weighted_composite_keeps_components():
    # R = 0.8 O + 0.2 F: A -> 1.0, B -> 0.2, C -> 1.0 (the steps are not checked by this reward).
    v = verifiers.get("arithmetic")
    assert v.verify("3+5=8;24/8=3;answer=3", "24/(3+5)").score == pytest.approx(1.0)
    b = v.verify("3+5=6;24/6=4;answer=4", "24/(3+5)")
    assert b.score == pytest.approx(0.2) and b.outcome == "wrong"
    assert b.components["outcome"] == 0.0 and b.components["format"] == 1.0
    assert v.verify("3+5=6;24/6=4;answer=3", "24/(3+5)").score == pytest.approx(1.0)
    d = v.verify("3+5=8;24/8=3;answer: 3", "24/(3+5)")  # right value, not the trace format: 0.8*1 + 0.2*0
    assert (d.score, d.outcome) == (pytest.approx(0.8), "correct")
    assert "arithmetic-outcome@5" in v.version and "arithmetic-format@5" in v.version
    with pytest.raises(ValueError, match="require must be one of"):
        verifiers.get("arithmetic", format_require="prose")


def test_weighted_outcome_comes_from_the_named_part():
    parts = {"arithmetic-format": 0.5, "arithmetic-outcome": 0.5}  # the format part first
    wrong_answer = "3+5=8;24/8=3;answer=4"
    assert verifiers.get("weighted", weights=parts).verify(wrong_answer, "24/(3+5)").outcome == "correct"  # format's
    named = verifiers.get("weighted", weights=parts, outcome_from="arithmetic-outcome")
    assert named.verify(wrong_answer, "24/(3+5)").outcome == "wrong"
    with pytest.raises(ValueError, match="outcome_from"):
        verifiers.get("weighted", weights=parts, outcome_from="arithmetic-process")


@pytest.mark.parametrize(
    "completion, outcome",
    [
        ("answer=13", "wrong"),  # substring trap: contains "3"
        ("answer=3;answer=4", "ambiguous"),  # two answers
        ("answer=4;answer=3", "ambiguous"),  # two answers, the last one right
        ("answer=3 or 4", "ambiguous"),
        ("答案=3或4", "ambiguous"),
        ("answer=3 because 24/8", "no_answer"),  # trailing prose: not a number
        ("answer=3 (grader: accept)", "no_answer"),
        ("answer=not 3", "no_answer"),
        ("answer=4, not 3", "wrong"),  # a contrast names 4
        ("answer=about 3", "no_answer"),
        ("answer=3?", "no_answer"),
        ("answer=3 if 3+5=8", "no_answer"),
        ("answer=3. Oops, 4", "ambiguous"),
        ("answer=4. Wait, actually it's 3", "ambiguous"),
        ("answer=3.5", "wrong"),  # not an integer
        ("answer=24/8", "wrong"),  # an expression, not the computed value
        ("answer=3%", "wrong"),
        ("the answer is 3 or so", "no_answer"),
        ("", "no_answer"),
        ("3+5=8;24/8=3", "no_answer"),  # no answer statement: no last-line fallback for a trace
        ("3+5=8;24/8=3\n3", "no_answer"),  # not even a bare last line
        ("3+5=8;24/8=3;answer=", "no_answer"),
        ("answer=-3", "wrong"),
        ("(3+5)/24?", "no_answer"),
    ],
)
def test_outcome_rejects_hacks_and_ambiguity(completion, outcome):
    v = OUT.verify(completion, "24/(3+5)")
    assert (v.score, v.outcome) == (0.0, outcome), v.details


@pytest.mark.parametrize(
    "completion",
    [
        "3+5=8;24/8=3;answer=3;",  # trailing separator
        "3+5=8;24/8=3;answer=03",  # leading zero: still the integer 3
        "3+5=8;24/8=3;answer=+3",
        "3+5=8;24/8=3;answer=3.0",  # an integer value written as a decimal
        "3+5=8;24/8=3;answer= 3",
        "3+5=8;24/8=3;the answer is 3",
        "3+5=8;24/8=3;Answer=3",
        "3+5=8;24/8=3;答案=3",
        "3+5=8;24/8=3;答案=３",  # full width
        "3+5=8;24/8=3;得数是3",
        "3 + 5 = 8\n24 / 8 = 3\nanswer: 3",
        "3+5=8;24/8=3;\\boxed{3}",
        "3+5=8;24/8=3\n#### 3",
    ],
)
def test_format_failures_are_not_maths_failures(completion):
    # The seeds' lesson (answer D): the value and the steps are right, only the required format is not.
    assert [v.verify(completion, "24/(3+5)").score for v in (OUT, FMT, PROC)] == [1.0, 0.0, 1.0]
    assert [v.verify(completion, "24/(3+5)").outcome for v in (OUT, FMT, PROC)] == ["correct", "bad_format", "correct"]


def test_outcome_reads_surrounding_whitespace_and_full_width():
    assert OUT.verify("  answer=3\n", "24/(3+5)").score == 1.0
    assert OUT.verify("2+3=5;5*4=20;答案=２０", "(2+3)*4").score == 1.0
    assert OUT.verify("2+3=5;5*4=20;答案=２０或９", "(2+3)*4").outcome == "ambiguous"


def test_custom_answer_prefix():
    v = verifiers.get("arithmetic-outcome", answer_prefix="result")
    assert v.verify("3+5=8;24/8=3;result=3", "24/(3+5)").score == 1.0
    assert v.verify("3+5=8;24/8=3;answer=3", "24/(3+5)").score == 1.0  # the built-in markers still read
    assert v.verify("3+5=8;24/8=3;result=3;answer=4", "24/(3+5)").outcome == "ambiguous"
    assert OUT.verify("3+5=8;24/8=3;result=3", "24/(3+5)").outcome == "no_answer"  # not a marker by default
    f = verifiers.get("arithmetic-format", answer_prefix="result")
    assert f.verify("3+5=8;24/8=3;result=3", "24/(3+5)").score == 1.0


@pytest.mark.parametrize(
    "completion, trace, ending",
    [
        ("3+5=8;24/8=3;答案=3", 1, 1),
        ("3＋5＝8；24/8＝3；答案＝３", 1, 1),  # NFKC first
        ("3+5=8，24÷8=3；答案=3", 0, 1),  # the seeds' separators and ÷: only the ending is right
        ("答案=3", 1, 1),
        ("3+5=8;24/8=3;答案=3。", 0, 0),  # something after the ending
        ("3+5=8;24/8=3;答案=03", 0, 0),  # not an integer as the format writes one
        ("3+5=8;24/8=3;答案：3", 0, 0),
        ("3+5=8;24/8=3;得数为3", 0, 0),
        ("答案=4;答案=3", 0, 0),  # stated twice
        ("3+5=8;24/8=3;答案=3;", 0, 0),
        ("3+5=8;24/8=3", 0, 0),
    ],
)
def test_format_trace_and_ending(completion, trace, ending):
    t = verifiers.get("arithmetic-format", answer_prefix="答案")
    e = verifiers.get("arithmetic-format", answer_prefix="答案", require="ending")
    assert (t.verify(completion, "24/(3+5)").score, e.verify(completion, "24/(3+5)").score) == (trace, ending)
    with pytest.raises(ValueError, match="require"):
        verifiers.get("arithmetic-format", require="everything")


@pytest.mark.parametrize(
    "completion, outcome",
    [
        ("3 + 5 = 8\n24 / 8 = 3\n答案=3", "correct"),  # spaces and newlines
        ("3＋5＝8，24÷8＝3；答案=3", "correct"),
        ("5+3=8;24/8=3;answer=3", "correct"),
        ("3+5=8;24/8=3;answer=3;answer=3", "correct"),  # the same answer twice is one answer
        ("3+5=8;hello;24/8=3;answer=3", "wrong_steps"),  # a segment that is neither an equation nor the answer
        ("answer=3;3+5=8;24/8=3", "wrong_steps"),  # equations after the answer
        ("3+5=8;24/8=3 and 24/8=4;answer=3", "wrong_steps"),
        ("3+5=8;24/8=3;answer=3 or 4", "ambiguous"),
        ("3+5=8;24/8=3", "no_answer"),
        ("3+5=8;24/8=3;answer=4", "wrong"),
    ],
)
def test_process_reads_steps_leniently(completion, outcome):
    v = PROC.verify(completion, "24/(3+5)")
    assert (v.score, v.outcome) == (float(outcome == "correct"), outcome), v.details


@pytest.mark.parametrize(
    "completion, ok",
    [
        ("3+2=5;5*4=20;answer=20", True),  # + operands swapped: still an operation of the problem
        ("2+3=5;4*5=20;answer=20", True),  # * operands swapped
        ("2+3=5;5*4=20;5*1=5;answer=20", False),  # an extra step that is not in the problem
        ("answer=20", False),  # no steps for a two-operation problem
        ("2+3=5;answer=20", False),  # a missing step
        ("2+3=5;5*4=20;answer=21", False),  # last result is not the answer
        ("5*4=20;2+3=5;answer=20", False),  # 5 is not available before 2+3 is computed
        ("2+3=5;2+3=5;5*4=20;answer=20", False),  # the same operation twice
        ("2*3=6;6+4=10;answer=20", False),  # true equations, wrong expression
    ],
)
def test_process_checks_the_expression(completion, ok):
    assert PROC.verify(completion, "(2+3)*4").score == float(ok)


def test_process_accepts_any_order_of_independent_steps():
    ref = "(1+2)*(3+4)"
    assert PROC.verify("1+2=3;3+4=7;3*7=21;answer=21", ref).score == 1.0
    assert PROC.verify("3+4=7;1+2=3;3*7=21;answer=21", ref).score == 1.0


def test_process_handles_equal_intermediate_values():
    # Two sub-results are both 6: the checker must bind each step to the right operation.
    ref = "2*3+12/(8-6)"
    assert PROC.verify("2*3=6;8-6=2;12/2=6;6+6=12;answer=12", ref).score == 1.0


def test_process_details_name_the_failing_step():
    v = PROC.verify("2+3=6;6*4=20;answer=20", "(2+3)*4")
    assert "step 1" in v.details and "2+3=6" in v.details
    assert v.components == {"format": 1.0, "outcome": 1.0, "steps_true": 0.0, "process": 0.0}


def test_negative_operands_in_steps_parse():
    # A compensated slip: 7-3 written as -4, then used with its magnitude.
    v = PROC.verify("7-3=-4;-4*2=8;answer=8", "(7-3)*2")
    assert (v.components["format"], v.components["outcome"], v.score) == (1.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "bad, says",
    [
        ("(2+3", "is not a valid expression: expected '\\)'"),
        ("2++3", "is not a valid expression: expected a number"),
        ("", "is not a valid expression: empty expression"),
        ("7/2", "has the non-integer value 7/2"),
        ("abc", "is not a valid expression: unexpected 'a'"),
        ("4/(2-2)", "is not a valid expression: division by zero"),
    ],
)
def test_invalid_reference_is_an_error_not_a_reward(bad, says):
    for v in (OUT, FMT, PROC):
        with pytest.raises(VerifierError, match=f"reference {re.escape(repr(bad))} {says}"):
            v.verify("answer=1", bad)


def test_every_arithmetic_verdict_names_its_outcome():
    # Records store Verdict.outcome and metrics count each kind: one vocabulary (base.Verdict).
    answers = {"correct", "wrong", "no_answer", "ambiguous"}
    vocabulary = {
        "arithmetic-outcome": answers,
        "arithmetic-process": answers | {"wrong_steps"},
        "arithmetic-format": {"correct", "bad_format"},
        "arithmetic": answers,
    }
    completions = [
        "2+3=5;5*4=20;answer=20",
        "2+3=6;6*4=20;answer=20",
        "2+3=5;5+4=9;answer=9",
        "answer=20 or 9",
        "2+3=5;5*4=20",
        "2+3=5;5*4=20;得数为20",
        "",
    ]
    seen = {}
    for name, allowed in vocabulary.items():
        seen[name] = [verifiers.get(name).verify(c, "(2+3)*4").outcome for c in completions]
        assert set(seen[name]) == allowed, (name, seen[name])
    assert seen["arithmetic"] == seen["arithmetic-outcome"]  # the composite names its outcome part's


def test_verdicts_are_deterministic_and_versioned():
    a = PROC.verify("2+3=6;6*4=20;answer=20", "(2+3)*4")
    b = PROC.verify("2+3=6;6*4=20;answer=20", "(2+3)*4")
    assert a == b and isinstance(a, Verdict) and a.version == "arithmetic-process@5"


def test_registry_errors_and_listing():
    assert {"arithmetic", "arithmetic-outcome", "arithmetic-format", "arithmetic-process", "weighted"} <= set(
        verifiers.names()
    )
    with pytest.raises(KeyError, match="unknown verifier"):
        verifiers.get("no-such-verifier")
    with pytest.raises(ValueError, match="bad options"):
        verifiers.get("arithmetic-outcome", strictness=3)


def test_reward_function_wraps_as_verifier():
    def length_reward(prompts, completions, reference, **_):
        return [float(len(c) == len(r)) for c, r in zip(completions, reference)]

    v = from_reward_function(length_reward)
    assert v.verify("abc", "xyz").score == 1.0 and v.verify("ab", "xyz").score == 0.0
    assert v.verify("abc", "xyz").version == "length_reward@1"
    bad = from_reward_function(lambda p, c, **_: [float("nan")] * len(c), name="nan")
    with pytest.raises(VerifierError, match="non-finite"):
        bad.verify("a", "b")
