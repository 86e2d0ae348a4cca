"""Program of thought (``task.reasoning pot``): prompts, the teacher's programs, and the verifiers that run a
completion in the sandbox and grade what it printed."""

import json
import random

import pytest

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.tasks.arithmetic import TeacherConfig, program_trace
from veriloop.tasks.config import TaskConfig
from veriloop.tasks.expressions import parse_expression
from veriloop.training.config import TrainConfig
from veriloop.verifiers import get
from veriloop.verifiers.program import printed_answer


def test_the_teachers_program_by_hand():
    perfect = TeacherConfig.perfect()
    assert program_trace(parse_expression("(2+3)*4"), perfect, random.Random(0)) == "a=2+3;b=a*4;print(b)"
    assert program_trace(parse_expression("54*3/2"), perfect, random.Random(0)) == "a=54*3;b=a//2;print(b)"
    assert program_trace(parse_expression("7"), perfect, random.Random(0)) == "print(7)"
    # the arithmetic slips cannot happen in a program (the interpreter multiplies) ...
    mul = TeacherConfig(multiplication_slip=1.0, subtraction_slip=0.0, wrong_step_rate=1.0)
    assert program_trace(parse_expression("(2+3)*4"), mul, random.Random(0)) == "a=2+3;b=a*4;print(b)"
    # ... the reasoning slip can: operands the wrong way round, compensated with abs() where the result is used
    sub = TeacherConfig(multiplication_slip=0.0, subtraction_slip=1.0, compensate_slips=True)
    assert program_trace(parse_expression("(7-3)*2"), sub, random.Random(0)) == "a=3-7;b=abs(a)*2;print(b)"
    raw = TeacherConfig(multiplication_slip=0.0, subtraction_slip=1.0, compensate_slips=False)
    assert program_trace(parse_expression("(7-3)*2"), raw, random.Random(0)) == "a=3-7;b=a*2;print(b)"


def test_pot_prompts_and_the_teachers_programs_pass_the_verifier():
    task = TaskConfig(reasoning="pot", teacher=TeacherConfig.perfect()).build()
    cot = TaskConfig().build()
    problems = task.heldout()[:12]
    assert [p.id for p in problems] == [p.id for p in cot.heldout()[:12]]  # the same problems, asked for a program
    assert all(p.prompt == p.reference + "?py:" for p in problems)
    rng = random.Random(0)
    programs = [task.teacher_completion(p, rng) for p in problems]
    verdicts = get("arithmetic-pot").verify_batch(programs, [p.reference for p in problems])
    assert [v.outcome for v in verdicts] == ["correct"] * 12, verdicts
    assert all(v.components == {"program_ran": 1.0, "outcome": 1.0} for v in verdicts)
    assert task.default_verifier == "arithmetic-pot"


@pytest.mark.parametrize(
    "program, outcome",
    [
        ("print(20)", "correct"),
        ("print(20.0)", "correct"),  # arithmetic-outcome reads 20.0 as the integer 20
        ("print('steps');print(19);print(20)", "correct"),  # the last line printed is the answer
        ("print(21)", "wrong"),
        ("x=20", "no_answer"),
        ("print(20);1/0", "crash"),  # the right answer, then an exception: the program did not finish
        ("import socket", "violation"),
        ("while True: pass", "timeout"),
        ("```python\nprint(20)\n```", "correct"),  # a fenced block is the program
    ],
)
def test_program_outcomes(program, outcome):
    v = get("program-output", wall_seconds=2.0, cpu_seconds=1).verify(program, "(2+3)*4")
    assert v.outcome == outcome, v
    assert v.score == (1.0 if outcome == "correct" else 0.0)
    assert v.components["program_ran"] == (0.0 if outcome in ("crash", "violation", "timeout") else 1.0)


def test_printed_answer_is_the_last_non_blank_line():
    assert printed_answer("1\n\n 2 \n\n") == "2" and printed_answer("") == "" and printed_answer("\r\n7\r\n") == "7"


