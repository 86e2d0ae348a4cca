"""Process-supervised GRPO (PRM step rewards) and the search run directory, end to end on CPU."""

import json

import pytest
import torch

from veriloop.cli import main
from veriloop.config import build_config
from veriloop.models.loading import load_policy
from veriloop.prm.model import PRM, load_prm
from veriloop.search.run import SearchConfig, run_search
from veriloop.training.config import TrainConfig
from veriloop.training.loop.signals import ESTIMATORS, EstimatorInput
from veriloop.training.trainer import Trainer


def test_process_estimator_by_hand():
    # One group of two completions, three tokens.  Steps: completion 0 closes steps at t=0 (PRM 1.0)
    # and t=2 (0.0); completion 1 at t=2 (0.5).  The three step rewards {1, 0, 0.5} are normalised
    # together: mean 0.5, population std sqrt(1/6), so +-sqrt(6)/2 = +-1.2247 and 0.
    rewards = torch.tensor([[1.0, 0.0]])
    mask = torch.ones(2, 3)
    step_rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.5]])
    ends = torch.tensor([[True, False, True], [False, False, True]])
    cfg = build_config(TrainConfig, {"algo": "grpo_process", "process": {"prm": "x"}, "advantage": {"eps": 0.0}}, {})
    adv = ESTIMATORS["process"](EstimatorInput(rewards, mask, None, None, step_rewards, ends), cfg)
    z = 6**0.5 / 2
    # a token's advantage sums the normalised rewards of its own step and every later one
    assert torch.allclose(adv, torch.tensor([[z - z, -z, -z], [0.0, 0.0, 0.0]], dtype=torch.float64), atol=1e-9)
    cfg.process.outcome_weight = 0.5  # + 0.5 x the group-normalised outcome (+1, -1)
    mixed = ESTIMATORS["process"](EstimatorInput(rewards, mask, None, None, step_rewards, ends), cfg)
    assert torch.allclose(mixed - adv, torch.tensor([[0.5] * 3, [-0.5] * 3], dtype=torch.float64), atol=1e-9)


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    """A PRM with a random (seeded) head: scores differ between steps, so advantages are not all 0."""
    path = tmp_path_factory.mktemp("prm") / "prm"
    torch.manual_seed(0)
    prm = PRM(load_policy("builtin:base"), "semicolon", "{reference}?", {"labels": "hard", "loss": "bce"})
    torch.nn.init.normal_(prm.head.weight, std=0.5)
    prm.save(path)
    return str(path)


def _cfg(run_dir, prm_dir, steps, **extra):
    data = {
        "algo": "grpo_process",
        "run_dir": str(run_dir),
        "steps": steps,
        "checkpoint_every": 1,
        "rollout": {"prompts_per_step": 4, "group_size": 4},
        "kl": {"beta": 0.0},
        "process": {"prm": prm_dir, "refresh_every": 1, "refresh_completions": 2},
        **extra,
    }
    return build_config(TrainConfig, data, {})


def test_grpo_with_prm_step_rewards_refreshes_and_resumes_exactly(tmp_path, prm_dir):
    straight = Trainer(_cfg(tmp_path / "a", prm_dir, 3), progress=False)
    straight.train()
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["prm_refresh_solutions"] > 0 for r in rows)
    assert rows[-1]["prm_refresh_replayed"] > 0  # older labels replayed after the first refresh
    assert all(0 < r["reward_prm_min"] < 1 for r in rows)
    assert (tmp_path / "a" / "prm" / "step-000003" / "prm_head.safetensors").is_file()
    labels = [json.loads(x) for x in (tmp_path / "a" / "prm" / "labels-step-000001.jsonl").read_text().splitlines()]
    assert labels and labels[0]["provenance"]["step"] == 1

    Trainer(_cfg(tmp_path / "b", prm_dir, 2), progress=False).train()
    resumed = Trainer(_cfg(tmp_path / "b", prm_dir, 3), resume=True, progress=False)
    saved = load_prm(tmp_path / "b" / "prm" / "step-000002")
    assert torch.equal(resumed.process.prm.head.weight, saved.head.weight)  # the refreshed PRM, not the initial one
    resumed.train()
    again = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_mean", "advantage_mean", "advantage_std", "reward_prm_min", "prm_refresh_loss"):
        assert again[-1][key] == pytest.approx(rows[-1][key], abs=1e-9), key


