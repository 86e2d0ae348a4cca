"""Off-support tokens (seed 003 s.8.2): a sampled token that the current policy's sampling distribution gives
probability 0 (top-k/top-p cut it) is detected, counted per step, and handled by ``loss.off_support`` instead of
silently entering the loss with ratio 0."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from veriloop.algorithms import sampling_logprobs
from veriloop.config import build_config
from veriloop.training.config import TrainConfig
from veriloop.training.loop.logprobs import can_leave_support, off_support_tokens
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)


def test_the_seeds_top_p_example_leaves_token_3_outside_the_support():
    # p = [0.6, 0.3, 0.1], T = 2: [0.4727, 0.3343, 0.1930]; top-p 0.8 keeps the first two (0.8070), renormalised
    # [0.5858, 0.4142, 0]: token 2's log-prob is -0.8814, token 3 is outside the behaviour support
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    lp = sampling_logprobs(logits, temperature=2.0, top_p=0.8)
    assert lp[0, 1].item() == pytest.approx(-0.8814, abs=1e-4)
    assert lp[0, 0].exp().item() == pytest.approx(0.5858, abs=1e-4)
    ids = torch.tensor([[0, 1, 2]])
    token_lp = lp.expand(3, 3).gather(1, ids.T).T  # [1, 3]: the log-prob of each token
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    assert off_support_tokens(token_lp, mask).tolist() == [[False, False, True]]
    assert off_support_tokens(token_lp, torch.tensor([[1.0, 1.0, 0.0]])).tolist() == [[False, False, False]]


@pytest.mark.parametrize(
    "top_k, top_p, min_new_tokens, temperature, distribution, expected",
    [
        (0, 1.0, 0, 1.0, "sampling", False),  # the full softmax of finite logits: every token has mass
        (0, 0.9, 0, 1.0, "sampling", True),
        (5, 1.0, 0, 0.7, "sampling", True),
        (0, 1.0, 3, 1.0, "sampling", True),  # the end tokens are banned early
        (0, 0.9, 0, 1.0, "model", False),  # the objective reads the model's own distribution
        (0, 0.9, 0, 1.0, "scaled", False),
        (0, 0.9, 0, 0.0, "sampling", False),  # greedy: no behaviour distribution to leave
    ],
)
def test_which_distributions_can_leave_a_token_outside(
    top_k, top_p, min_new_tokens, temperature, distribution, expected
):
    s = SimpleNamespace(top_k=top_k, top_p=top_p, min_new_tokens=min_new_tokens, temperature=temperature)
    assert can_leave_support(s, distribution) is expected


def _one_step(tmp_path, name, *, rule, algo="grpo", change=None, **over):
    """One GRPO step of the built-in model at top-k 20 whose learning batch ``change`` edits before the update (a
    top-p cut would leave one token at most positions of this confident model: log-prob 0, no gradient)."""
    settings = {
        "algo": algo,
        "run_dir": str(tmp_path / name),
        "steps": 1,
        "seed": 3,
        "checkpoint_every": 100,
        "save_rollouts": False,
        "rollout.prompts_per_step": 2,
        "rollout.group_size": 4,
        "sampling.max_new_tokens": 40,
        "sampling.top_k": 20,
        "kl.beta": 0.0,
        "update.skip_zero_advantage": False,
        "loss.off_support": rule,
        **over,
    }
    trainer = Trainer(build_config(TrainConfig, {}, settings), progress=False)
    real = trainer.learner.update

    def update(lb, kl_beta, gen):
        if change is not None:
            lb = change(trainer, lb)
        return real(lb, kl_beta, gen)

    trainer.learner.update = update
    trainer.grads = []  # each optimizer step's gradients (Adam's first step is about sign(g): compare these)
    real_step = trainer.learner.optimizer_step

    def optimizer_step(stats):
        model = trainer.policy.model
        trainer.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        return real_step(stats)

    trainer.learner.optimizer_step = optimizer_step
    row = trainer.train_step(1)
    return trainer, row


def _push_out_of_support(trainer, lb, row=0, col=0):
    """``lb`` whose completion token (row, col) is replaced by one the learner's top-k distribution cuts, the
    completion's advantages made nonzero."""
    batch = lb.batch
    with torch.no_grad():
        logits = trainer.policy.completion_logits(batch)[row, col].float()
    s = trainer.cfg.sampling
    lp = sampling_logprobs(logits[None], temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)[0]
    outside = torch.isneginf(lp).nonzero().flatten()
    ids = batch.completion_ids.clone()
    ids[row, col] = int(outside[0])
    adv = lb.advantages.clone()
    adv[row] = torch.where(adv[row] == 0, torch.ones_like(adv[row]), adv[row]) * batch.completion_mask[row]
    return lb._replace(batch=batch._replace(completion_ids=ids), advantages=adv)


