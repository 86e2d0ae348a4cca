"""The fused LM-head kernel (HeadLogprobs): its numbers and gradients are those of autograd through
log_softmax and the entropy, checked by gradcheck in float64 and against the generic chunked path on a model."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.models.batch import build_policy_batch
from veriloop.models.device import Placement
from veriloop.models.loading import load_policy
from veriloop.models.tiny import TinyModelConfig
from veriloop.rollout.sampler import SamplingParams
from veriloop.training.loop.logprobs import HeadLogprobs, completion_logprobs, fused_distribution


def reference(h, weight, bias, ids, temperature):
    full = torch.log_softmax(torch.nn.functional.linear(h, weight, bias) / temperature, dim=-1)
    return full.gather(-1, ids[:, None]).squeeze(-1), -(full.exp() * full).sum(-1)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 6),
    vocab=st.integers(2, 40),
    temperature=st.sampled_from([1.0, 0.7, 1.3]),
    with_bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_values_and_gradients_match_autograd(rows, vocab, temperature, with_bias, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, 5, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(vocab, generator=g, dtype=torch.float64, requires_grad=True) if with_bias else None
    ids = torch.randint(0, vocab, (rows,), generator=g)
    lp, ent = HeadLogprobs.apply(h, w, b, ids, temperature, True)
    want_lp, want_ent = reference(h, w, b, ids, temperature)
    torch.testing.assert_close(lp, want_lp)
    torch.testing.assert_close(ent, want_ent)
    inputs = (h, w) + ((b,) if with_bias else ())

    def both(*xs):
        return HeadLogprobs.apply(xs[0], xs[1], xs[2] if with_bias else None, ids, temperature, True)

    assert torch.autograd.gradcheck(both, inputs)
    only_lp = lambda *xs: HeadLogprobs.apply(xs[0], xs[1], xs[2] if with_bias else None, ids, temperature, False)[0]  # noqa: E731
    assert torch.autograd.gradcheck(only_lp, inputs)


@pytest.mark.parametrize(
    "sampling,distribution,fused",
    [
        (SamplingParams(temperature=1.0), "sampling", True),
        (SamplingParams(temperature=0.7), "scaled", True),
        (SamplingParams(temperature=1.0), "model", True),
        (SamplingParams(temperature=0.7), "model", False),  # the model's distribution is not the scaled one
        (SamplingParams(temperature=1.0, top_p=0.9), "sampling", False),
        (SamplingParams(temperature=1.0, top_k=5), "sampling", False),
        (SamplingParams(temperature=1.0, min_new_tokens=3), "sampling", False),
    ],
)
def test_which_distributions_take_the_fused_kernel(sampling, distribution, fused):
    assert fused_distribution(sampling, distribution) is fused


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_on_a_model_the_fused_path_gives_the_generic_chunked_numbers_and_gradients(temperature, monkeypatch):
    config = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)
    policy = load_policy("builtin:init", seed=0, init_config=config, placement=Placement(torch.device("cpu")))
    g = torch.Generator().manual_seed(1)
    V = len(policy.tokenizer)
    prompts = [torch.randint(4, V, (int(n),), generator=g).tolist() for n in (3, 7, 5, 2)]
    comps = [torch.randint(4, V, (int(n),), generator=g).tolist() for n in (9, 4, 11, 1)]
    batch = build_policy_batch(prompts, comps, policy.pad_id)
    mask = batch.completion_mask.bool()
    sampling = SamplingParams(temperature=temperature)
    calls = []
    real_apply = HeadLogprobs.apply
    monkeypatch.setattr(HeadLogprobs, "apply", lambda *a: calls.append(1) or real_apply(*a))
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(type(policy), "plain_head", lambda self: None)
        policy.model.zero_grad()
        tl = completion_logprobs(policy, batch, sampling, "sampling", chunk_tokens=4)
        (tl.sampled.sum() + 0.3 * tl.scaled.sum() + 0.1 * (tl.entropy * mask).sum()).backward()
        results.append((tl, {n: p.grad.clone() for n, p in policy.model.named_parameters()}))
    assert calls, "the fused kernel was not taken"
    (fused_tl, fused_grads), (generic_tl, generic_grads) = results
    for a, b in zip(fused_tl[:3], generic_tl[:3]):
        torch.testing.assert_close(a[mask], b[mask], atol=1e-6, rtol=1e-5)
        assert torch.all(a[~mask] == 0)
    for name, grad in generic_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-6, rtol=1e-5)
