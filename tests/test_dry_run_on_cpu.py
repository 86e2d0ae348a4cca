"""`veriloop train --dry-run` (and sft, pipeline, search): the derived quantities of a run from its config, the model
and the data; no step, no draw."""

import json
import re

import pytest
import torch

from veriloop import cli
from veriloop.config import build_config
from veriloop.models.loading import Policy, load_policy
from veriloop.prm.model import PRM
from veriloop.search.dry_run import plan
from veriloop.search.run import SearchConfig, run_search
from veriloop.tasks.config import TaskConfig
from veriloop.training.config import TrainConfig
from veriloop.training.run.preflight import sample_problems


def _rows(out: str) -> dict:
    body = out.split("\n\n", 1)[1]
    return {line[:34].strip(): line[34:].strip() for line in body.splitlines() if line.strip()}


def test_train_dry_run_derives_each_quantity_and_makes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        cli.main(
            [
                "train",
                "--dry-run",
                "--run_dir",
                str(run_dir),
                "--steps",
                "10",
                "--rollout.prompts_per_step",
                "4",
                "--rollout.group_size",
                "3",
                "--update.inner_updates",
                "2",
                "--update.mini_batches",
                "2",
                "--update.micro_batch_size",
                "4",
                "--rollout.lag",
                "1",
                "--rollout.engine",
                "ray",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert not run_dir.exists()
    rows = _rows(out)
    cfg = TrainConfig()
    longest = max(
        len(load_policy("builtin:base").encode_prompt(p.prompt)) for p in sample_problems(cfg.task.build(), 0)
    )
    assert rows["prompts per step (B)"] == "4"
    assert rows["completions per step (B x G)"] == "12 (group size 3)"
    assert rows["longest prompt"].startswith(f"{longest} tokens")
    assert rows["tokens per step, at most"].startswith(f"{12 * (longest + 64):,} ")
    assert rows["optimizer steps per batch (mu)"].startswith("4 ")
    assert rows["micro-batches per optimizer step"] == "2 of up to 4 rows"  # 12 rows / 2 mini-batches / 4
    assert rows["optimizer steps in the run"].startswith("40 ")
    assert rows["staleness, in policy versions"].startswith("up to 7 ")  # lag 1 x mu 4 + mu - 1
    assert "KL reference" in rows["learner memory, estimated"]  # kl.beta 0.1 by default


def test_dry_run_memory_follows_the_options_that_change_it(capsys):
    def memory(*flags):
        assert cli.main(["train", "--dry-run", *flags]) == 0
        return _rows(capsys.readouterr().out)

    plain, no_kl = memory(), memory("--kl.beta", "0")
    assert "KL reference" not in no_kl["learner memory, estimated"]
    assert no_kl["staleness, in policy versions"].startswith("up to 1 ")  # inner_updates 2 by default
    on_policy = memory("--update.inner_updates", "1")
    assert on_policy["staleness, in policy versions"] == "up to 0 (lag 0 x mu + mu - 1): on-policy"
    checkpointed = memory("--update.gradient_checkpointing", "true")
    size = lambda text: float(text.split()[0]) * (1024 if text.split()[1].startswith("GiB") else 1)  # noqa: E731 - MiB
    assert size(checkpointed["learner memory, estimated"]) < size(plain["learner memory, estimated"])
    shorter = memory("--sampling.max_new_tokens", "32")["sampler KV cache, estimated"]
    assert size(shorter) < size(plain["sampler KV cache, estimated"])


def test_sft_takes_dry_run_too(tmp_path, capsys):
    assert cli.main(["sft", "--dry-run", "--run_dir", str(tmp_path / "sft"), "--steps", "5"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["completions per step (B x G)"].endswith("(group size 1)") and not (tmp_path / "sft").exists()
    assert rows["sampler KV cache, estimated"] == "none: nothing is sampled (rollout.source task-teacher)"


def test_pipeline_dry_run_plans_each_stage_of_its_variant(tmp_path, capsys):
    assert (
        cli.main(
            [
                "pipeline",
                "--dry-run",
                "--run_dir",
                str(tmp_path / "r1"),
                "--rl_steps",
                "7",
                "--rs_problems",
                "10",
                "--rs_samples",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert not (tmp_path / "r1").exists()
    stages = [line.split(":")[0] for line in out.splitlines() if line and not line.startswith((" ", "veriloop"))]
    assert stages == ["cold_start", "rl", "rejection_sample", "sft_from_base", "rl_again"]
    assert "rl: grpo, 7 steps" in out and "10 training problems x 3 samples = 30 completions" in out
    assert cli.main(["pipeline", "--dry-run", "--variant", "rl-long", "--max_minutes", "2"]) == 0
    out = capsys.readouterr().out
    assert "rl: grpo, 2.0 minutes" in out and "cold_start" not in out


# ------------------------------------------------------------------------------------------ veriloop search --dry-run


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    """A PRM on the shipped base with a random (seeded) head: the search's scorer."""
    path = tmp_path_factory.mktemp("prm") / "prm"
    torch.manual_seed(0)
    PRM(load_policy("builtin:base"), "semicolon", "{reference}?", {}).save(path)
    return str(path)


def _cells(out: str) -> dict:
    """The per-(strategy, budget) table: {(strategy, budget): {column: text}}."""
    lines = out[out.index("\nstrategy ") + 1 :].splitlines()
    head = re.split(r"\s{2,}", lines[0].strip())
    rows = [dict(zip(head, re.split(r"\s{2,}", line.strip(), maxsplit=len(head) - 1))) for line in lines[1:]]
    return {(r["strategy"], int(r["budget"])): r for r in rows}


def test_search_dry_run_derives_each_cell_and_draws_nothing(tmp_path, monkeypatch, capsys, prm_dir):
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    boom = lambda *a, **k: pytest.fail("the dry run sampled or scored")
    monkeypatch.setattr(Policy, "sample", boom)
    monkeypatch.setattr(PRM, "score", boom)
    assert (
        cli.main(
            [
                "search",
                "--dry-run",
                "--prm",
                prm_dir,
                "--out",
                "s",
                "--problems",
                "5",
                "--budgets",
                "1,4,16",
                "--strategy",
                "majority,best_of_n,beam,lookahead,mcts",
                "--bin_samples",
                "2",
                "--sampling.max_new_tokens",
                "32",
                "--batch_problems",
                "4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert sorted(tmp_path.rglob("*")) == before  # no run directory, no log
    cells = _cells(out)
    majority = cells["majority", 4]  # a call serves 4 problems x 4 samples, of the longest prompt + 32 tokens
    columns = ("problems", "generations", "tokens", "all tokens", "PRM calls", "verifier calls", "largest call")
    assert [majority[k] for k in columns] == ["5", "4", "128", "640", "0", "1", f"16 x {_longest(5) + 32}"]
    best = cells["best_of_n", 16]
    assert (best["PRM calls"], best["largest call"]) == ("16", f"64 x {_longest(5) + 32}")
    # beam at 16: expand 4, 4 beams; 4 candidates at the first step, 16 at each of the 11 later ones, each valued;
    # the 4 beams left are completed greedily (4 more generations, scored)
    assert (cells["beam", 16]["generations"], cells["beam", 16]["PRM calls"]) == ("184", "184")
    assert cells["beam", 16]["draws"].startswith("4 beams x 4 steps = 16 candidates per step")
    assert cells["beam", 1]["draws"].startswith("1 beam x 1 step = 1 candidate per step")
    assert cells["lookahead", 16]["generations"] == str(180 * 2 + 4)  # each candidate rolled one greedy step ahead
    assert (cells["mcts", 4]["generations"], cells["mcts", 4]["PRM calls"]) == ("17", "4")  # 4 x expand 4 + 1
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.split("\n\n")[1].splitlines())
    per_problem = sum(int(c["generations"]) for c in cells.values())
    assert rows["in all, at most"].startswith(f"{5 * (per_problem + 2):,} generations, ")  # + the bins' 2 samples
    assert rows["problems"].startswith("5 of task arithmetic's 400 heldout problems")
    assert "PRM weights" in rows["memory, estimated"]


def _longest(n: int) -> int:
    policy = load_policy("builtin:base")
    return max(len(policy.encode_prompt(p.prompt)) for p in TaskConfig().build().heldout()[:n])


def test_search_dry_run_counts_an_oracle_verifier(capsys):
    assert (
        cli.main(
            [
                "search",
                "--dry-run",
                "--strategy",
                "best_of_n,mcts",
                "--scorer",
                "verifier",
                "--mcts_value",
                "verifier",
                "--budgets",
                "4",
                "--problems",
                "3",
            ]
        )
        == 0
    )
    cells = _cells(capsys.readouterr().out)
    best, mcts = cells["best_of_n [oracle]", 4], cells["mcts [oracle]", 4]
    # one problem a call (the verifier judges against one problem's reference); the verdicts of 4 samples + the choice
    assert (best["verifier calls"], best["PRM calls"], best["largest call"].split()[0]) == ("5", "0", "4")
    assert (mcts["generations"], mcts["verifier calls"], mcts["PRM calls"]) == ("21", "5", "0")  # + 4 completions


@pytest.mark.parametrize(
    "argv",
    [
        ["--strategy", "beam"],
        ["--budgets", "0"],
        ["--prm", "/nonexistent/prm"],
        ["--strategy", "rstar", "--discriminator", "/nonexistent/model"],
    ],
)
def test_search_dry_run_refuses_what_the_search_refuses(tmp_path, capsys, argv):
    out = ["--out", str(tmp_path / "s"), "--problems", "2"]
    assert cli.main(["search", *argv, *out]) == 2
    refused = capsys.readouterr().err
    assert cli.main(["search", "--dry-run", *argv, *out]) == 2
    said = capsys.readouterr().err
    assert said == refused and len(said.strip().splitlines()) == 1, said


@pytest.mark.timeout(300)
def test_search_dry_run_bounds_what_the_search_spends(tmp_path, prm_dir):
    """Every problem's tokens and PRM calls in a real search stay within the dry run's bounds (short generations, so
    that they meet the cap)."""
    cfg = build_config(
        SearchConfig,
        {
            "prm": prm_dir,
            "strategy": "single,majority,best_of_n,weighted_vote,beam,lookahead,mcts,revision,rstar",
            "budgets": "2,4",
            "problems": 2,
            "bin_samples": 2,
            "out": str(tmp_path / "s"),
            "max_steps": 4,
            "revision_policy": "builtin:base",
            "revision_chains": 2,
            "sampling": {"max_new_tokens": 8},
        },
    )
    _, cells = plan(cfg)
    bound = {(c["strategy"], c["budget"]): c for c in cells}
    run_search(cfg, progress=False)
    results = [json.loads(line) for line in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 * len(bound)
    for r in results:
        c = bound[r["strategy"], r["budget"]]
        assert r["tokens"] <= c["tokens"] and r["prm_calls"] <= c["PRM calls"], (r["strategy"], r["budget"])
    whole = [r for r in results if r["strategy"] in ("single", "majority", "best_of_n", "weighted_vote")]
    assert any(r["tokens"] == bound[r["strategy"], r["budget"]]["tokens"] for r in whole)  # the bound is met
