"""The seeds' experiments in examples/ run through the public API and reproduce the chapter's lesson."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--json", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def four():
    return run_example("four_candidates.py")


def test_four_candidates_rewards_are_the_chapters_table(four):
    assert four["rewards"] == {"outcome": [1.0, 0.0, 1.0, 0.0], "process": [1.0, 0.0, 0.0, 0.0]}


def test_outcome_reward_leaves_a_large_share_on_the_wrong_steps_candidate(four):
    p = four["outcome"]
    assert abs(sum(p) - 1) < 1e-3
    assert p[0] + p[2] > 0.95  # both right-answer candidates win ...
    assert p[2] > 0.3  # ... and the lucky one keeps a large share (chapter: 0.421)
    assert p[1] < 0.02 and p[3] < 0.02


def test_process_reward_concentrates_on_the_correct_candidate(four):
    p = four["process"]
    assert p[0] > 0.98  # chapter: 0.994
    assert p[2] < 0.01


def test_most_groups_have_all_equal_rewards_once_the_policy_concentrates(four):
    # chapter: 127 (outcome) and 129 (process) of 160 groups had all-equal rewards: no signal from them
    eq = four["equal_groups"]
    assert eq["rounds"] == 160 and 110 <= eq["outcome"] <= 150 and 110 <= eq["process"] <= 150
    assert four["equal_group_advantages"] == [0.0, 0.0, 0.0, 0.0]


def test_filtered_distillation_student(four):
    d = four["distill"]
    # counted on the trainer's own first batch (chapter: outcome 32, process 18): the outcome-trained teacher
    # almost never misses the answer (p(miss) ~ 0.008 a sample) ...
    assert 30 <= d["passed"]["outcome"] <= 32 and d["teacher_samples"] == 32
    assert 8 <= d["passed"]["process"] <= 26  # ... but only about half its samples have right steps
    assert d["student"][0] == pytest.approx(0.959, abs=0.002)  # chapter: 0.959 (only candidate 0 is kept)


def test_filtered_distillation_on_a_fixed_set(four):
    # the chapter's own procedure: 32 teacher samples drawn once, filtered by the process check, 100 passes
    d = four["distill_fixed"]
    assert d["set"] == 32 and 30 <= d["passed"]["outcome"] <= 32 and 8 <= d["passed"]["process"] <= 26
    assert d["sampled_per_step"] == [32] + [0] * 99  # sampled at step 1 only: every later step is a pass
    assert d["accepted_per_step"] == [d["passed"]["process"]]  # the same records, the same verdicts, each pass
    # cross-entropy on targets that are all candidate 0, SGD lr 0.2, 100 steps from uniform: z <- z - 0.2 (p - e_0)
    z = [0.0] * 4
    for _ in range(100):
        e = [2.718281828459045**v for v in z]
        p = [v / sum(e) for v in e]
        z = [z[k] - 0.2 * (p[k] - (k == 0)) for k in range(4)]
    e = [2.718281828459045**v for v in z]
    assert d["student"][0] == pytest.approx(e[0] / sum(e), abs=1e-4) == pytest.approx(0.959, abs=0.001)  # chapter


def test_pass_at_n_of_uniform_sampling(four):
    assert four["pass_at_n_uniform"] == {
        "outcome": {"1": 0.5, "4": 0.9375, "8": 0.9961},  # 1 - 0.5^n
        "process": {"1": 0.25, "4": 0.6836, "8": 0.8999},  # 1 - 0.75^n
    }
