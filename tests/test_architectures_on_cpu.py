"""Any causal LM: tiny random models of each family, with a byte-level BPE tokenizer trained here, sample with
temperature / top-k / top-p on both decode paths; the recorded behaviour log-probs equal the learner's
recomputation (<= 1e-5 in float32), and a GRPO step with the KL to a reference runs on each."""

import pytest
import torch

from veriloop.config import build_config
from veriloop.models.batch import build_policy_batch
from veriloop.models.loading import load_policy
from veriloop.models.random_init import ARCHITECTURES, save_random_model
from veriloop.rollout import static_decode
from veriloop.rollout.sampler import SamplingParams, generate
from veriloop.training.config import TrainConfig
from veriloop.training.loop.logprobs import completion_logprobs
from veriloop.training.trainer import Trainer

TEXTS = [f"{a} + {b} = {a + b}. Question: what is {a} times {b}? Answer: {a * b}." for a in range(30) for b in range(9)]
SAMPLING = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, max_new_tokens=24)
STATIC = {"llama", "qwen2", "qwen3", "mistral"}  # the families the static-cache decoder serves


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    return {arch: str(save_random_model(root / arch, arch, TEXTS, seed=1)) for arch in ARCHITECTURES}


@pytest.mark.parametrize("engine", ["auto", "hf"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_recorded_logprobs_equal_the_learners_recomputation(model_dirs, arch, engine):
    policy = load_policy(model_dirs[arch])
    assert static_decode.supports(policy.model, 256) == (arch in STATIC)
    prompts = [
        policy.encode_prompt(p)
        for p in (
            "What is 3 + 4?",
            "What is 12 times 7? Think step by step, then answer with one number on the last line.",
            "5 + 5",
        )
    ]
    assert len({len(p) for p in prompts}) == 3  # left padding is exercised
    out = generate(
        policy.model,
        prompts,
        SAMPLING,
        eos_id=policy.end_ids,
        pad_id=policy.pad_id,
        row_seeds=list(range(100, 106)),
        n=2,
        engine=engine,
    )
    assert out.num_tokens > 6
    expanded = [p for p in prompts for _ in range(2)]
    batch = build_policy_batch(expanded, out.completion_ids, policy.pad_id)
    with torch.no_grad():
        for chunk in (0, 5):  # the plain LM head and the chunked one
            tl = completion_logprobs(policy, batch, SAMPLING, "sampling", chunk_tokens=chunk)
            for i, lps in enumerate(out.logprobs):
                got = tl.sampled[i, : len(lps)]
                assert torch.isfinite(got).all(), (arch, i)
                assert torch.allclose(got, torch.tensor(lps), atol=1e-5, rtol=0), (arch, engine, chunk, i)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_grpo_step_runs(model_dirs, arch, tmp_path):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "policy": model_dirs[arch],
            "run_dir": str(tmp_path / "run"),
            "steps": 1,
            "verifier": "test-digit-share",
            "rollout.prompts_per_step": 2,
            "rollout.group_size": 4,
            "sampling.max_new_tokens": 12,
            "kl.beta": 0.05,
            "optim.lr": 1e-3,
            "device": "cpu",
            "task.arithmetic.heldout_size": 4,
            "save_rollouts": False,
            "update.mask_truncated": False,
        },
    )  # (a random model's completions are cut: it learns from them)
    trainer = Trainer(cfg, progress=False)
    before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    row = trainer.train()
    assert row["policy_version"] == 2 and row["logprob_mismatch"] < 1e-5, row
    assert row["kl"] >= 0 and "grad_norm" in row
    moved = [n for n, p in trainer.policy.model.named_parameters() if not torch.equal(p, before[n])]
    assert moved, arch


def test_forcing_the_static_path_on_another_family_is_a_clear_error(model_dirs):
    policy = load_policy(model_dirs["gpt2"])
    with pytest.raises(ValueError, match="engine static does not serve 'gpt2'"):
        generate(
            policy.model,
            [[5, 6]],
            SAMPLING,
            eos_id=policy.end_ids,
            pad_id=policy.pad_id,
            row_seeds=[1],
            engine="static",
        )


def test_the_static_decoder_keeps_the_mlp_bias(tmp_path):
    policy = load_policy(str(save_random_model(tmp_path / "m", "llama", TEXTS, seed=2, mlp_bias=True)))
    prompts = [policy.encode_prompt("What is 3 + 4?")]
    runs = [
        generate(
            policy.model,
            prompts,
            SAMPLING,
            eos_id=policy.end_ids,
            pad_id=policy.pad_id,
            row_seeds=[9, 10],
            n=2,
            engine=e,
        )
        for e in ("static", "hf")
    ]
    assert runs[0].completion_ids == runs[1].completion_ids
    for a, b in zip(runs[0].logprobs, runs[1].logprobs):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
