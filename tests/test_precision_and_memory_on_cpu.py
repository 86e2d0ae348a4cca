"""Device, precision and memory: the chunked LM head, token-budget micro-batches, gradient checkpointing and
float32 master weights compute what the plain float32 path computes."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.models.batch import build_policy_batch, token_budget_split
from veriloop.models.device import Placement, resolve_device, resolve_dtype
from veriloop.models.loading import load_policy
from veriloop.models.tiny import TinyModelConfig
from veriloop.rollout.sampler import SamplingParams
from veriloop.training.config import TrainConfig
from veriloop.training.loop.learner import enable_gradient_checkpointing
from veriloop.training.loop.logprobs import completion_logprobs
from veriloop.training.loop.optim import MasterWeightsOptimizer, OptimConfig, build_optimizer, clip_grad_norm
from veriloop.training.trainer import Trainer

SMALL = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)


def small_policy(dtype=torch.float32, seed=0):
    return load_policy("builtin:init", seed=seed, init_config=SMALL, placement=Placement(torch.device("cpu"), dtype))


def random_batch(policy, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    V = len(policy.tokenizer)

    def draw(low, high):
        return torch.randint(4, V, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()

    prompts, comps = [draw(2, 9) for _ in range(n)], [draw(1, 12) for _ in range(n)]
    return build_policy_batch(prompts, comps, policy.pad_id)


def test_device_and_dtype_names_are_checked():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("bfloat16") == torch.bfloat16
    with pytest.raises(InputError, match="dtype must be one of"):
        resolve_dtype("float8")
    with pytest.raises(InputError, match="device must be"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="sees no CUDA device"):
            resolve_device("cuda:0")
        assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        build_config(TrainConfig, {}, {"dtype": "fp8"})


TOP_K_P = SamplingParams(temperature=0.8, top_k=5, top_p=0.9)


@pytest.mark.parametrize(
    "sampling",
    [SamplingParams(temperature=0.7), TOP_K_P, SamplingParams(temperature=0.7, min_new_tokens=5)],
    ids=["full", "top-k-top-p", "min-new-tokens"],
)
@pytest.mark.parametrize("distribution", ["sampling", "model"])
def test_the_chunked_lm_head_computes_the_plain_paths_numbers_and_gradients(sampling, distribution):
    policy, batch = small_policy(), random_batch(small_policy())
    mask = batch.completion_mask.bool()
    results = {}
    for chunk in (0, 3):  # 0: one chunk, the plain path; 3: many chunks, recomputed in the backward pass
        policy.model.zero_grad()
        tl = completion_logprobs(policy, batch, sampling, distribution, chunk_tokens=chunk)
        loss = (tl.sampled * mask).sum() + 0.5 * (tl.scaled * mask).sum() + 0.1 * (tl.entropy * mask).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in policy.model.named_parameters()}
        results[chunk] = (tl, grads)
    (plain, g0), (chunked, g3) = results[0], results[3]
    for a, b in zip(plain[:3], chunked[:3]):
        torch.testing.assert_close(a[mask], b[mask], atol=1e-6, rtol=1e-6)
        assert torch.all(b[~mask] == 0)
    for name in g0:
        torch.testing.assert_close(g0[name], g3[name], atol=1e-6, rtol=1e-5)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(1, 8), st.integers(0, 120))
def test_token_budget_micro_batches_cover_every_row_once_within_the_budget(lengths, max_rows, max_tokens):
    rows = torch.arange(len(lengths)).flip(0)  # any order: kept as given
    pieces = token_budget_split(torch.tensor(lengths), rows, max_rows, max_tokens)
    assert torch.equal(torch.cat(pieces), rows)
    for piece in pieces:
        assert 1 <= len(piece) <= max_rows
        longest = max(lengths[i] for i in piece.tolist())
        assert max_tokens == 0 or len(piece) == 1 or len(piece) * longest <= max_tokens


def tiny_run(tmp_path, name, **over):
    base = {
        "policy": "builtin:init",
        "model.hidden_size": 32,
        "model.intermediate_size": 64,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "run_dir": str(tmp_path / name),
        "steps": 1,
        "rollout.prompts_per_step": 4,
        "rollout.group_size": 4,
        "sampling.max_new_tokens": 10,
        "kl.beta": 0.05,
        "update.micro_batch_size": 16,
        "optim.lr": 1e-3,
        "save_rollouts": False,
        "device": "cpu",
        "verifier": "test-digit-share",
    }
    return Trainer(build_config(TrainConfig, {}, {**base, **over}), progress=False)


def after_one_step(tmp_path, name, **over):
    trainer = tiny_run(tmp_path, name, **over)
    row = trainer.train()
    return trainer.policy.model.state_dict(), row


@pytest.mark.parametrize(
    "over",
    [
        {"update.max_tokens_per_micro_batch": 40},
        {"update.gradient_checkpointing": True},
        {"update.logprob_chunk_tokens": 7},
    ],
    ids=["token-budget", "gradient-checkpointing", "chunked-head"],
)
def test_memory_options_change_no_update(tmp_path, over):
    want, want_stats = after_one_step(tmp_path, "plain")
    got, got_stats = after_one_step(tmp_path, "option", **over)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=2e-6, rtol=1e-5)
    assert got_stats["loss"] == pytest.approx(want_stats["loss"], rel=1e-5, abs=1e-7)


def test_gradient_checkpointing_recomputes_each_layer_in_the_backward_pass():
    calls = {}
    for checkpointing in (False, True):
        policy = small_policy()
        layers = enable_gradient_checkpointing(policy.model) if checkpointing else []
        policy.model.eval()
        for layer in layers:
            layer.training = True  # as Learner.update: the layer alone, its dropout stays off
        calls[checkpointing] = 0

        def count(*_, key=checkpointing):
            calls[key] += 1

        policy.model.model.layers[0].self_attn.register_forward_hook(count)
        tl = completion_logprobs(policy, random_batch(policy), SamplingParams(temperature=1.0), "model")
        tl.sampled.sum().backward()
    assert calls == {False: 1, True: 2}


def test_low_precision_parameters_train_through_float32_masters():
    policy = small_policy(torch.bfloat16)
    opt = build_optimizer(policy.model, OptimConfig(lr=1e-3))
    assert isinstance(opt, MasterWeightsOptimizer) and opt.loss_scale == 1.0
    assert all(m.dtype == torch.float32 for m in opt.masters)
    before = [m.detach().clone() for m in opt.masters]
    batch = random_batch(policy)
    tl = completion_logprobs(policy, batch, SamplingParams(temperature=1.0), "model")
    assert tl.sampled.dtype == torch.float32  # the log-softmax runs in float32 whatever the weights
    (-(tl.sampled * batch.completion_mask).sum()).backward()
    norm = clip_grad_norm(policy.model, 1.0, opt)
    assert norm > 0 and all(m.grad.dtype == torch.float32 for m in opt.masters)
    assert opt.step()
    state = opt.inner.state_dict()["state"]
    assert all(v["exp_avg"].dtype == torch.float32 for v in state.values())
    moved = [float((m.detach() - b).abs().max()) for m, b in zip(opt.masters, before)]
    assert max(moved) > 0
    for p, m in zip(opt.params, opt.masters):  # the bfloat16 parameters hold the masters, rounded
        assert p.dtype == torch.bfloat16 and torch.equal(p, m.to(torch.bfloat16))
    # an update far below bfloat16's resolution still moves the masters (it would vanish in the parameter)
    opt.zero_grad()
    for p in opt.params:
        p.grad = torch.full_like(p, 1e-3)
    opt.param_groups[0]["lr"] = 1e-6
    m0 = opt.masters[0].detach().clone()
    opt.step()
    assert not torch.equal(opt.masters[0], m0)
    saved = opt.state_dict()
    fresh = build_optimizer(small_policy(torch.bfloat16, seed=5).model, OptimConfig(lr=1e-3))
    fresh.load_state_dict(saved)
    assert all(torch.equal(a, b) for a, b in zip(fresh.masters, opt.masters))


def test_float16_skips_a_step_whose_scaled_gradients_overflow():
    policy = small_policy(torch.float16)
    opt = build_optimizer(policy.model, OptimConfig(lr=1e-3))
    assert opt.loss_scale == 2.0**16
    for p in opt.params:
        p.grad = torch.full_like(p, float("inf"))
    weights = [p.detach().clone() for p in opt.params]
    assert not opt.step()
    assert opt.loss_scale == 2.0**15 and opt.skipped_steps == 1
    assert all(torch.equal(p, w) for p, w in zip(opt.params, weights))


def test_a_bfloat16_run_trains_and_reports_the_mismatch(tmp_path):
    trainer = tiny_run(tmp_path, "bf16", dtype="bfloat16", steps=2)
    row = trainer.train()
    assert next(trainer.policy.model.parameters()).dtype == torch.bfloat16
    assert row["policy_version"] > 0 and "logprob_mismatch" in row
    assert (tmp_path / "bf16" / "final" / "model.safetensors").is_file()
