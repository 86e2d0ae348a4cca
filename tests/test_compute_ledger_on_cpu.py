"""The compute ledger (seed 002 s.8, seed 000 s.7): training compute per run, test-time compute per question, and
the two side by side for a searched policy veriloop trained."""

from __future__ import annotations

import json

import pytest
import torch

from veriloop.config import build_config
from veriloop.report.data import page_data
from veriloop.rollout.sampler import SamplingParams
from veriloop.search.run import SearchConfig, run_search
from veriloop.training.config import TrainConfig
from veriloop.training.run.compute import parameter_counts, training_compute
from veriloop.training.run.compute import test_time_compute as per_question  # (not a test: pytest would collect it)
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)

ROWS = [
    {"sampled_tokens": 60, "prefill_tokens": 12, "update_tokens": 180, "sampled_records": 4, "update_records": 4,
     "time_generate_s": 0.5, "time_verify_s": 0.1, "time_update_s": 1.0, "time_step_s": 1.7},
    {"sampled_tokens": 40, "prefill_tokens": 8, "update_tokens": 120, "sampled_records": 4, "update_records": 2,
     "time_generate_s": 0.25, "time_verify_s": 0.05, "time_update_s": 0.5, "time_step_s": 0.85},
]  # fmt: skip


def test_training_flops_by_hand():
    # N = 1000, full fine-tuning, 2 passes, a reference: generation 2N (100 + 20) = 240,000; update
    # (4N + 2N) x 300 x 2 = 3,600,000; reference 2N x 300 = 600,000
    c = training_compute(ROWS, params=1000, trainable=1000, passes=2, reference=True)
    assert c["flops"] == {"generation": 240_000, "update": 3_600_000, "reference": 600_000, "total": 4_440_000}
    assert (c["tokens_sampled"], c["tokens_prefilled"], c["tokens_trained"]) == (100, 20, 300)
    assert (c["completions_sampled"], c["completions_trained"], c["steps"]) == (8, 6, 2)
    assert c["wall_seconds"] == {"generate": 0.75, "verify": 0.15, "update": 1.5, "steps": 2.55}
    # LoRA (10 trainable of 1000): the backward still carries the activations' gradient through every weight;
    # TIS re-reads the batch once; a critic of 500 parameters: (2 + 6 x 2) x 500 x 300
    lora = training_compute(ROWS, params=1000, trainable=10, passes=2, reference=False, old_logprobs=True,
                            critic_params=500)  # fmt: skip
    assert lora["flops"] == {
        "generation": 240_000,
        "update": (4000 + 20) * 300 * 2,
        "old_logprobs": 600_000,
        "critic": 14 * 500 * 300,
        "total": 240_000 + 4020 * 600 + 600_000 + 2_100_000,
    }


def test_tied_weights_are_counted_once():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleList([emb, head, torch.nn.Linear(4, 4)])
    model[2].weight.requires_grad_(False)
    assert parameter_counts(model) == (40 + 16 + 4, 40 + 4)


def test_test_time_compute_per_question():
    summary = {"strategies": {"best_of_n": {"4": {"mean_tokens": 100.0, "mean_prm_calls": 4.0,
                                                  "mean_verifier_calls": 1.0, "mean_seconds": 0.2}}}}  # fmt: skip
    cell = per_question(summary, params=1000)["best_of_n"]["4"]
    assert cell == {"tokens": 100.0, "prm_calls": 4.0, "verifier_calls": 1.0, "seconds": 0.2,
                    "generation_flops": 200_000.0, "oracle": False}  # fmt: skip


def _train(tmp_path, name, steps=2, **over):
    settings = {
        "run_dir": str(tmp_path / name),
        "steps": steps,
        "seed": 0,
        "checkpoint_every": 1,
        "rollout.prompts_per_step": 2,
        "rollout.group_size": 2,
        "sampling.max_new_tokens": 40,
        **over,
    }
    trainer = Trainer(build_config(TrainConfig, {}, settings), progress=False)
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("ledger")
    return root, _train(root, "grpo")


def test_a_run_writes_its_ledger_and_its_model_carries_it(trained, tmp_path):
    root, trainer = trained
    run = root / "grpo"
    ledger = json.loads((run / "compute.json").read_text())
    rows = trainer.metrics.rows
    assert ledger["tokens_sampled"] == sum(r["sampled_tokens"] for r in rows) > 0
    assert ledger["tokens_prefilled"] == sum(r["prefill_tokens"] for r in rows) > 0
    assert ledger["tokens_trained"] == sum(r["update_tokens"] for r in rows) > ledger["tokens_sampled"]  # + prompts
    assert ledger["parameters"] == sum(p.numel() for p in set(trainer.policy.model.parameters()))
    parts = {k: v for k, v in ledger["flops"].items() if k != "total"}
    assert set(parts) == {"generation", "update", "reference"} and ledger["flops"]["total"] == sum(parts.values())
    made = [json.loads(p.read_text()) for p in (run / "final").glob("*.json") if "made_by" in p.read_text()]
    assert made and made[0]["compute"] == ledger
    shown = page_data(run)["compute"]["training"]
    assert shown["flops.total"] == ledger["flops"]["total"] and shown["tokens_trained"] == ledger["tokens_trained"]
    no_kl = json.loads((_train(tmp_path, "nokl", steps=1, **{"kl.beta": 0.0}).run_dir / "compute.json").read_text())
    assert "reference" not in no_kl["flops"]


def test_a_search_states_both_columns(trained, tmp_path):
    root, _ = trained

    def search(policy, name):
        cfg = SearchConfig(
            policy=policy,
            strategy="single,majority",
            budgets="2",
            problems=2,
            bin_samples=2,
            split="validation",
            out=str(tmp_path / name),
            threads=1,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=40),
        )
        run_search(cfg, progress=False)
        return json.loads((tmp_path / name / "compute.json").read_text())

    both = search(str(root / "grpo" / "final"), "s1")
    assert both["training"] == json.loads((root / "grpo" / "compute.json").read_text())
    per_question = both["test_time_per_question"]
    assert set(per_question) == {"single", "majority"} and per_question["majority"]["2"]["tokens"] > 0
    assert (
        per_question["majority"]["2"]["generation_flops"]
        == 2 * both["parameters"] * per_question["majority"]["2"]["tokens"]
    )
    assert search("builtin:base", "s2")["training"] is None  # not trained by veriloop: unknown, never 0
    view = page_data(tmp_path / "s1")["compute"]
    assert view["training"]["flops.total"] > 0 and {r["strategy"] for r in view["test_time"]} == {"single", "majority"}
