"""Each alarm of seed 003's debugging list, said by a real training run built to show its pattern.

The runs are short (14 steps of 8 prompts x 4 completions from the shipped base), so the watcher's window is 8
steps with 4 values needed (``alarms.window``/``alarms.min_steps``); where a pattern needs more steps than that to
reach a default threshold, the run names the threshold it is built for (an option the alarm's table documents).
A healthy run, with every threshold at its default, says none; a non-finite value stops the run naming its step
and tensor.  Unit tests of the watcher's rules on hand-made rows: tests/test_alarms_on_cpu.py.
"""

from __future__ import annotations

import json

import pytest

from veriloop import verifiers
from veriloop.config import build_config
from veriloop.report.data import page_data
from veriloop.training.config import TrainConfig
from veriloop.training.run.alarms import NonFiniteError
from veriloop.training.trainer import Trainer


@verifiers.register("test-rewards-wrong")
class RewardsWrong(verifiers.Verifier):
    """A broken verifier: it rewards the answers the arithmetic verifier rejects (what reward hacking exploits)."""

    name, version = "test-rewards-wrong", "1"

    def verify(self, completion, reference):
        v = verifiers.get("arithmetic-outcome").verify(completion, reference)
        ok = v.outcome == "correct"
        return verifiers.Verdict(float(not ok), {"outcome": float(ok)}, self.tag, v.outcome, v.details)


@verifiers.register("test-length-reward")
class LengthReward(verifiers.Verifier):
    """Rewards length alone (a length signal gone wrong)."""

    name, version = "test-length-reward", "1"

    def verify(self, completion, reference):
        return verifiers.Verdict(min(1.0, len(completion) / 60), {}, self.tag, "wrong", "length only")


@verifiers.register("test-constant-reward")
class ConstantReward(verifiers.Verifier):
    """Every completion gets 1: every group has zero variance."""

    name, version = "test-constant-reward", "1"

    def verify(self, completion, reference):
        return verifiers.Verdict(1.0, {}, self.tag, "correct", "")


SHORT = {
    "policy": "builtin:base",
    "steps": 14,
    "rollout.prompts_per_step": 8,
    "rollout.group_size": 4,
    "alarms.window": 8,
    "alarms.min_steps": 4,
    "checkpoint_every": 100,
    "task.arithmetic.heldout_size": 16,
    "threads": 1,
}
RUNS = {  # alarm: the run built to show its pattern
    "reward_hacking": {
        "verifier": "test-rewards-wrong",
        "optim.lr": 3e-4,
        "kl.beta": 0.0,
        "eval_every": 2,
        "eval_problems": 32,
    },
    "length_without_success": {
        "verifier": "test-length-reward",
        "optim.lr": 5e-4,
        "kl.beta": 0.0,
        "update.inner_updates": 1,
        "alarms.length_rise": 0.1,
        "alarms.length_flat": 0.1,
    },
    "zero_variance_groups": {"verifier": "test-constant-reward"},
    # two passes over each batch at a learning rate that moves some tokens' probabilities tenfold in one step
    "extreme_ratios": {"optim.lr": 1e-3, "kl.beta": 0.0},
    # sampling so cold (T = 0.05) that no exploration is left: 0.0025 nats per token against the base's 0.03 at
    # T = 0.7; the shipped base learns too little in 14 steps for its own entropy to fall that far
    "entropy_collapse": {"sampling.temperature": 0.05, "alarms.entropy_floor": 0.005},
    "kl_runaway": {"optim.lr": 1e-3, "kl.beta": 0.02},
    "truncation_rising": {"sampling.max_new_tokens": 12, "update.mask_truncated": False},
    # stale weights: a batch sampled a step before it is learned (rollout.lag 1) at a learning rate that moves far
    "logprob_mismatch": {"rollout.lag": 1, "optim.lr": 1e-3, "kl.beta": 0.0, "update.inner_updates": 1},
}


def run(tmp_path, name: str, **over):
    cfg = build_config(TrainConfig, {}, {**SHORT, **over, "run_dir": str(tmp_path / name)})
    trainer = Trainer(cfg, progress=False)
    trainer.train()
    return fired(tmp_path / name)


def fired(run_dir) -> dict[str, dict]:
    path = run_dir / "alarms.jsonl"
    return {e["name"]: e for e in map(json.loads, path.read_text().splitlines())} if path.exists() else {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("alarm", sorted(RUNS))
def test_a_run_built_for_an_alarm_says_it_once(tmp_path, alarm):
    said = run(tmp_path, alarm, **RUNS[alarm])
    assert alarm in said, f"{alarm} not said; said: {sorted(said)}"
    lines = (tmp_path / alarm / "alarms.jsonl").read_text().splitlines()
    assert [json.loads(x)["name"] for x in lines].count(alarm) == 1  # once, however long the pattern lasts
    event = said[alarm]
    assert event["message"] and event["advice"] and event["seed"].startswith("seed 003")
    assert 4 <= event["step"] <= SHORT["steps"]
    data = page_data(tmp_path / alarm)  # the report shows it
    assert alarm in {a["name"] for a in data["alarms"]}


@pytest.mark.timeout(120)
def test_a_healthy_run_says_no_alarm(tmp_path):
    # every threshold at its default (only the window is short, as in the runs above)
    assert run(tmp_path, "healthy") == {}
    assert not (tmp_path / "healthy" / "alarms.jsonl").exists()


@pytest.mark.timeout(120)
def test_a_nan_stops_the_run_naming_its_step_and_tensor(tmp_path):
    # a learning rate that blows the weights up in the first step's passes: the gradient becomes NaN
    cfg = build_config(
        TrainConfig,
        {},
        {**SHORT, "run_dir": str(tmp_path / "nan"), "optim.lr": 1e6, "optim.grad_clip": 0.0, "optim.warmup_steps": 0},
    )
    with pytest.raises(NonFiniteError) as caught:
        Trainer(cfg, progress=False).train()
    e = caught.value
    assert e.step == 1 and e.name in ("grad_norm", "loss") and f"step 1: {e.name}" in str(e)
    assert fired(tmp_path / "nan")["non_finite"]["step"] == 1
    metrics = tmp_path / "nan" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()  # the step's row is not kept


@pytest.mark.timeout(200)
def test_a_resumed_run_does_not_say_an_alarm_again(tmp_path):
    over = {**RUNS["zero_variance_groups"], "steps": 6, "checkpoint_every": 3}
    assert "zero_variance_groups" in run(tmp_path, "zv", **over)
    cfg = build_config(TrainConfig, {}, {**SHORT, **over, "steps": 9, "run_dir": str(tmp_path / "zv")})
    Trainer(cfg, resume=True, progress=False).train()
    names = [json.loads(x)["name"] for x in (tmp_path / "zv" / "alarms.jsonl").read_text().splitlines()]
    assert names == ["zero_variance_groups"]
