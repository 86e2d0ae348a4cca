"""GRPO on the built-in task, for real: from the shipped base, reward and held-out accuracy rise.

Marked slow (about a minute on two cores); CI runs it.
"""

import json

import pytest

from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.training.config import build_config
from veriloop.training.run_config import TrainConfig
from veriloop.training.trainer import GRPOTrainer

pytestmark = pytest.mark.slow


def test_grpo_raises_reward_and_heldout_accuracy(tmp_path):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path),
            "steps": 16,
            "seed": 0,
            "checkpoint_every": 100,
            "grpo.prompts_per_step": 16,
            "grpo.group_size": 8,
            "task.arithmetic.heldout_size": 160,
        },
    )
    trainer = GRPOTrainer(cfg, progress=False)
    task, verifiers = cfg.task.build(), cfg.task.eval_verifiers()
    problems = task.heldout()
    before = evaluate(trainer.policy, problems, verifiers, EvalConfig(n_samples=0))
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first = sum(r["accuracy"] for r in rows[:4]) / 4
    last = sum(r["accuracy"] for r in rows[-4:]) / 4
    assert last > first + 0.1, (first, last)
    after = evaluate(load_policy(str(tmp_path / "final")), problems, verifiers, EvalConfig(n_samples=0))
    assert after.greedy_accuracy > before.greedy_accuracy + 0.1, (before.greedy_accuracy, after.greedy_accuracy)
    assert after.by_tag["mul"]["greedy_accuracy"] > before.by_tag["mul"]["greedy_accuracy"] + 0.2
