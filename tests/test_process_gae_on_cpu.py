"""PRM step rewards in PPO (estimator ``gae_process``): the step scores on the tokens that close the steps, the
outcome on the last token, the KL penalty per token, all carried back by GAE with the critic (seed 004 s.3-4,
Math-Shepherd's step-by-step PPO).  By hand on a five-token example, then through a real PPO step."""

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.algorithms import gae_advantages, process_token_rewards
from veriloop.config import ConfigError, build_config
from veriloop.models.loading import load_policy
from veriloop.prm.model import PRM
from veriloop.training.config import TrainConfig
from veriloop.training.loop.signals import ESTIMATORS, EstimatorInput, terminal_rewards
from veriloop.training.trainer import Trainer

# One completion of five tokens: steps close at t=1 (PRM 0.9) and t=4 (0.2); outcome R = 1; critic values
# 0.5 .. 0.9 (V after the last token is 0); gamma 1, lambda 0.95.
STEP_SCORES = torch.tensor([[0.0, 0.9, 0.0, 0.0, 0.2]], dtype=torch.float64)
STEP_ENDS = torch.tensor([[False, True, False, False, True]])
MASK = torch.ones(1, 5)
VALUES = torch.tensor([[0.5, 0.6, 0.7, 0.8, 0.9]], dtype=torch.float64)
# r = [0, 0.9, 0, 0, 0.2 + 1]; delta_t = r_t + V_{t+1} - V_t = [0.1, 1.0, 0.1, 0.1, 0.3]
# A_4 = 0.3; A_3 = 0.1 + 0.95 * 0.3 = 0.385; A_2 = 0.1 + 0.95 * 0.385 = 0.46575;
# A_1 = 1.0 + 0.95 * 0.46575 = 1.4424625; A_0 = 0.1 + 0.95 * 1.4424625 = 1.470339375
BY_HAND = torch.tensor([[1.470339375, 1.4424625, 0.46575, 0.385, 0.3]], dtype=torch.float64)


def _cfg(**process):
    data = {"algo": "ppo", "advantage": {"estimator": "gae_process", "lam": 0.95}, "process": {"prm": "x", **process}}
    return build_config(TrainConfig, data, {})


def _input(outcome, token_rewards=None):
    rewards = torch.tensor([[outcome]])
    tr = terminal_rewards(rewards, MASK) if token_rewards is None else token_rewards
    return EstimatorInput(rewards, MASK, tr, VALUES, STEP_SCORES, STEP_ENDS, rewards)


def test_token_rewards_by_hand():
    r = process_token_rewards(torch.tensor([1.0]), STEP_SCORES, STEP_ENDS, MASK, 1.0, 1.0)
    assert r.tolist() == [[0.0, 0.9, 0.0, 0.0, pytest.approx(1.2, abs=1e-12)]]
    # weights and the offset: 2 * (s - 0.5) on the step ends, 0.5 * R on the last token
    r = process_token_rewards(torch.tensor([1.0]), STEP_SCORES, STEP_ENDS, MASK, 2.0, 0.5, 0.5)
    assert torch.allclose(r, torch.tensor([[0.0, 0.8, 0.0, 0.0, -0.6 + 0.5]], dtype=torch.float64))
    # a tool's output leaves holes in the mask: the outcome goes on the last model token, not on the count
    holes = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0]])
    r = process_token_rewards(torch.tensor([1.0]), STEP_SCORES, STEP_ENDS, holes, 1.0, 1.0)
    assert torch.allclose(r, torch.tensor([[0.0, 0.9, 0.0, 1.0, 0.0]], dtype=torch.float64))  # t=4 is masked
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        process_token_rewards(torch.tensor([1.0, 0.0]), STEP_SCORES, STEP_ENDS, MASK)


def test_gae_process_advantages_by_hand():
    adv = ESTIMATORS["gae_process"](_input(1.0), _cfg(outcome_weight=1.0))
    assert torch.allclose(adv, BY_HAND, atol=1e-12)
    # outcome weight 0: the step scores alone (A_4 loses the outcome's 1.0, and so on back with 0.95^k)
    alone = ESTIMATORS["gae_process"](_input(1.0), _cfg(outcome_weight=0.0))
    assert torch.allclose(BY_HAND - alone, torch.tensor([[0.95**4, 0.95**3, 0.95**2, 0.95, 1.0]]).double())


