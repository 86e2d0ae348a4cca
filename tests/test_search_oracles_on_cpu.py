"""``veriloop search`` and ``allocate`` keep oracles (strategies that read the reference) out of every choice and
report each accuracy with the truncation rate beside it."""

import json

import pytest

from veriloop.rollout.sampler import SamplingParams
from veriloop.search.allocate import AllocateConfig, run_allocate
from veriloop.search.lm import VerifierScorer
from veriloop.search.run import SearchConfig, compute_optimal, judged, run_search, table
from veriloop.search.scripted import ScriptedProposer
from veriloop.search.strategies import SearchSettings, Strategies, Truncated
from veriloop.verifiers import Verdict, get


def cell(accuracy, tokens, oracle=False):
    return {
        "accuracy": accuracy,
        "truncation_rate": 0.0,
        "mean_tokens": tokens,
        "mean_prm_calls": 0.0,
        "mean_seconds": 0.0,
        "oracle": oracle,
        "by_bin": [{"bin": "all", "problems": 10, "accuracy": accuracy, "truncation_rate": 0.0, "mean_tokens": tokens}],
    }


def test_compute_optimal_never_picks_an_oracle():
    # best_of_n@4 with the verifier as scorer reads the reference: 1.0 at 40 tokens.  Within 40 tokens the best
    # test-time cell is majority@4 (0.6); the oracle sets no cost level of its own and is never chosen.
    cells = {
        "single": {"1": cell(0.5, 10)},
        "majority": {"4": cell(0.6, 40)},
        "best_of_n": {"4": cell(1.0, 40, oracle=True), "8": cell(1.0, 35, oracle=True)},
    }
    picks = compute_optimal(cells, ["all"])["all"]
    assert [(p["strategy"], p["token_budget"]) for p in picks] == [("single", 10), ("majority", 40)]
    assert all(p["truncation_rate"] == 0.0 for p in picks)  # beside each chosen accuracy
    summary = {"bins": {"all": {"problems": 10}}, "strategies": cells, "compute_optimal": {"all": picks}}
    text = table(summary)
    assert "| best_of_n [oracle] | 4 | 1.000 | 0.000 |" in text and "| majority | 4 | 0.600 | 0.000 |" in text
    assert "read the problem's reference answer" in text and "oracles excluded" in text
    assert "majority@4 (0.600, truncated 0.000)" in text


def test_a_truncated_solution_is_not_answered_whatever_the_verdict():
    right = Verdict(1.0, {}, "x@1", "", "correct")
    assert judged(Truncated("answer=2"), right) == {"correct": False, "truncated": True, "outcome": "truncated"}
    assert judged("answer=2", right) == {"correct": True, "truncated": False, "outcome": "correct"}


@pytest.mark.timeout(300)
def test_search_tags_the_verifier_scorer_as_an_oracle_and_reports_truncation(tmp_path):
    # The built-in base writes ~27 tokens per solution: at 20 many are cut, and a cut one is not answered.
    cfg = SearchConfig(
        strategy="single,majority,best_of_n",
        scorer="verifier",
        budgets="4",
        problems=6,
        bin_samples=2,
        split="validation",
        out=str(tmp_path / "s"),
        threads=1,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=20),
    )
    summary = run_search(cfg, progress=False)
    cells = summary["strategies"]
    assert cells["best_of_n"]["4"]["oracle"] and not cells["majority"]["4"]["oracle"]
    assert not cells["single"]["1"]["oracle"]
    assert all(0 < c["truncation_rate"] <= 1 for per in cells.values() for c in per.values())
    rows = [json.loads(x) for x in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    cut = [r for r in rows if r["truncated"]]
    assert cut and all(r["outcome"] == "truncated" and not r["correct"] for r in cut)
    assert all(p["strategy"] != "best_of_n" for picks in summary["compute_optimal"].values() for p in picks)
    assert "best_of_n [oracle]" in (tmp_path / "s" / "table.md").read_text()
    # verifier calls: the verifier scorer judged each of best-of-4's samples, and every row's chosen solution got
    # its verdict; the others called no verifier while they searched
    calls = {(r["strategy"], r["verifier_calls"]) for r in rows}
    assert calls == {("single", 1), ("majority", 1), ("best_of_n", 5)}, calls
    assert cells["best_of_n"]["4"]["mean_verifier_calls"] == 5.0


def test_search_cost_counts_the_verifier_calls_of_the_search():
    tree = {"": [("answer=2", 0.5), ("answer=3", 0.5)]}
    strategies = Strategies(ScriptedProposer(tree), VerifierScorer(get("arithmetic-outcome")), SearchSettings())
    strategies.scorer.reference = "1+1"
    strategies.proposer.reseed_many([0])
    ranked = strategies.run("best_of_n", "1+1=?", 8)
    assert (ranked.cost.verifier_calls, ranked.cost.prm_calls) == (8, 0)
    strategies.proposer.reseed_many([0])
    assert strategies.run("majority", "1+1=?", 8).cost.verifier_calls == 0


class _Task:
    """One kind of problem the scripted policy answers right with p 0.4 (its wrong answers spread)."""

    name, default_verifier, step_splitter = "scripted", "arithmetic-outcome", "semicolon"

    def __init__(self, n):
        from veriloop.tasks.base import Problem

        self._val = [Problem(f"v{i}", f"v {i}: 1+1=?", "1+1") for i in range(n)]
        self._held = [Problem(f"h{i}", f"h {i}: 1+1=?", "1+1") for i in range(n)]

    def problems(self):
        return self._val + self._held

    def validation(self):
        return self._val

    def heldout(self):
        return self._held


@pytest.mark.timeout(300)
def test_allocate_lists_an_oracle_as_an_upper_bound_and_never_chooses_it(tmp_path):
    task = _Task(30)
    tree = {"": [("answer=2", 0.4), ("answer=3", 0.2), ("answer=4", 0.2), ("answer=5", 0.2)]}
    strategies = Strategies(ScriptedProposer(tree), VerifierScorer(get("arithmetic-outcome")), SearchSettings())
    cfg = AllocateConfig(
        strategy="single,majority,best_of_n",
        budgets="4,8",
        problems=30,
        heldout_problems=30,
        probe_samples=2,
        levels=2,
        token_budgets="4,8,16",
        scorer="verifier",
        out=str(tmp_path / "a"),
    )
    s = run_allocate(cfg, progress=False, task=task, strategies=strategies)
    assert s["oracle_cells"] == ["best_of_n@4", "best_of_n@8"]
    assert s["validation_overall"]["best_of_n@8"]["accuracy"] > s["validation_overall"]["majority@8"]["accuracy"]
    for ch in s["choices"]:  # the oracle is the best cell on validation, and never chosen
        assert not any(c.startswith("best_of_n") for c in (ch["allocation"] or []) + [ch["single"] or ""])
        assert "truncation_rate" in ch["heldout"]["single"] and "truncation_rate" in ch["validation"]["allocation"]
    text = (tmp_path / "a" / "table.md").read_text()
    assert "[oracle] cells read the reference answer" in text and "best_of_n@8" in text