def test_process_estimator_needs_a_prm(capsys):
    assert main(["train", "--algo", "grpo_process", "--run_dir", "/tmp/never-made"]) == 2
    assert "process.prm" in capsys.readouterr().err


def test_search_run_directory(tmp_path, prm_dir):
    cfg = SearchConfig(prm=prm_dir, problems=4, budgets="1,2", bin_samples=4, out=str(tmp_path / "s"), max_steps=6)
    summary = run_search(cfg, progress=False)
    on_disk = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert on_disk["strategies"].keys() == set(cfg.strategy_list())
    for name, per in on_disk["strategies"].items():
        assert list(per) == (["1"] if name == "single" else ["1", "2"])
        for cell in per.values():
            assert 0 <= cell["accuracy"] <= 1 and cell["mean_tokens"] > 0
            assert sum(b["problems"] for b in cell["by_bin"]) == 4
    assert on_disk["strategies"]["majority"]["1"]["mean_prm_calls"] == 0
    assert on_disk["strategies"]["best_of_n"]["2"]["mean_prm_calls"] == 2
    results = (tmp_path / "s" / "results.jsonl").read_text().splitlines()
    assert len(results) == 4 * (1 + 6 * 2)
    assert (tmp_path / "s" / "accuracy_vs_tokens.png").stat().st_size > 1000
    assert "Compute-optimal" in (tmp_path / "s" / "table.md").read_text()
    assert summary["compute_optimal"].keys() == summary["bins"].keys()


def test_search_cli(tmp_path, capsys):
    assert (
        main(
            [
                "search",
                "--strategy",
                "single,majority",
                "--budgets",
                "3",
                "--problems",
                "2",
                "--bin_samples",
                "2",
                "--out",
                str(tmp_path / "s"),
                "--quiet",
            ]
        )
        == 0
    )
    assert "| majority | 3 |" in capsys.readouterr().out
    assert main(["search", "--strategy", "beam", "--problems", "2", "--out", str(tmp_path / "t")]) == 2
    assert "--prm" in capsys.readouterr().err
    assert main(["search", "--budgets", "0"]) == 2


def test_revision_pairs_and_the_revision_strategy(tmp_path, prm_dir):
    from rapidfuzz.distance import Levenshtein

    from veriloop.verifiers import get

    out = tmp_path / "pairs.jsonl"
    assert main(["revision-pairs", "--problems", "24", "--samples", "4", "--output", str(out), "--quiet"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    check = get("arithmetic-outcome")
    assert any(r["edit_distance"] == 0 for r in rows) and any(r["edit_distance"] > 0 for r in rows)
    assert any(len(r["attempts"]) > 1 for r in rows) and all(len(r["attempts"]) <= 4 for r in rows)
    for r in rows:
        assert r["prompt"].endswith("|".join(r["attempts"]) + "|") and r["attempts"][-1] == r["attempt"]
        kept = r["edit_distance"] == 0  # keep_right: a right attempt paired with itself
        assert check.verify(r["attempt"], r["reference"]).score == float(kept)
        assert check.verify(r["completion"], r["reference"]).score == 1.0
        assert r["edit_distance"] == Levenshtein.distance(r["attempt"], r["completion"])
    cfg = SearchConfig(
        prm=prm_dir,
        strategy="single,revision",
        budgets="3",
        problems=3,
        bin_samples=2,
        revision_policy="builtin:base",
        out=str(tmp_path / "s"),
    )
    summary = run_search(cfg, progress=False)
    rev = summary["strategies"]["revision"]["3"]
    assert rev["mean_tokens"] > summary["strategies"]["single"]["1"]["mean_tokens"]  # three attempts cost more
    assert rev["mean_prm_calls"] == 3  # the chain of three, scored once to choose
    assert rev["right_to_wrong_rate"] is None or 0 <= rev["right_to_wrong_rate"] <= 1  # the chains' drift, reported
    assert "right_to_wrong_rate" in rev and "Revisions, judged" in (tmp_path / "s" / "table.md").read_text()
    with pytest.raises(ValueError, match="revision_policy"):
        SearchConfig(strategy="revision")
