"""The sampler's inverse-CDF draw: the token whose cumulative weight first exceeds u x total, searched in two
levels above CDF_BLOCK x 2 tokens (block sums, then one block), never a token of weight 0; and the draw without
top-k or top-p (no log-softmax) gives the tokens and log-probs of the log-softmax path."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.algorithms.sampling import sampling_logprobs
from veriloop.rollout.sampler import CDF_BLOCK, _draw, _draw_full, _inverse_cdf


def reference_draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = weights.double().cumsum(-1)
    return torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None], right=True).squeeze(1)


def random_weights(rows, vocab, zero_share, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    weights = (logits - logits.amax(-1, keepdim=True)).exp()
    zero = torch.rand(rows, vocab, generator=g) < zero_share
    zero[torch.arange(rows), torch.randint(0, vocab, (rows,), generator=g)] = False  # one token always stays
    return weights.masked_fill(zero, 0.0), torch.rand(rows, generator=g)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 5),
    vocab=st.one_of(st.integers(1, 64), st.integers(2 * CDF_BLOCK + 1, 6 * CDF_BLOCK)),
    zero_share=st.sampled_from([0.0, 0.5, 0.99]),
    scale=st.sampled_from([0.01, 1.0, 8.0]),
    seed=st.integers(0, 10_000),
)
def test_the_draw_is_the_float64_inverse_cdf_and_never_a_zero_weight_token(rows, vocab, zero_share, scale, seed):
    weights, u = random_weights(rows, vocab, zero_share, scale, seed)
    token, total = _inverse_cdf(weights, u)
    assert torch.all(weights.gather(1, token[:, None]).squeeze(1) > 0)
    torch.testing.assert_close(total.double(), weights.double().sum(-1), rtol=1e-5, atol=0)
    want = reference_draw(weights, u).clamp(max=vocab - 1)
    cdf = weights.double().cumsum(-1)
    target = u.double() * cdf[:, -1]
    for r in range(rows):  # equal, or a neighbour across a boundary closer than float32 rounding
        if token[r] != want[r]:
            lo, hi = sorted((int(token[r]), int(want[r])))
            assert abs(float(cdf[r, lo]) - float(target[r])) <= 1e-6 * float(cdf[r, -1])
    if vocab > 2 * CDF_BLOCK:
        assert torch.equal(token, want)  # float64 running sums: the exact inverse CDF


def test_the_ends_of_the_unit_interval_give_the_first_and_last_positive_tokens():
    for vocab in (50, 5 * CDF_BLOCK + 7):
        weights = torch.zeros(2, vocab)
        weights[:, 3], weights[:, vocab - 5] = 1.0, 2.0
        token, _ = _inverse_cdf(weights, torch.tensor([0.0, 1.0 - 1e-9]))
        assert token.tolist() == [3, vocab - 5]


@settings(max_examples=20, deadline=None)
@given(
    vocab=st.sampled_from([7, 300, 3 * CDF_BLOCK + 5]),
    temperature=st.sampled_from([1.0, 0.6]),
    seed=st.integers(0, 999),
)
def test_the_full_distribution_draw_agrees_with_the_log_softmax_path(vocab, temperature, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, vocab, generator=g) * 2
    u = torch.rand(6, generator=g)
    token, lp = _draw_full(logits, temperature, u)
    full = sampling_logprobs(logits, temperature)
    assert torch.equal(token, _draw(full, u))
    torch.testing.assert_close(lp, full.gather(1, token[:, None]).squeeze(1), atol=1e-5, rtol=0)
