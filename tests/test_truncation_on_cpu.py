"""Completions cut by the token budget in training (finish ``length``): by default left out of the loss, of their
group's statistics, of DPO's pairs and of the loss normaliser (seeds 003 section 1.1: the budget's cut is not the
model's ending); penalised only where the overlong ramp is asked for, and then learned from."""

import json
import math

import pytest
import torch
from test_exact_mode_on_cpu import FOUR, LOGITS4, REWARDS4, group_records, make_trainer

from veriloop.cli import main
from veriloop.config import ConfigError, build_config
from veriloop.registry import ESTIMATORS
from veriloop.rollout.records import RecordStore
from veriloop.training.config import TrainConfig
from veriloop.training.loop.estimators import EstimatorInput
from veriloop.training.loop.signals import check_signal_options, ended_advantages, kept_share, without_cut

S2 = math.sqrt(2)


def advantages(estimator, rewards, ended, **over):
    cfg = build_config(TrainConfig, {}, {"advantage.estimator": estimator, **over})
    r = torch.tensor(rewards, dtype=torch.float64)
    x = EstimatorInput(r, torch.ones(r.numel(), 2), None, None)
    return ended_advantages(ESTIMATORS.get(estimator), x, cfg, torch.tensor(ended))[:, 0]


def test_the_default_keeps_cut_completions_apart():
    assert build_config(TrainConfig, {}, {}).update.mask_truncated is True


def test_a_cut_completion_is_no_point_of_comparison_in_its_group():
    # Rewards [1, 0, 1, 0], the last one cut.  GRPO over the three that ended: mean 2/3, population std
    # sqrt(((1/3)^2 * 2 + (2/3)^2) / 3) = sqrt(2)/3, so (1/3)/(sqrt2/3) = 1/sqrt2 and (-2/3)/(sqrt2/3) = -sqrt2;
    # the cut one 0.  Counted with its 0, the group would give [1, -1, 1, -1]: the cut raises its neighbours.
    got = advantages("grpo", [[1.0, 0.0, 1.0, 0.0]], [[True, True, True, False]])
    assert got.tolist() == pytest.approx([1 / S2, -S2, 1 / S2, 0.0], abs=1e-5)
    whole = advantages("grpo", [[1.0, 0.0, 1.0, 0.0]], [[True, True, True, True]])
    assert whole.tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)


def test_leave_one_out_over_the_ended_and_a_group_with_one_ended_member_gets_nothing():
    # Group 1 [1, 0, 0 | cut]: r_i - mean of the other ended: 1 - 0 = 1, 0 - 1/2, 0 - 1/2.  Group 2: one ended member,
    # nothing to compare it with (rloo compares >= 2), so 0.  Group 3 ended whole: [1, 1, 0, 0] -> 1 - 1/3 = 2/3 ...
    got = advantages(
        "rloo",
        [[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]],
        [[True, True, True, False], [True, False, False, False], [True] * 4],
    )
    assert got.tolist() == pytest.approx([1, -0.5, -0.5, 0, 0, 0, 0, 0, 2 / 3, 2 / 3, -2 / 3, -2 / 3], abs=1e-12)


def test_the_batch_baseline_is_the_mean_of_every_ended_completion():
    # reinforce, baseline batch: rewards [[1, 0], [1, 1]], the last cut: mean of 1, 0, 1 = 2/3.
    got = advantages(
        "reinforce",
        [[1.0, 0.0], [1.0, 1.0]],
        [[True, True], [True, False]],
        **{"algo": "reinforce", "advantage.baseline": "batch"},
    )
    assert got.tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.0], abs=1e-12)


def test_nothing_changes_when_every_completion_ended():
    cfg = build_config(TrainConfig, {}, {})
    x = EstimatorInput(
        torch.tensor([[0.3, 1.0, 0.0], [2.0, 2.0, 1.0]], dtype=torch.float64), torch.ones(6, 4), None, None
    )
    est = ESTIMATORS.get("grpo")
    assert torch.equal(ended_advantages(est, x, cfg, torch.ones(2, 3, dtype=torch.bool)), est(x, cfg))


def test_the_loss_is_the_mean_over_the_ended_completions():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    ended = torch.tensor([0, 1, 2])  # row 3 cut
    assert kept_share(mask, torch.tensor([0, 2]), "seq-mean-token-mean", ended) == pytest.approx(2 / 3)
    assert kept_share(mask, torch.tensor([0, 2]), "token-mean", ended) == pytest.approx(5 / 6)
    assert kept_share(mask, torch.tensor([0, 2]), "token-mean") == pytest.approx(5 / 9)  # all rows counted