def test_a_program_verifier_needs_pot_and_pot_needs_one():
    with pytest.raises(ConfigError, match="verifier 'arithmetic-pot'"):
        build_config(TrainConfig, {}, {"task.reasoning": "pot", "verifier": "arithmetic"})  # a verifier of traces
    # with no verifier named, the task's own: its program verifier
    assert build_config(TrainConfig, {}, {"task.reasoning": "pot"}).verifier == "arithmetic-pot"
    with pytest.raises(ConfigError, match="set task.reasoning pot"):
        build_config(TrainConfig, {}, {"verifier": "gsm8k-pot"})
    with pytest.raises(ConfigError, match="prompt_style plain with pot"):
        build_config(
            TrainConfig,
            {},
            {"task.name": "gsm8k", "task.prompt_style": "boxed", "task.reasoning": "pot", "verifier": "gsm8k-pot"},
        )
    with pytest.raises(ConfigError, match="task.reasoning must be one of"):
        build_config(TrainConfig, {}, {"task.reasoning": "programs"})
    with pytest.raises(InputError, match="answer_format must contain"):
        get("program-output", answer_format="answer=")
    cfg = build_config(TrainConfig, {}, {"task.reasoning": "pot", "verifier": "arithmetic-pot"})
    assert cfg.task.eval_verifiers() == {"outcome": "arithmetic-pot"}


def test_gsm8k_pot_asks_for_a_program_on_the_same_split_and_grades_what_it_prints():
    cot, pot = TaskConfig(name="gsm8k").build(), TaskConfig(name="gsm8k", reasoning="pot").build()
    assert [p.id for p in pot.validation()] == [p.id for p in cot.validation()]
    assert "Python program" in pot.heldout()[0].prompt and "```python" in pot.heldout()[0].prompt
    with pytest.raises(InputError, match="not programs"):
        pot.teacher_completion(pot.heldout()[0], random.Random(0))
    problem = pot.heldout()[0]  # Janet's ducks: 16 - 3 - 4 = 9 eggs at $2
    program = "```python\neggs = 16 - 3 - 4\nprint(eggs * 2)\n```"
    assert get(pot.default_verifier).verify(program, problem.reference).outcome == "correct"
    assert get(pot.default_verifier).verify(program.replace("* 2", "* 3"), problem.reference).outcome == "wrong"


def test_math_rows_as_programs_through_a_jsonl_task(tmp_path):
    rows = [
        {
            "prompt": "What is 1/2 + 1/4?",
            "reference": "\\frac{3}{4}",
            "completion": "```python\nfrom fractions import Fraction\nprint(Fraction(1, 2) + Fraction(1, 4))\n```",
        }
    ]
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TaskConfig(name="jsonl", data=str(path), heldout_data=str(path), reasoning="pot", verifier="math-pot")
    problem = task.build().heldout()[0]
    assert problem.prompt.startswith("What is 1/2 + 1/4?\nWrite a Python program")
    demo = task.build().teacher_completion(problem, random.Random(0))
    verdict = get("math-pot").verify(demo, problem.reference)
    assert verdict.outcome == "correct", verdict
    assert get("math-pot").verify("print(Fraction(1, 2))", problem.reference).outcome == "crash"  # not imported


def test_evaluating_programs_reports_the_outcome_and_no_nan():
    from veriloop.evaluation.evaluate import EvalConfig, evaluate
    from veriloop.models.loading import load_policy

    task = TaskConfig(reasoning="pot")
    result = evaluate(
        load_policy("builtin:base"), task.build().heldout()[:4], task.eval_verifiers(), EvalConfig(n_samples=0)
    )
    assert result.format_rate is None and result.process_rate is None and 0 <= result.greedy_accuracy <= 1
    json.dumps(result.as_dict(), allow_nan=False)  # a task without a format check writes null, never NaN
