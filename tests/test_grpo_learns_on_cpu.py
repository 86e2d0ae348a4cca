"""GRPO on the built-in task, for real: from the shipped base, with fixed seeds.

Two short runs (40 steps of 16 prompts x 8 each, about 30 s apiece on two cores): one with the
outcome reward, one with the process reward.  Reward and held-out accuracy must rise, and the
seeds' lesson must show: only the process reward removes right-answer-wrong-steps traces.
"""

import json

import pytest

from veriloop.config import build_config
from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.slow

SETTINGS = {
    "steps": 40,
    "seed": 0,
    "checkpoint_every": 100,
    "rollout.prompts_per_step": 16,
    "rollout.group_size": 8,
    "task.arithmetic.heldout_size": 200,
}


def train_and_evaluate(run_dir, verifier):
    cfg = build_config(TrainConfig, {}, {**SETTINGS, "run_dir": str(run_dir), "verifier": verifier})
    trainer = Trainer(cfg, progress=False)
    problems, verifiers = cfg.task.build().heldout(), cfg.task.eval_verifiers()
    before = evaluate(trainer.policy, problems, verifiers, EvalConfig(n_samples=0))
    trainer.train()
    after = evaluate(load_policy(str(run_dir / "final")), problems, verifiers, EvalConfig(n_samples=0))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return before, after, rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo")
    return {v: train_and_evaluate(root / v, v) for v in ("arithmetic", "arithmetic-process")}


def test_reward_rises_during_training(runs):
    # Each step's mean reward depends on which 16 prompts were drawn (it moves 0.71-0.98 from step to
    # step here), so compare halves of the run: the standard error of the difference is about 0.02.
    _, _, rows = runs["arithmetic"]
    half = len(rows) // 2
    first = sum(r["reward_mean"] for r in rows[:half]) / half
    last = sum(r["reward_mean"] for r in rows[half:]) / (len(rows) - half)
    assert last > first + 0.04, (first, last)


def test_heldout_accuracy_rises_where_the_teacher_was_wrong(runs):
    before, after, _ = runs["arithmetic"]
    assert after.greedy_accuracy > before.greedy_accuracy + 0.12, (before.greedy_accuracy, after.greedy_accuracy)
    mul_before, mul_after = before.by_tag["mul"]["greedy_accuracy"], after.by_tag["mul"]["greedy_accuracy"]
    assert mul_after > mul_before + 0.3, (mul_before, mul_after)


def test_only_the_process_reward_removes_wrong_steps(runs):
    base, outcome, _ = runs["arithmetic"]
    _, process, _ = runs["arithmetic-process"]
    assert outcome.wrong_steps_rate > 0.5 * base.wrong_steps_rate  # the outcome reward keeps them
    rates = (outcome.wrong_steps_rate, process.wrong_steps_rate)
    assert process.wrong_steps_rate <= 0.5 * outcome.wrong_steps_rate, rates
    assert process.greedy_accuracy > base.greedy_accuracy + 0.1