def test_the_kl_penalty_stays_per_token_and_the_outcome_weight_applies_to_the_outcome_only():
    # KL in the reward: the signal stage passes terminal(R) - beta * KL_t; the estimator keeps the KL part as
    # it is and weights the outcome: GAE of (w_o R 1[last] + w_p s_k 1[step end] - beta KL_t)
    beta_kl = torch.tensor([[0.01, 0.02, 0.0, 0.03, 0.04]], dtype=torch.float64)
    shaped = terminal_rewards(torch.tensor([[1.0]]), MASK) - beta_kl
    adv = ESTIMATORS["gae_process"](_input(1.0, shaped), _cfg(outcome_weight=0.5))
    want_rewards = torch.tensor([[0.0, 0.9, 0.0, 0.0, 0.2 + 0.5]], dtype=torch.float64) - beta_kl
    want, _ = gae_advantages(want_rewards, VALUES, MASK.double(), 1.0, 0.95)
    assert torch.allclose(adv, want, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1), min_size=6, max_size=6),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.floats(-1, 1),
    st.floats(0, 2),
    st.floats(0, 2),
)
def test_with_lambda_and_gamma_one_and_no_critic_a_token_gets_every_later_reward(scores, ends, outcome, wp, wo):
    # A_t = sum_{u >= t} r_u when V = 0 and gamma = lambda = 1: the outcome plus the scores of the steps closing
    # at or after t
    s, e, m = torch.tensor([scores], dtype=torch.float64), torch.tensor([ends]), torch.ones(1, 6)
    r = process_token_rewards(torch.tensor([outcome], dtype=torch.float64), s, e, m, wp, wo)
    adv, _ = gae_advantages(r, torch.zeros(1, 6, dtype=torch.float64), m.double(), 1.0, 1.0)
    for t in range(6):
        later = sum(scores[u] for u in range(t, 6) if ends[u])
        assert float(adv[0, t]) == pytest.approx(wo * outcome + wp * later, abs=1e-9)


def test_the_options_are_checked():
    with pytest.raises((ConfigError, ValueError), match="needs process.prm"):
        build_config(TrainConfig, {"algo": "ppo", "advantage": {"estimator": "gae_process"}}, {})
    # the offset is the GAE form's: under the group-normalised estimator it would be read by nothing
    with pytest.raises((ConfigError, ValueError), match="process.step_offset"):
        build_config(TrainConfig, {"algo": "grpo_process", "process": {"prm": "x", "step_offset": 0.5}}, {})
    # group-normalised outcomes need groups; the GAE form has no groups, so a group of one is fine
    cfg = _cfg(outcome_weight=1.0)
    assert cfg.rollout.group_size == 1 and cfg.process.outcome_weight == 1.0


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    """A PRM with a random (seeded) head: the step scores differ, so the step rewards are not all equal."""
    path = tmp_path_factory.mktemp("prm") / "prm"
    torch.manual_seed(0)
    prm = PRM(load_policy("builtin:base"), "semicolon", "{reference}?", {"labels": "hard", "loss": "bce"})
    torch.nn.init.normal_(prm.head.weight, std=0.5)
    prm.save(path)
    return str(path)


def test_a_ppo_step_places_the_prm_scores_and_trains_the_critic_on_them(tmp_path, prm_dir):
    data = {
        "algo": "ppo",
        "run_dir": str(tmp_path / "run"),
        "steps": 2,
        "save_rollouts": False,
        "rollout": {"prompts_per_step": 6, "group_size": 1},
        "kl": {"beta": 0.0},  # the KL's part is checked by hand above
        "advantage": {"estimator": "gae_process"},
        "process": {"prm": prm_dir, "outcome_weight": 1.0, "step_offset": 0.5},
    }
    trainer = Trainer(build_config(TrainConfig, data, {}), progress=False)
    records, _, _ = trainer.collector.collect(1, 0)
    signal = trainer.signal(records, 0.0)
    mask = signal.mask
    scores, ends = trainer.process.step_rewards(records, mask)
    assert int(ends.sum()) >= len(records)  # every completion closes at least one step
    outcome = torch.tensor([r.reward for r in records], dtype=torch.float64)
    values = trainer.learner.critic.values(signal.batch.batch).double()
    token_rewards = process_token_rewards(outcome, scores, ends, mask, 1.0, 1.0, 0.5)
    want, _ = gae_advantages(token_rewards, values, mask.double(), 1.0, trainer.cfg.advantage.lam)
    ended = torch.tensor([not r.truncated for r in records])
    assert ended.any()
    assert torch.allclose(signal.advantages[ended], want[ended], atol=1e-9)
    assert (signal.advantages[~ended] == 0).all()
    # without the PRM's part (process_weight 0) the advantages are plain GAE over the terminal outcome
    trainer.cfg.process.process_weight = 0.0
    plain = trainer.signal(records, 0.0).advantages
    outcome_only, _ = gae_advantages(terminal_rewards(outcome, mask), values, mask.double(), 1.0, 0.95)
    assert torch.allclose(plain[ended], outcome_only[ended], atol=1e-9)
    assert not torch.allclose(plain[ended], signal.advantages[ended])
    trainer.cfg.process.process_weight = 1.0
    trainer.train()  # the critic regresses on returns that carry the step rewards; the run ends cleanly
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["value_loss"]) for r in rows)
    assert (tmp_path / "run" / "final").is_dir()
