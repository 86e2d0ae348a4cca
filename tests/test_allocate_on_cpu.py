"""Compute-optimal allocation: difficulty from agreement, bins and choices on validation, applied to held-out."""

import json

import pytest

from veriloop.cli import main
from veriloop.errors import InputError
from veriloop.search.allocate import (
    AllocateConfig,
    agreement,
    bin_of,
    choose_allocation,
    choose_single,
    fit_edges,
    run_allocate,
)
from veriloop.search.revision import revision_prompt
from veriloop.search.scripted import ScriptedProposer
from veriloop.search.strategies import SearchSettings, Strategies
from veriloop.tasks.base import Problem


def test_agreement_by_hand():
    assert agreement(["answer=2", "answer=3", "1+1=2;answer=2", "no answer"]) == (0.5, 0)  # 2 of 4 say 2
    assert agreement(["x", "y"]) == (0.0, None)  # nothing answers: no agreement
    assert agreement(["answer=3", "answer=2"]) == (0.5, 0)  # a tie goes to the answer seen first


def test_fit_edges_at_quantiles_merges_ties_and_leaves_no_bin_empty():
    values = [0.25, 0.25, 0.5, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert fit_edges(values, 2) == [0.75]
    assert fit_edges(values, 4) == [0.5, 0.75, 1.0]
    assert fit_edges([1.0] * 5, 3) == []  # every problem agrees fully: one bin
    edges = fit_edges(values, 3)
    assert all(any(bin_of(v, edges) == k for v in values) for k in range(len(edges) + 1))


def test_the_knapsack_spends_where_it_pays_and_never_exceeds_the_budget():
    # two bins of 10 problems; "cheap" costs 10 tokens, "dear" 50.  Hard bin: cheap 0.2, dear 0.8;
    # easy bin: cheap 0.9, dear 1.0.  With 30 tokens per problem on average (600 in all) the best
    # per-bin choices under a per-bin limit would be cheap/cheap (11 right); the joint optimum is
    # dear on the hard bin (500) and cheap on the easy one (100): 8 + 9 = 17 right.
    cells = {
        "cheap": [{"accuracy": 0.2, "mean_tokens": 10}, {"accuracy": 0.9, "mean_tokens": 10}],
        "dear": [{"accuracy": 0.8, "mean_tokens": 50}, {"accuracy": 1.0, "mean_tokens": 50}],
    }
    assert choose_allocation(cells, [10, 10], 30) == ["dear", "cheap"]
    assert choose_allocation(cells, [10, 10], 50) == ["dear", "dear"]
    assert choose_allocation(cells, [10, 10], 10) == ["cheap", "cheap"]
    assert choose_allocation(cells, [10, 10], 9.9) is None  # nothing fits
    overall = {"cheap": {"accuracy": 0.55, "mean_tokens": 10}, "dear": {"accuracy": 0.9, "mean_tokens": 50}}
    assert choose_single(overall, 30) == "cheap" and choose_single(overall, 50) == "dear"
    assert choose_single(overall, 5) is None


class _TwoKindsTask:
    """A scripted task of two kinds of problem, ``n`` of each per split; the policy's tree is per kind."""

    default_verifier = "arithmetic-outcome"
    step_splitter = "semicolon"

    def __init__(self, n: int, kinds: tuple[str, str]):
        def problems(split):
            return [
                Problem(f"{split}-{kind}-{i}", f"{kind} {split} {i}: 1+1=?", "1+1", (kind,))
                for i in range(n)
                for kind in kinds
            ]

        self._val, self._held = problems("validation"), problems("heldout")

    def problems(self):
        return self._val + self._held

    def validation(self):
        return self._val

    def heldout(self):
        return self._held


class TwoKinds(_TwoKindsTask):
    """Easy problems the scripted policy answers right with p 0.95; hard ones with p 0.4, its wrong
    answers spread over three values (so a vote of many samples finds the right one)."""

    name = "two-kinds"

    def __init__(self, n: int):
        super().__init__(n, ("easy", "hard"))
        easy = {"": [("answer=2", 0.95), ("answer=3", 0.05)]}
        hard = {"": [("answer=2", 0.4), ("answer=3", 0.2), ("answer=4", 0.2), ("answer=5", 0.2)]}
        self.tree = {p.prompt: easy if "easy" in p.tags else hard for p in self.problems()}


def _allocate(tmp_path, task, **extra):
    data = {
        "strategy": "single,majority",
        "budgets": "4,16",
        "problems": 80,
        "heldout_problems": 80,
        "probe_samples": 4,
        "levels": 2,
        "token_budgets": "4,16",
        "out": str(tmp_path / "a"),
        **extra,
    }
    cfg = AllocateConfig(**data)
    strategies = Strategies(ScriptedProposer(task.tree, per_prompt=True), None, SearchSettings())
    return run_allocate(cfg, progress=False, task=task, strategies=strategies)


def test_the_allocation_a_scripted_policy_calls_for_is_chosen_on_validation_and_holds_on_held_out(tmp_path):
    task = TwoKinds(40)
    s = _allocate(tmp_path, task)
    assert s["unit_tokens"] == 8 and s["probe_tokens"]["validation"] == 32  # "answer=N": 8 characters
    low, high = s["bins"]  # the low-agreement bin holds the hard problems, the other the easy ones
    rows = [json.loads(x) for x in (tmp_path / "a" / "validation.jsonl").read_text().splitlines()]
    hard_in_low = [r["bin"] == low for r in rows if r["strategy"] == "single" and "hard" in r["problem_id"]]
    # a hard problem's 4 probe samples agree 3 or 4 times with probability about 0.26 (binomial), so
    # about 74% of them fall below the edge at 0.75; an easy problem's do so with probability 0.014
    assert s["edges"] == [0.75] and sum(hard_in_low) / len(hard_in_low) > 0.6
    easy_in_low = [r["bin"] == low for r in rows if r["strategy"] == "single" and "easy" in r["problem_id"]]
    assert sum(easy_in_low) <= 3
    four, sixteen = s["choices"]
    # 4 samples' tokens is the probe itself: every bin answers with the probe's vote
    assert four["allocation"] == ["probe_vote@4", "probe_vote@4"]
    # 16 samples' tokens: a big vote where the samples disagree, the probe's vote where they agree
    assert sixteen["allocation"] == ["majority@16", "probe_vote@4"]
    assert sixteen["single"] == "majority@16"  # the best one cell for every problem within 128 tokens
    h = sixteen["heldout"]
    # held-out (never seen by the choice): as accurate as the uniform choice, at fewer tokens (measured:
    # 0.825 at 80 tokens against 0.825 at 128)
    assert h["allocation"]["accuracy"] >= h["single"]["accuracy"] - 0.05
    assert h["allocation"]["mean_tokens"] < 0.85 * h["single"]["mean_tokens"]
    assert "majority@16 / probe_vote@4" in (tmp_path / "a" / "table.md").read_text()
    # without difficulty bins (one level) the probe's 32 tokens leave 96 for one cell on every problem:
    # no big vote fits, and held-out accuracy falls below the binned allocation's (0.738 against 0.825)
    one = _allocate(tmp_path, task, levels=1, out=str(tmp_path / "b"))["choices"][1]
    assert one["allocation"] in (["probe_vote@4"], ["majority@4"])
    assert one["heldout"]["allocation"]["accuracy"] < h["allocation"]["accuracy"] - 0.05


class FixableAndFragile(_TwoKindsTask):
    """Two kinds of problem where the split of a budget between parallel samples and sequential revisions
    matters in opposite ways.  *Fixable*: the policy's answers spread over six values (right with p 1/6),
    and the reviser turns any attempt into the right one: one long chain is best.  *Fragile*: the policy
    is right with p 0.85, and the reviser breaks any attempt: independent samples are best."""

    name = "fixable-and-fragile"

    def __init__(self, n: int):
        super().__init__(n, ("fixable", "fragile"))
        spread = {"": [(f"answer={v}", 1 / 6) for v in range(2, 8)]}
        sure = {"": [("answer=2", 0.85), ("answer=5", 0.15)]}
        self.tree = {p.prompt: spread if "fixable" in p.tags else sure for p in self.problems()}
        attempts = [f"answer={v}" for v in range(2, 8)]
        revised = {kind: {"": [(answer, 1.0)]} for kind, answer in (("fixable", "answer=2"), ("fragile", "answer=6"))}
        self.reviser_tree = {
            revision_prompt(p.prompt, a): revised[p.tags[0]] for p in self.problems() for a in attempts
        }


def test_the_sequential_parallel_ratio_is_swept_and_chosen_per_bin(tmp_path):
    task = FixableAndFragile(40)
    cfg = AllocateConfig(
        strategy="single,revision",
        budgets="8",
        revision_chains_sweep="1,2,4,8",
        revision_policy="(scripted)",
        revision_select="majority",
        revision_history=1,
        problems=80,
        heldout_problems=80,
        probe_samples=4,
        levels=2,
        token_budgets="12",
        out=str(tmp_path / "r"),
    )
    settings = SearchSettings(revision_select="majority", revision_history=1)
    strategies = Strategies(
        ScriptedProposer(task.tree, per_prompt=True),
        None,
        settings,
        reviser=ScriptedProposer(task.reviser_tree, per_prompt=True),
    )
    s = run_allocate(cfg, progress=False, task=task, strategies=strategies)
    low, high = s["bins"]
    assert s["edges"] == [0.75]  # the fragile problems' probes mostly agree 3 or 4 times in 4, the fixable ones' not
    cells = set(s["validation_overall"])
    assert cells == {"single@1", "revision/c1@8", "revision/c2@8", "revision/c4@8", "revision/c8@8"}
    assert strategies.settings.revision_chains == 1  # the setting is restored
    sweep = s["ratio_sweep"]["8"]
    # the seed's figure, in this policy's terms: one chain wins where the probe disagrees, parallel where it agrees
    assert sweep[low]["1"] > sweep[low]["8"] + 0.3 and sweep[high]["8"] > sweep[high]["1"] + 0.3, sweep
    eight = s["choices"][0]  # 12 samples' tokens: the probe's 4, then 8 attempts per problem on average
    chains = [
        (int(c.split("/c")[1].split("@")[0]), int(c.split("@")[1])) if c.startswith("revision/") else None
        for c in eight["allocation"]
    ]
    # where the probe disagrees: chains with revisions (C < N); where it agrees: no revision at all, the probe's
    # own vote (free) or N parallel samples, which lets the other bin spend more
    assert chains[0] is not None and chains[0][0] < chains[0][1], eight
    assert eight["allocation"][1] == "probe_vote@4" or chains[1][0] == chains[1][1], eight
    h = eight["heldout"]
    # held-out: the ratio per bin beats the one cell best on validation for every problem (measured: 0.863 at
    # 62 tokens against 0.762 at 64)
    assert h["allocation"]["accuracy"] > h["single"]["accuracy"] + 0.05, h
    table = (tmp_path / "r" / "table.md").read_text()
    assert "Sequential/parallel ratio at 8 attempts" in table and "| C = 1 | C = 2 | C = 4 | C = 8 |" in table
    with pytest.raises(InputError, match="add revision"):
        AllocateConfig(strategy="single,majority", revision_chains_sweep="1,2")
    with pytest.raises(InputError, match="revision_chains_sweep"):
        AllocateConfig(strategy="single,revision", revision_policy="x", revision_chains_sweep="0,2")


def test_allocate_options_and_cli_errors(capsys):
    with pytest.raises(InputError, match="levels"):
        AllocateConfig(levels=6)
    with pytest.raises(InputError, match="single"):
        AllocateConfig(strategy="majority")
    with pytest.raises(InputError, match="--bin_edges"):
        AllocateConfig(bin_edges="0.5")
    with pytest.raises(InputError, match="token_budgets"):
        AllocateConfig(token_budgets="0,x")
    assert main(["allocate", "--probe_samples", "1"]) == 2
    assert "probe_samples" in capsys.readouterr().err


def test_allocate_cli_on_the_built_in_task(tmp_path, capsys):
    assert (
        main(
            [
                "allocate",
                "--problems",
                "8",
                "--heldout_problems",
                "6",
                "--budgets",
                "2",
                "--token_budgets",
                "4,8",
                "--levels",
                "2",
                "--out",
                str(tmp_path / "c"),
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "best single cell" in out and "agreement" in out
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["problems"] == {"validation": 8, "heldout": 6}
    assert all(ch["heldout"] for ch in summary["choices"])
