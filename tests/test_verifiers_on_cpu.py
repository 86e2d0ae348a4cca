"""Arithmetic verifiers: the seeds' candidates, adversarial completions, strictness."""

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


# The seeds' four answers to 24/(3+5) (chapter on verifiable rewards, section 3).
@pytest.mark.parametrize(
    "completion, expected",
    [
        ("3+5=8;24/8=3;answer=3", (1, 1, 1)),  # A
        ("3+5=6;24/6=4;answer=4", (0, 1, 0)),  # B
        ("3+5=6;24/6=4;answer=3", (1, 1, 0)),  # C: right answer, the steps do not support it
        # D: right maths, wrong final format.  The seeds' human O counts it; a strict program cannot
        # read "result=3" as the answer, so outcome is 0 too (format failures are recorded separately).
        ("3+5=8;24/8=3;result=3", (0, 0, 0)),
    ],
)
def test_seed_four_answers(completion, expected):
    assert scores(completion, "24/(3+5)") == expected


def test_weighted_composite_keeps_components():
    # R = 0.8 O + 0.2 F: A -> 1.0, B -> 0.2, C -> 1.0 (the steps are not checked by this reward).
    v = verifiers.get("arithmetic")
    assert v.verify("3+5=8;24/8=3;answer=3", "24/(3+5)").score == pytest.approx(1.0)
    b = v.verify("3+5=6;24/6=4;answer=4", "24/(3+5)")
    assert b.score == pytest.approx(0.2)
    assert b.components["outcome"] == 0.0 and b.components["format"] == 1.0
    assert v.verify("3+5=6;24/6=4;answer=3", "24/(3+5)").score == pytest.approx(1.0)
    assert "arithmetic-outcome@1" in v.version and "arithmetic-format@1" in v.version


@pytest.mark.parametrize(
    "completion",
    [
        "answer=13",  # substring trap: contains "3"
        "answer=3;answer=4",  # two answers
        "answer=4;answer=3",  # two answers, the last one right
        "answer=3 or 4",
        "answer=3;",  # trailing empty segment
        "answer=3 because 24/8",  # trailing text
        "answer=03",  # leading zero
        "answer=+3",
        "answer=3.0",
        "the answer is 3",
        "",
        "3+5=8;24/8=3",  # no answer segment
        "answer=-3",
        "Answer=3",
        "答案=3",
    ],
)
def test_outcome_rejects_hacks_and_ambiguity(completion):
    assert OUT.verify(completion, "24/(3+5)").score == 0.0


def test_outcome_ignores_surrounding_whitespace_only():
    assert OUT.verify("  answer=3\n", "24/(3+5)").score == 1.0
    assert OUT.verify("answer= 3", "24/(3+5)").score == 0.0


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


@pytest.mark.parametrize("bad", ["(2+3", "2++3", "", "7/2", "abc", "4/(2-2)"])
def test_invalid_reference_is_an_error_not_a_reward(bad):
    for v in (OUT, FMT, PROC):
        with pytest.raises(VerifierError):
            v.verify("answer=1", bad)


def test_verdicts_are_deterministic_and_versioned():
    a = PROC.verify("2+3=6;6*4=20;answer=20", "(2+3)*4")
    b = PROC.verify("2+3=6;6*4=20;answer=20", "(2+3)*4")
    assert a == b and isinstance(a, Verdict) and a.version == "arithmetic-process@1"


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
