"""RLOO, REINFORCE, GAE, process advantages, dual clip, GSPO, DPO, KL control, overlong shaping.

Expected values are worked by hand in the comments.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    aggregate_loss,
    dpo_loss,
    dual_clip_surrogate,
    gae_advantages,
    group_advantages,
    gspo_surrogate,
    length_cost,
    likelihood_objective,
    overlong_penalty,
    pg_objective,
    process_advantages,
    reinforce_advantages,
    rloo_advantages,
    sequence_ratio,
)

S3 = math.sqrt(3)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# ---------------------------------------------------------------- RLOO / REINFORCE


def test_rloo_one_success_in_four():
    # Seeds 4.3: the lone success is centred on the others' mean 0 -> +1; each failure on
    # (0 + 0 + 1)/3 -> -1/3 (instead of -1/4 with the group mean that includes itself).
    assert torch.allclose(rloo_advantages(t([[0, 0, 0, 1]])), t([[-1 / 3, -1 / 3, -1 / 3, 1]]))


@given(
    st.lists(st.lists(st.floats(-3, 3, width=32), min_size=2, max_size=8), min_size=1, max_size=3).filter(
        lambda rows: len({len(r) for r in rows}) == 1
    )
)
@settings(max_examples=60, deadline=None)
def test_rloo_is_g_over_g_minus_1_times_the_centred_reward(rows):
    r = t(rows)
    G = r.shape[1]
    assert torch.allclose(rloo_advantages(r), group_advantages(r, std="none") * G / (G - 1), atol=1e-9)


def test_reinforce_raw_and_batch_baseline():
    r = t([[1, 0], [1, 1]])
    assert torch.equal(reinforce_advantages(r), r)
    # batch mean 0.75: [[0.25, -0.75], [0.25, 0.25]]
    assert torch.allclose(reinforce_advantages(r, baseline="batch"), t([[0.25, -0.75], [0.25, 0.25]]))
    with pytest.raises(ValueError, match="baseline must be one of .*got 'group'"):
        reinforce_advantages(r, baseline="group")


# ---------------------------------------------------------------- GAE


def test_gae_hand_values():
    # rewards [0, 0, 1] (terminal), values [0.5, 0.6, 0.8]:
    # gamma = lambda = 1: deltas 0.6-0.5 = 0.1, 0.8-0.6 = 0.2, 1-0.8 = 0.2 -> A = [0.5, 0.4, 0.2]
    # (= R - V_t), returns [1, 1, 1].
    r, v, m = t([[0, 0, 1]]), t([[0.5, 0.6, 0.8]]), t([[1, 1, 1]])
    adv, ret = gae_advantages(r, v, m, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, t([[0.5, 0.4, 0.2]])) and torch.allclose(ret, t([[1, 1, 1]]))
    # lambda = 0.5: A2 = 0.2, A1 = 0.2 + 0.5*0.2 = 0.3, A0 = 0.1 + 0.5*0.3 = 0.25
    adv, _ = gae_advantages(r, v, m, gamma=1.0, lam=0.5)
    assert torch.allclose(adv, t([[0.25, 0.3, 0.2]]))
    # gamma = 0.9, lambda = 1: deltas 0.9*0.6-0.5 = 0.04, 0.9*0.8-0.6 = 0.12, 0.2;
    # A = [0.04 + 0.9*0.3, 0.12 + 0.9*0.2, 0.2] = [0.31, 0.3, 0.2]; A0 = 0.9^2 * 1 - 0.5.
    adv, _ = gae_advantages(r, v, m, gamma=0.9, lam=1.0)
    assert torch.allclose(adv, t([[0.31, 0.3, 0.2]]))


def gae_loop(r, v, m, gamma, lam):
    """Textbook loop, one sequence at a time (the cleanrl check: scan == loop)."""
    out = torch.zeros_like(r)
    for i in range(r.shape[0]):
        n = int(m[i].sum())
        last = 0.0
        for step in reversed(range(n)):
            next_v = v[i, step + 1] if step + 1 < n else 0.0
            delta = r[i, step] + gamma * next_v - v[i, step]
            last = delta + gamma * lam * last
            out[i, step] = last
    return out


@given(st.integers(0, 10**6), st.floats(0.5, 1.0), st.floats(0.0, 1.0))
@settings(max_examples=40, deadline=None)
def test_gae_vectorised_equals_loop_and_ignores_masked_values(seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(4, 7, generator=g, dtype=torch.float64), torch.randn(4, 7, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, 8, (4,), generator=g)
    m = (torch.arange(7)[None, :] < lengths[:, None]).double()
    adv, _ = gae_advantages(r * m, v, m, gamma, lam)
    assert torch.allclose(adv, gae_loop(r * m, v, m, gamma, lam), atol=1e-10)
    noisy_v = torch.where(m.bool(), v, torch.full_like(v, 1e6))
    assert torch.allclose(gae_advantages(r * m, noisy_v, m, gamma, lam)[0], adv)


# ---------------------------------------------------------------- process supervision


def test_process_advantages_hand_values():
    # One group, two completions of 4 tokens; steps end at tokens 1 and 3.
    # Step rewards: completion 1 [1, 1], completion 2 [1, 0]. Over the group's four step
    # rewards: mean 3/4, population std sqrt(3)/4 -> a 1 becomes 1/sqrt(3), the 0 becomes -sqrt(3).
    # Token advantage = sum of normalised rewards of its step and later steps:
    # completion 1: tokens 0-1: 2/sqrt(3), tokens 2-3: 1/sqrt(3);
    # completion 2: tokens 0-1: 1/sqrt(3) - sqrt(3), tokens 2-3: -sqrt(3).
    rewards = t([[[0, 1, 0, 1], [0, 1, 0, 0]]])
    ends = torch.tensor([[[0, 1, 0, 1], [0, 1, 0, 1]]], dtype=torch.bool)
    mask = torch.ones(1, 2, 4)
    adv = process_advantages(rewards, ends, mask, eps=0.0)
    expected = t([[[2 / S3, 2 / S3, 1 / S3, 1 / S3], [1 / S3 - S3, 1 / S3 - S3, -S3, -S3]]])
    assert torch.allclose(adv, expected)


def test_process_advantages_padding_and_single_step():
    # A completion whose only step ends at token 2, padded to 4: tokens 0-2 get the step's
    # normalised reward, the padding 0.  Two completions [1] and [0] -> +1 and -1.
    rewards = t([[[0, 0, 1, 0], [0, 0, 0, 0]]])
    ends = torch.tensor([[[0, 0, 1, 0], [0, 0, 1, 0]]], dtype=torch.bool)
    mask = t([[[1, 1, 1, 0], [1, 1, 1, 0]]])
    adv = process_advantages(rewards, ends, mask, eps=0.0)
    assert torch.allclose(adv, t([[[1, 1, 1, 0], [-1, -1, -1, 0]]]))


# ---------------------------------------------------------------- policy objectives


@pytest.mark.parametrize(
    "adv, ratio, expected",
    [
        (-2.0, 5.0, -6.0),  # min(-10, -2.4) = -10, then the dual clip max(-10, 3*-2 = -6) = -6
        (-2.0, 2.0, -4.0),  # min(-4, -2.4) = -4 is above -6: unchanged
        (2.0, 5.0, 2.4),  # positive advantages are never dual-clipped: min(10, 2.4)
        (-2.0, 0.5, -1.6),  # the usual low clip: min(-1, -1.6)
    ],
)
def test_dual_clip(adv, ratio, expected):
    assert dual_clip_surrogate(t([ratio]), t([adv]), 0.2, 0.2, 3.0).item() == pytest.approx(expected)


def test_gspo_uses_the_length_normalised_sequence_ratio():
    # log-ratio per token [0.1, 0.3] -> mean 0.2 -> s = e^0.2 = 1.2214; A = 1, widths 0.2:
    # min(1.2214, 1.2) = 1.2 on both tokens.  Masking the second token: s = e^0.1 = 1.1052 < 1.2.
    lp, beh, adv = t([[0.1, 0.3]]), t([[0.0, 0.0]]), t([1.0])
    out = gspo_surrogate(lp, beh, adv, torch.ones(1, 2), 0.2, 0.2)
    assert torch.allclose(out, t([[1.2, 1.2]]))
    masked = gspo_surrogate(lp, beh, adv, t([[1, 0]]), 0.2, 0.2)
    assert torch.allclose(masked, t([[math.exp(0.1)] * 2]))
    assert sequence_ratio(lp, beh, torch.ones(1, 2)).item() == pytest.approx(math.exp(0.2))


def test_gspo_gradient_spreads_evenly_over_tokens():
    # d s / d log pi_t = s / |y|: with s = 1 (ratio 1) and A = 1 unclipped, each of 4 tokens gets 1/4.
    lp = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    out = gspo_surrogate(lp, torch.zeros(1, 4, dtype=torch.float64), t([1.0]), torch.ones(1, 4), 0.2, 0.2)
    aggregate_loss(out, torch.ones(1, 4), "seq-mean-token-mean").backward()
    assert torch.allclose(lp.grad, t([[0.25] * 4]))


def test_pg_and_likelihood_objectives_give_the_coefficient_as_gradient():
    lp = torch.log(t([0.2, 0.5])).requires_grad_()
    behaviour = lp.detach().clone()
    pg_objective(torch.exp(lp - behaviour), t([2.0, -1.0])).sum().backward()
    assert torch.allclose(lp.grad, t([2.0, -1.0]))  # at rho = 1, d(rho A)/d log pi = A
    lp.grad = None
    likelihood_objective(lp, t([1.0, 0.0])).sum().backward()
    assert torch.allclose(lp.grad, t([1.0, 0.0]))  # RFT: only the accepted completion is learned


def test_dpo_hand_values():
    # chosen -1 (ref -1.5), rejected -2 (ref -1.5), beta 0.1: margin (0.5) - (-0.5) = 1;
    # loss = -log sigmoid(0.1) = log(1 + e^-0.1) = 0.644397; d loss / d chosen = -0.1 sigmoid(-0.1) = -0.047502.
    chosen = t([-1.0]).requires_grad_()
    loss = dpo_loss(chosen, t([-2.0]), t([-1.5]), t([-1.5]), beta=0.1)
    assert loss.item() == pytest.approx(0.644397, abs=1e-6)
    loss.sum().backward()
    assert chosen.grad.item() == pytest.approx(-0.047502, abs=1e-6)
    # Already well separated: the gradient coefficient (beta sigma'(.)) shrinks.
    far = t([-1.0]).requires_grad_()
    dpo_loss(far, t([-60.0]), t([-1.5]), t([-1.5]), beta=0.1).sum().backward()
    assert abs(far.grad.item()) < 0.001


# ---------------------------------------------------------------- KL control and shaping


def test_kl_controllers():
    assert FixedKLController(0.05).update(10.0, 256) == 0.05
    # beta 0.1, target 6, horizon 10000, observed 12: error clip(12/6 - 1) = 0.2;
    # beta * (1 + 0.2 * 256 / 10000) = 0.100512.  Observed 3: error -0.5 -> -0.2 -> 0.100512 * 0.99488.
    c = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    assert c.update(12.0, 256) == pytest.approx(0.100512)
    assert c.update(3.0, 256) == pytest.approx(0.100512 * (1 - 0.2 * 256 / 10000))


def test_overlong_penalty():
    # L_max 20, buffer 5: no penalty up to 15, then (15 - |y|)/5 down to -1 at 20, -1 beyond.
    out = overlong_penalty(torch.tensor([10, 15, 17, 20, 21]), max_len=20, buffer=5)
    assert torch.allclose(out, t([0.0, 0.0, -0.4, -1.0, -1.0]))
    with pytest.raises(ValueError, match="overlong buffer must be in \\(0, max_len=20\\], got 0"):
        overlong_penalty(torch.tensor([1]), max_len=20, buffer=0)


def test_length_cost_is_the_seeds_worked_example():
    # seed 003: lambda 0.1 per 1,000 tokens; two right answers of 1,000 and 3,000 tokens net 0.9 and 0.7 ...
    cost = length_cost(torch.tensor([1000, 3000]), per_thousand=0.1)
    assert torch.allclose(cost, t([-0.1, -0.3]))
    assert torch.allclose(1.0 + cost, t([0.9, 0.7]))
    # ... but with success rates 0.6 and 0.95 (a wrong answer earns 0, the tokens are paid either way) the
    # expected net rewards are 0.5 and 0.65: the cost alone does not make the short form win
    assert torch.allclose(t([0.6, 0.95]) + cost, t([0.5, 0.65]))
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="per 1,000 tokens"):
            length_cost(torch.tensor([1]), per_thousand=bad)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 100_000), min_size=1, max_size=8), st.floats(0, 10))
def test_length_cost_is_linear_in_tokens_and_never_positive(lengths, lam):
    cost = length_cost(torch.tensor(lengths), lam)
    assert (cost <= 0).all()
    assert torch.allclose(cost, torch.tensor([-lam * n / 1000 for n in lengths], dtype=torch.float64))