def _same_gradients(a, b) -> bool:
    if len(a.grads) != len(b.grads):
        return False
    return all(
        ga.keys() == gb.keys() and all(torch.allclose(ga[k], gb[k], rtol=1e-5, atol=1e-9) for k in ga)
        for ga, gb in zip(a.grads, b.grads)
    )


def test_an_off_support_token_is_counted_and_the_loss_stays_finite(tmp_path):
    for rule in ("mask", "filter"):
        _, row = _one_step(tmp_path, rule, rule=rule, change=_push_out_of_support)
        assert row["off_support_tokens"] == 1 and row["off_support_rows"] == 1, row
        tokens = row["update_tokens"] if "update_tokens" in row else None
        assert 0 < row["off_support_token_rate"] < 0.1 and math.isfinite(row["loss"]), (tokens, row)
        assert math.isfinite(row["logprob_mismatch"]) and math.isfinite(row["ratio_max"])
    _, clean = _one_step(tmp_path, "clean", rule="mask")
    assert clean["off_support_tokens"] == 0 and clean["off_support_token_rate"] == 0.0


def test_without_a_cut_no_off_support_metric_is_reported(tmp_path):
    _, row = _one_step(tmp_path, "full", rule="mask", **{"sampling.top_k": 0})
    assert not any(k.startswith("off_support") for k in row), row


def test_filter_drops_the_whole_completion_and_nothing_else(tmp_path):
    """Under filter the update equals one where the off-support completion had no advantage at all (kl.beta 0, no
    entropy bonus: its terms are the objective's alone); the normaliser is the same in both."""

    def silenced(trainer, lb):
        lb = _push_out_of_support(trainer, lb)
        adv = lb.advantages.clone()
        adv[0] = 0.0
        return lb._replace(advantages=adv)

    filtered, _ = _one_step(tmp_path, "filter", rule="filter", change=_push_out_of_support)
    reference, _ = _one_step(tmp_path, "silenced", rule="filter", change=silenced)
    kept, _ = _one_step(tmp_path, "mask", rule="mask", change=_push_out_of_support)
    assert _same_gradients(filtered, reference)
    assert not _same_gradients(filtered, kept)  # mask keeps the completion's other tokens


def test_mask_drops_the_token_from_a_sequence_level_ratio(tmp_path):
    """GSPO's ratio is the whole completion's: under keep (ratio 0) one off-support token would silence the whole
    completion.  Under mask the update equals one where that token is not a loss token at all (a normaliser that
    does not count tokens: seq-mean-token-sum-norm)."""

    def unmasked(trainer, lb):
        lb = _push_out_of_support(trainer, lb)
        mask = lb.batch.completion_mask.clone()
        mask[0, 0] = 0.0
        return lb._replace(batch=lb.batch._replace(completion_mask=mask))

    over = {"algo": "gspo", "loss.aggregation": "seq-mean-token-sum-norm"}
    masked, row = _one_step(tmp_path, "gspo-mask", rule="mask", change=_push_out_of_support, **over)
    reference, _ = _one_step(tmp_path, "gspo-ref", rule="mask", change=unmasked, **over)
    assert row["off_support_tokens"] == 1
    assert _same_gradients(masked, reference)
