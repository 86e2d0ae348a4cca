"""The built-in arithmetic task: expressions, splits, canonical traces and the noisy teacher."""

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop import verifiers
from veriloop.tasks import get_task
from veriloop.tasks.arithmetic import (
    ArithmeticConfig,
    ArithmeticTask,
    TeacherConfig,
    canonical_trace,
    parse_trace,
    teacher_trace,
)
from veriloop.tasks.expressions import ExpressionError, internal_nodes, parse_expression, render

OUT, PROC = verifiers.get("arithmetic-outcome"), verifiers.get("arithmetic-process")


def test_parse_and_evaluate():
    assert parse_expression("17*23").value == 391
    assert parse_expression("(2+3)*4").value == 20
    assert parse_expression("24/(3+5)").value == 3
    assert parse_expression("10-4-3").value == 3  # left-associative
    assert parse_expression("2+3*4").value == 14  # precedence
    assert parse_expression("7/2").value == Fraction(7, 2)
    for bad, says in [
        ("", "empty expression"),
        ("2+", "expected a number or '\\(' at the end in '2\\+'"),
        ("(2+3", "expected '\\)' at the end"),
        ("2 3", "unexpected '3' at position 2"),
        ("2+a", "unexpected 'a' at position 2"),
        ("-2", "expected a number or '\\(' at position 0"),
    ]:
        with pytest.raises(ExpressionError, match=says):
            parse_expression(bad)


def test_canonical_trace_is_post_order():
    assert canonical_trace(parse_expression("(2+3)*4")) == "2+3=5;5*4=20;answer=20"
    assert canonical_trace(parse_expression("17*23")) == "17*23=391;answer=391"
    assert canonical_trace(parse_expression("24/(3+5)")) == "3+5=8;24/8=3;answer=3"


@given(st.integers(0, 10**6))
@settings(max_examples=200, deadline=None)
def test_generated_problems_round_trip_and_satisfy_constraints(seed):
    cfg = ArithmeticConfig()
    task = ArithmeticTask(cfg)
    (node,) = task.train_nodes(1, random.Random(seed))
    assert render(parse_expression(render(node))) == render(node)  # the tree survives printing
    for n in internal_nodes(node):
        assert n.value.denominator == 1 and 0 <= n.value <= cfg.max_value
    assert cfg.min_ops <= len(internal_nodes(node)) <= cfg.max_ops
    problem = task.train_batch(1, random.Random(seed))[0]
    trace = canonical_trace(parse_expression(problem.reference))
    assert OUT.verify(trace, problem.reference).score == 1.0
    assert PROC.verify(trace, problem.reference).score == 1.0


def test_splits_never_share_a_problem_and_are_deterministic():
    task = ArithmeticTask(ArithmeticConfig(heldout_size=300, validation_size=300))
    heldout = {p.reference for p in task.heldout()}
    validation = {p.reference for p in task.validation()}
    assert len(heldout) == 300 and len(validation) == 300
    train = {p.reference for p in task.train_batch(5000, random.Random(0))}
    assert not heldout & train and not validation & train and not heldout & validation
    assert {task.split_of(t) for t in validation} == {"validation"} and {task.split_of(t) for t in train} == {"train"}
    # the held-out set is the one it always was: validation came out of the train share of the hash, not held-out's
    assert task.heldout()[0].id == "arith-0f9f8ee0f07c"
    assert [p.id for p in ArithmeticTask(ArithmeticConfig(heldout_size=300)).heldout()] == [
        p.id for p in task.heldout()
    ]
    assert task.train_batch(20, random.Random(7)) == task.train_batch(20, random.Random(7))


def test_difficulty_knobs():
    task = ArithmeticTask(ArithmeticConfig(digits=1, min_ops=3, max_ops=3, op_weights="+:1,*:1"))
    for p in task.train_batch(50, random.Random(0)):
        node = parse_expression(p.reference)
        assert len(internal_nodes(node)) == 3
        assert set(p.reference) <= set("0123456789+*()")


@pytest.mark.parametrize(
    "bad",
    [
        dict(digits=0),
        dict(min_ops=3, max_ops=2),
        dict(op_weights="+:1,%:2"),
        dict(op_weights="+:x"),
        dict(heldout_share=1.5),
    ],
)
def test_bad_config_names_the_field(bad):
    with pytest.raises(ValueError, match="arithmetic"):
        ArithmeticConfig(**bad)