def test_a_dpo_pair_with_a_cut_member_is_dropped():
    rows, pairs = torch.tensor([0, 1, 2, 3]), torch.tensor([[0, 1], [2, 3]])
    got_rows, got_pairs = without_cut(rows, pairs, torch.tensor([True, True, False, True]))
    assert got_rows.tolist() == [0, 1] and got_pairs.tolist() == [[0, 1]]
    assert without_cut(rows, None, torch.tensor([True, False, True, True]))[0].tolist() == [0, 2, 3]


def test_the_overlong_ramp_and_the_mask_together_are_refused():
    cfg = build_config(TrainConfig, {}, {"rollout.overlong_buffer": 16, "update.mask_truncated": False})
    check_signal_options(cfg)  # penalised and learned from: coherent
    cfg.update.mask_truncated = True
    with pytest.raises(ConfigError, match=r"rollout.overlong_buffer=16 penalises .*update.mask_truncated.*choose one"):
        check_signal_options(cfg)


@pytest.mark.timeout(120)
def test_the_cli_names_the_contradiction_without_a_traceback(tmp_path, capsys):
    argv = ["train", "--steps", "1", "--rollout.overlong_buffer", "8", "--run_dir", str(tmp_path / "r"), "--quiet"]
    assert main(argv) == 2
    assert "update.mask_truncated" in capsys.readouterr().err


@pytest.mark.parametrize(
    "over, message",
    [
        ({"algo": "sft", "kl.beta": 0.1}, "task-teacher: the task's traces were sampled by no policy"),
        ({"algo": "online_rft", "kl.beta": 0.1}, "loss.policy_loss=likelihood: its log-probs are the model's"),
    ],
)
def test_the_importance_weighted_kl_needs_behaviour_logprobs_of_the_sampling_distribution(over, message):
    with pytest.raises(ConfigError, match=message):  # refused when the configuration is built
        build_config(TrainConfig, {}, {**over, "kl.importance_weighted": True})


@pytest.mark.timeout(120)
def test_the_trainer_leaves_a_cut_completion_out_of_the_group_and_the_update(tmp_path):
    # Exact mode, GRPO, rewards [1, 0, 1, 0] with the last completion cut: the advantages are those of the three
    # that ended (worked above), the cut row is not in the learning batch and the metric counts it.
    trainer, policy = make_trainer(tmp_path, FOUR, REWARDS4, LOGITS4, G=4, algo="grpo")
    records = group_records(policy, [0, 1, 2, 3])
    records[3].finish_reason = "length"
    trainer.score(records)
    signal = trainer.learning_signal(records)
    assert signal.advantages[:, 0].tolist() == pytest.approx([1 / S2, -S2, 1 / S2, 0.0], abs=1e-5)
    assert [r.completion for r in signal.batch.records] == FOUR[:3]
    assert signal.batch.kept_share == 1.0 and signal.stats["truncated_left_out"] == 1


@pytest.mark.timeout(120)
def test_dpo_pairs_only_completions_that_ended(tmp_path):
    # Pairs zip accepted with rejected: (0, 1) and (2, 3).  Completion 3 cut: only (0, 1) is left.
    trainer, policy = make_trainer(tmp_path, FOUR, REWARDS4, LOGITS4, G=4, algo="dpo")
    records = group_records(policy, [0, 1, 2, 3])
    records[3].finish_reason = "length"
    trainer.score(records)
    lb = trainer.learning_signal(records).batch
    assert [r.completion for r in lb.records] == FOUR[:2] and lb.pairs.tolist() == [[0, 1]]


@pytest.mark.timeout(300)
def test_by_default_a_run_reports_its_truncation_and_learns_from_the_ended_completions(tiny_policy, tmp_path):
    from veriloop.training.trainer import Trainer

    cfg = build_config(
        TrainConfig,
        {},
        {
            "policy": tiny_policy,
            "run_dir": str(tmp_path),
            "steps": 2,
            "verifier": "test-digit-share",
            "rollout.prompts_per_step": 4,
            "rollout.group_size": 4,
            "update.skip_zero_advantage": False,
            "sampling.max_new_tokens": 40,
            "task.arithmetic.heldout_size": 10,
        },
    )
    Trainer(cfg, progress=False).train()
    store = RecordStore(tmp_path / "rollouts")
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        records = store.read(row["step"])
        cut = sum(r.truncated for r in records)
        assert 0 < cut < len(records)  # both kinds present: the test can fail
        assert row["truncation_rate"] == cut / len(records)
        assert row["truncated_left_out"] == cut and row["update_records"] == len(records) - cut
