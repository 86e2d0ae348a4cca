"""The static-cache decoder reproduces each supported architecture's own forward pass."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from veriloop.rollout import static_decode
from veriloop.rollout.sampler import SamplingParams, generate

ARCHS = {
    "llama": dict(),
    "qwen2": dict(),  # q/k/v projections with bias
    "qwen3": dict(head_dim=16),  # per-head q/k norms
    "mistral": dict(sliding_window=None),
}


def tiny(model_type, **extra):
    cfg = AutoConfig.for_model(
        model_type,
        vocab_size=50,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **{**ARCHS[model_type], **extra},
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


PROMPTS = [[1, 5, 6, 7], [1, 9, 10, 11, 12, 13, 14], [1, 20]]  # different lengths: left padding matters


@pytest.mark.parametrize("model_type", list(ARCHS))
def test_engines_agree_token_for_token(model_type):
    model = tiny(model_type)
    assert static_decode.supports(model, 64)
    params = SamplingParams(temperature=1.0, max_new_tokens=20)
    runs = {
        e: generate(
            model, PROMPTS, params, eos_id=3, pad_id=0, generator=torch.Generator().manual_seed(5), n=3, engine=e
        )
        for e in ("hf", "static")
    }
    assert runs["hf"].completion_ids == runs["static"].completion_ids
    for a, b in zip(runs["hf"].logprobs, runs["static"].logprobs):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)


@pytest.mark.parametrize("model_type", list(ARCHS))
def test_decode_logits_equal_full_forward(model_type):
    model = tiny(model_type)
    seq = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        full = model(seq).logits[0].float()  # [T, V]
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=seq[:, :3], cache=cache, use_cache=True)
    dec = static_decode.StaticDecoder(model, 1, 16, cache, torch.ones(1, 3, dtype=torch.long))
    for t in range(3, seq.shape[1]):
        logits = dec.step(seq[:, t], torch.tensor([t]))
        assert torch.allclose(logits[0], full[t], atol=1e-4), f"position {t}"


def test_unsupported_models_fall_back():
    model = tiny("mistral", sliding_window=8)
    assert not static_decode.supports(model, 64)
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", vocab_size=50, n_embd=32, n_layer=1, n_head=2))
    assert not static_decode.supports(gpt2, 64)
    out = generate(gpt2.eval(), PROMPTS, SamplingParams(temperature=0, max_new_tokens=5), eos_id=3, pad_id=0)
    assert len(out.completion_ids) == 3
    with pytest.raises(ValueError, match="engine"):
        generate(gpt2, PROMPTS, SamplingParams(temperature=0), eos_id=3, pad_id=0, engine="vllm")