def test_multiplication_slip_changes_the_answer():
    rng = random.Random(0)
    cfg = TeacherConfig(multiplication_slip=1.0, subtraction_slip=0.0)
    trace = teacher_trace(parse_expression("2*9-3"), cfg, rng)
    assert trace == "2*9=11;11-3=8;answer=8"
    assert OUT.verify(trace, "2*9-3").score == 0.0


def test_compensated_slip_is_right_answer_wrong_steps():
    # The seeds' candidate 2 pattern: a wrong intermediate, then a step that silently fixes it.
    rng = random.Random(0)
    cfg = TeacherConfig(multiplication_slip=0.0, subtraction_slip=1.0)
    trace = teacher_trace(parse_expression("(7-3)*2"), cfg, rng)
    assert trace == "7-3=-4;-4*2=8;answer=8"
    assert OUT.verify(trace, "(7-3)*2").score == 1.0 and PROC.verify(trace, "(7-3)*2").score == 0.0
    carried = teacher_trace(parse_expression("(7-3)*2"), TeacherConfig(0.0, 1.0, compensate_slips=False), rng)
    assert carried == "7-3=-4;-4*2=-8;answer=-8"
    # The last subtraction never slips: nothing would be left to compensate it.
    assert teacher_trace(parse_expression("9*2-3"), cfg, rng) == "9*2=18;18-3=15;answer=15"


def test_multiplication_slip_is_skipped_where_a_division_would_break():
    cfg = TeacherConfig(multiplication_slip=1.0, subtraction_slip=0.0)
    trace = teacher_trace(parse_expression("3*4/6"), cfg, random.Random(0))
    assert trace == "3*4=12;12/6=2;answer=2"  # 3+4=7 is not divisible by 6: the teacher gets it right


def test_wrong_step_rate_writes_candidate_two():
    rng = random.Random(0)
    trace = teacher_trace(parse_expression("(2+3)*4"), TeacherConfig(0.0, 0.0, wrong_step_rate=1.0), rng)
    assert trace == "2+3=6;6*4=20;answer=20"
    assert OUT.verify(trace, "(2+3)*4").score == 1.0 and PROC.verify(trace, "(2+3)*4").score == 0.0


def test_perfect_teacher_writes_canonical_traces():
    task = ArithmeticTask(ArithmeticConfig(), TeacherConfig.perfect())
    rng = random.Random(0)
    for p in task.train_batch(200, rng):
        assert task.teacher_completion(p, rng) == canonical_trace(parse_expression(p.reference))


def test_teacher_rates_follow_the_config():
    task = ArithmeticTask(ArithmeticConfig(), TeacherConfig(multiplication_slip=0.5, subtraction_slip=0.5))
    rng = random.Random(0)
    problems = task.train_batch(3000, rng)
    by_class: dict[tuple, list] = {}
    for p in problems:
        trace = task.teacher_completion(p, rng)
        by_class.setdefault(p.tags, []).append(
            (OUT.verify(trace, p.reference).score, PROC.verify(trace, p.reference).score)
        )
    rate = lambda rows, f: sum(f(o, q) for o, q in rows) / len(rows)  # noqa: E731
    assert rate(by_class[("clean",)], lambda o, q: q) == 1.0
    assert rate(by_class[("sub-inner",)], lambda o, q: o) == 1.0  # always the right answer ...
    assert 0.42 < rate(by_class[("sub-inner",)], lambda o, q: o and not q) < 0.58  # ... half the time by wrong steps
    assert (
        0.42 < rate(by_class[("mul",)], lambda o, q: o) < 0.62
    )  # wrong about half the time (fewer where it can't slip)


def test_trace_parser():
    steps, answer = parse_trace("2+3=5;-5*4=-20;answer=-20")
    assert [s.text() for s in steps] == ["2+3=5", "-5*4=-20"] and answer == -20


def test_registry():
    assert isinstance(get_task("arithmetic"), ArithmeticTask)
    with pytest.raises(KeyError, match="unknown task"):
        get_task("nope")
