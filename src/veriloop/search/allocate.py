"""``veriloop allocate``: compute-optimal test-time allocation that decides for problems it has not seen.

The seed's recipe (test-time compute chapter): estimate a problem's difficulty, then spend on it
the strategy and budget that work best at that difficulty.  Here every choice is made on the
validation split and applied, unchanged, to held-out problems:

1. **Difficulty without the reference.**  A *probe* of ``probe_samples`` (m) samples per problem; its
   ``agreement`` is the share of the m samples that give the most common final answer (samples
   without an answer count in m, never as an answer).  The probe's tokens are part of the cost.
2. **Bins fitted on validation.**  ``levels`` (at most 5) bins at the quantiles of validation
   agreement (edges that coincide merge, so there can be fewer); bin 0 is the least agreement.
3. **The choice per bin, on validation.**  Every (strategy, budget) cell of the search runs on
   every validation problem; the probe's own majority answer is one more cell (``probe_vote``,
   no tokens beyond the probe).  For each token budget T (mean tokens per problem, probe included)
   the allocation picks one cell per bin to maximise validation accuracy with
   ``sum_k n_k * tokens_k(cell_k) <= N * (T - probe tokens)`` (a knapsack over bins: easy bins may
   spend less so that hard bins spend more), solved exactly (the choice never exceeds T on
   validation).
   With ``revision_chains_sweep`` C1,C2,... the ``revision`` strategy is one cell per chain count C <= N at
   each budget N (``revision/cC@N``: C parallel chains of N / C attempts; C = N is N independent samples,
   C = 1 one chain of N - 1 revisions): the sequential/parallel ratio at fixed budget, swept per bin
   (``summary["ratio_sweep"]``, the seed's figure) and chosen per bin like any other cell.
4. **Held-out, read once.**  Held-out problems are probed, binned with the validation edges, and
   each runs its bin's cell; the baseline is the single cell with the best validation accuracy
   within T (no probe), run on every held-out problem.  Both are reported with their held-out
   accuracy, truncation rate and mean tokens.

A cell that reads the reference (``scorer=verifier``, ``mcts_value=verifier``: an oracle) is measured
on validation and listed as an upper bound (``oracle_cells``), but neither the allocation nor the
single-cell baseline may choose it.  A sample cut by the token budget has no answer: it does not
count in the probe's agreement as an answer, and a cut solution scores as not answered.

The run directory: ``summary.json`` (edges, bins, every validation cell per bin, the choice and
held-out result per budget), ``validation.jsonl`` / ``heldout.jsonl`` (every problem's rows) and
``table.md``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from veriloop.errors import InputError
from veriloop.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from veriloop.models.loading import load_policy
from veriloop.options import declare
from veriloop.search.run import (
    SEARCH_COMMON,
    STRATEGY_SCOPE,
    SearchConfig,
    _run_cells,
    _settings,
    _strategies,
    bin_of,
    judged,
    search_plan,
)
from veriloop.search.strategies import Cost, Strategies, answer_of
from veriloop.seeding import derive_seed
from veriloop.tasks.base import split_problems
from veriloop.verifiers import get as get_verifier

PROBE_VOTE = "probe_vote"  # the probe's own majority answer: a cell that costs nothing beyond the probe


@dataclass
class AllocateConfig(SearchConfig):
    """``veriloop allocate``: difficulty bins and a strategy per bin chosen on validation, applied to held-out."""

    strategy: str = field(
        default="single,majority",
        metadata={
            "help": "comma-separated strategies, single among them; with --prm also best_of_n, weighted_vote, beam, ..."
        },
    )
    out: str = field(default="runs/allocate", metadata={"help": "run directory (summary.json, table.md, rows)"})
    problems: int = field(
        default=100, metadata={"help": "validation problems the bins and choices are fitted on", "ge": 1}
    )
    heldout_problems: int = field(default=100, metadata={"help": "held-out problems the choice is applied to", "ge": 1})
    probe_samples: int = field(
        default=4,
        metadata={"help": "m: samples per problem whose agreement is its difficulty (agreement needs two)", "ge": 2},
    )
    levels: int = field(
        default=3,
        metadata={
            "help": "difficulty bins (up to the seed's difficulty levels), at validation agreement quantiles",
            "ge": 1,
            "le": 5,
        },
    )
    token_budgets: str = field(
        default="4,8,16",
        metadata={"help": "mean tokens per problem allowed, in units of one sample's (single on validation)"},
    )
    revision_chains_sweep: str = field(
        default="",
        metadata={
            "help": "chain counts C: revision at budget N runs as C parallel chains of N/C attempts for each "
            "C <= N (the sequential/parallel ratio per bin); '' = --revision_chains only"
        },
    )

    def __post_init__(self):
        super().__post_init__()
        search = SearchConfig()
        moved = [f"--{n}" for n in ("split", "bin_samples", "bin_edges") if getattr(self, n) != getattr(search, n)]
        if moved:
            raise InputError(
                f"allocate fits its own bins on validation agreement: {', '.join(moved)} do not apply "
                "(use --levels, --probe_samples, --problems, --heldout_problems)"
            )
        if "single" not in self.strategy_list():
            raise InputError("allocate needs 'single' among the strategies: it sets the unit of token_budgets")
        self.budget_units()
        if self.chain_counts() and "revision" not in self.strategy_list():
            raise InputError("revision_chains_sweep sweeps the revision strategy: add revision to --strategy")

    def chain_counts(self) -> list[int]:
        try:
            counts = sorted({int(c) for c in self.revision_chains_sweep.split(",") if c.strip()})
        except ValueError:
            raise InputError(
                f"revision_chains_sweep must be integers separated by commas, got {self.revision_chains_sweep!r}"
            ) from None
        if counts and counts[0] < 1:
            raise InputError(f"revision_chains_sweep: chain counts must be >= 1, got {self.revision_chains_sweep!r}")
        return counts

    def budget_units(self) -> list[float]:
        try:
            units = sorted({float(b) for b in self.token_budgets.split(",") if b.strip()})
        except ValueError:
            raise InputError(f"token_budgets must be numbers separated by commas, got {self.token_budgets!r}") from None
        if not units or units[0] <= 0:
            raise InputError(f"token_budgets must be positive, got {self.token_budgets!r}")
        return units


# split, bin_samples and bin_edges are refused above (allocate fits its own bins); revision_chains_sweep needs revision
declare(
    AllocateConfig,
    [STRATEGY_SCOPE],
    (*SEARCH_COMMON, "heldout_problems", "probe_samples", "levels", "token_budgets", "revision_chains_sweep"),
)


def agreement(texts: list[str]) -> tuple[float, int | None]:
    """(share of ``texts`` giving the most common answer, index of its first text or None if none answers); a
    truncated text gives no answer."""
    keys = [answer_of(t) for t in texts]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 0.0, None
    top = max(counts.values())
    best = next(k for k in keys if k is not None and counts[k] == top)  # ties: the answer seen first
    return top / len(texts), keys.index(best)


def probe(strategies: Strategies, problems, m: int, seed: int, batch: int) -> list[dict]:
    """m samples per problem (seeded by the problem, apart from every strategy's draws): agreement,
    the majority text and the tokens the probe cost."""
    out = []
    for start in range(0, len(problems), batch):
        chunk = problems[start : start + batch]
        strategies.proposer.reseed_many([derive_seed(seed, "probe", p.id) for p in chunk])
        costs = [Cost() for _ in chunk]
        texts = strategies.proposer.complete_many([(k, p.prompt, [""]) for k, p in enumerate(chunk)], m, costs)
        for t, c in zip(texts, costs):
            share, i = agreement(t)
            out.append({"agreement": share, "vote": t[i] if i is not None else t[0], "tokens": c.tokens})
    return out


def fit_edges(values: list[float], levels: int) -> list[float]:
    """Bin edges at the ``levels``-quantiles of ``values``; coinciding edges merge and no bin is empty."""
    v = sorted(values)
    edges = []
    for i in range(1, levels):
        e = v[min(len(v) - 1, math.ceil(i * len(v) / levels))]
        if e > v[0] and (not edges or e > edges[-1]):
            edges.append(e)
    return edges


def bin_names(edges: list[float]) -> list[str]:
    bounds = [0.0, *edges, 1.0]
    return [f"agreement {bounds[i]:.2f}-{bounds[i + 1]:.2f}" for i in range(len(bounds) - 1)]


def choose_allocation(cells: dict[str, list[dict]], sizes: list[int], extra_tokens: float) -> list[str] | None:
    """One cell per bin maximising correct answers with ``sum_k sizes[k] * tokens <= sum(sizes) * extra_tokens``.

    ``cells[name][k]``: ``{"accuracy", "mean_tokens"}`` of cell ``name`` on bin k (``accuracy`` None
    for an empty bin).  Exact: a multiple-choice knapsack over the bins that keeps, for every count
    of correct answers, the cheapest choice reaching it (at most N + 1 states).  Ties: fewer tokens,
    then the cells listed first.  None when no choice fits.
    """
    budget = sum(sizes) * extra_tokens * (1 + 1e-9)  # float sums of the same tokens compare equal
    names = list(cells)
    states: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}  # correct -> (tokens, cell orders)
    for k, n in enumerate(sizes):
        nxt: dict[int, tuple[float, tuple[int, ...]]] = {}
        for order, name in enumerate(names):
            c = cells[name][k]
            tok = n * c["mean_tokens"] if n else 0.0
            gain = round(n * c["accuracy"]) if n else 0  # correct answers, exactly
            for right, (spent, picks) in states.items():
                cand = (spent + tok, (*picks, order))
                if cand[0] > budget:
                    continue
                if right + gain not in nxt or cand < nxt[right + gain]:
                    nxt[right + gain] = cand
        states = nxt
    if not states:
        return None
    right = max(states)
    return [names[i] for i in states[right][1]]


def choose_single(overall: dict[str, dict], tokens: float) -> str | None:
    """The cell with the best overall accuracy within ``tokens`` (ties: fewer tokens, then listed first)."""
    fits = [
        (c["accuracy"], -c["mean_tokens"], -i, name)
        for i, (name, c) in enumerate(overall.items())
        if c["mean_tokens"] <= tokens
    ]
    return max(fits)[3] if fits else None


def _cell_name(strategy: str, budget: int) -> str:
    return f"{strategy}@{budget}"


def allocate_plan(cfg: AllocateConfig) -> list[tuple[str, int]]:
    """The search's (strategy, budget) cells, revision split into ``revision/cC`` per swept chain count C <= N."""
    counts = cfg.chain_counts()
    plan = []
    for s, b in search_plan(cfg):
        if s == "revision" and counts:
            plan += [(f"revision/c{c}", b) for c in counts if c <= b]
        else:
            plan.append((s, b))
    return plan


def _run_plan(
    cfg: AllocateConfig,
    strategies: Strategies,
    verifier,
    problems,
    values,
    bins,
    progress: bool,
    plan: list[tuple[str, int]],
    names: list[str],
) -> list[dict]:
    """Result rows of every cell of ``plan``; a ``revision/cC`` cell runs revision with C chains."""
    plain = [(s, b) for s, b in plan if not s.startswith("revision/c")]
    rows = (
        _run_cells(cfg, strategies, verifier, problems, values, bins, progress, plan=plain, names=names)[0]
        if plain
        else []
    )
    swept = sorted({s for s, _ in plan if s.startswith("revision/c")}, key=lambda s: int(s.removeprefix("revision/c")))
    for cell in swept:  # the same proposer, reviser and seeds; only the chain count differs
        chains = replace(strategies.settings, revision_chains=int(cell.removeprefix("revision/c")))
        sub = [("revision", b) for s, b in plan if s == cell]
        for r in _run_cells(
            cfg, replace(strategies, settings=chains), verifier, problems, values, bins, progress, plan=sub, names=names
        )[0]:
            rows.append({**r, "strategy": cell})
    return rows


def ratio_sweep(cfg: AllocateConfig, cells: dict[str, list[dict]], names: list[str]) -> dict:
    """Per budget N and bin: validation accuracy of each chain count C (the sequential/parallel ratio)."""
    out = {}
    for n in cfg.budget_list():
        counts = [c for c in cfg.chain_counts() if c <= n]
        if len(counts) < 2:
            continue
        out[str(n)] = {
            name: {str(c): cells[_cell_name(f"revision/c{c}", n)][k]["accuracy"] for c in counts}
            for k, name in enumerate(names)
        }
    return out


def _per_problem(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """``{cell name: {problem id: row}}`` from search result rows."""
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        out.setdefault(_cell_name(r["strategy"], r["budget"]), {})[r["problem_id"]] = r
    return out


def run_allocate(
    cfg: AllocateConfig,
    progress: bool = True,
    *,
    policy=None,
    prm=None,
    task=None,
    strategies: Strategies | None = None,
) -> dict:
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task = task or cfg.task.build()
    verifier = get_verifier(task.default_verifier)
    if strategies is None:
        policy = policy or load_policy(cfg.policy)
        if prm is None and cfg.prm:
            from veriloop.prm.model import load_prm

            prm = load_prm(cfg.prm)
        strategies = _strategies(cfg, task, policy, prm, verifier, _settings(cfg, prm))
    val = split_problems(task, "validation")[: cfg.problems]
    held = split_problems(task, "heldout")[: cfg.heldout_problems]
    if not val or not held:
        raise InputError(f"task {task.name!r} needs validation and held-out problems to allocate on")
    fit = _fit_on_validation(cfg, strategies, verifier, val, progress)
    choices = _choose(cfg, fit, len(val))
    held_rows, held_bins, held_probe = _apply_to_heldout(cfg, strategies, verifier, held, fit, choices, progress)
    summary = {
        "policy": cfg.policy,
        "prm": cfg.prm,
        "task": task.name,
        "probe_samples": cfg.probe_samples,
        "edges": fit["edges"],
        "bins": {
            n: {"validation_problems": fit["sizes"][k], "heldout_problems": held_bins.count(k)}
            for k, n in enumerate(fit["names"])
        },
        "unit_tokens": fit["unit"],
        "probe_tokens": {"validation": fit["probe_tokens"], "heldout": _mean([p["tokens"] for p in held_probe])},
        "validation_cells": fit["cells"],
        "validation_overall": fit["overall"],
        "oracle_cells": fit["oracle"],
        "choices": choices,
        "ratio_sweep": ratio_sweep(cfg, fit["cells"], fit["names"]),
        "problems": {"validation": len(val), "heldout": len(held)},
        "seed": cfg.seed,
        "seconds": round(time.time() - t0, 1),
    }
    out = Path(cfg.out)
    atomic_write_json(out / "summary.json", summary)
    atomic_write_jsonl(out / "validation.jsonl", fit["rows"])
    atomic_write_jsonl(out / "heldout.jsonl", held_rows)
    atomic_write_text(out / "table.md", allocation_table(summary))
    return summary


def _fit_on_validation(cfg: AllocateConfig, strategies: Strategies, verifier, val, progress: bool) -> dict:
    """Steps 1-3 on validation: probe, fit the bins, every cell (and the probe's vote) per bin."""
    m = cfg.probe_samples
    probes = probe(strategies, val, m, cfg.seed, cfg.batch_problems)
    edges = fit_edges([p["agreement"] for p in probes], cfg.levels)
    names = bin_names(edges)
    bins = [bin_of(p["agreement"], edges) for p in probes]
    rows = _run_plan(
        cfg, strategies, verifier, val, [p["agreement"] for p in probes], bins, progress, allocate_plan(cfg), names
    )
    rows += _vote_rows(verifier, val, probes, bins, names, m)
    for r in rows:
        r["agreement"] = r.pop("pass_rate")  # the bins here are by the probe's agreement, not a pass rate
    by_cell = _per_problem(rows)
    cells = {
        name: [_stats([per[q.id] for q, b in zip(val, bins) if b == k]) for k in range(len(names))]
        for name, per in by_cell.items()
    }
    overall = {name: _stats(list(per.values())) for name, per in by_cell.items() if not name.startswith(PROBE_VOTE)}
    oracle = sorted(name for name, per in by_cell.items() if any(r.get("oracle") for r in per.values()))
    return {
        "edges": edges,
        "names": names,
        "sizes": [bins.count(k) for k in range(len(names))],
        "rows": rows,
        "cells": cells,
        "overall": overall,
        "probe_tokens": _mean([p["tokens"] for p in probes]),
        "unit": overall[_cell_name("single", 1)]["mean_tokens"],
        "oracle": oracle,
    }


def _choose(cfg: AllocateConfig, fit: dict, n_val: int) -> list[dict]:
    """Per token budget: the allocation (one cell per bin) and the best single cell, with validation numbers;
    oracle cells are never chosen."""
    cells, sizes = fit["cells"], fit["sizes"]
    selectable = {name: c for name, c in cells.items() if name not in fit["oracle"]}
    choices = []
    for units in cfg.budget_units():
        tokens = units * fit["unit"]
        alloc = choose_allocation(selectable, sizes, tokens - fit["probe_tokens"])
        single = choose_single({n: c for n, c in fit["overall"].items() if n not in fit["oracle"]}, tokens)
        val_alloc = None
        if alloc is not None:
            picked = [(n, cells[c][k]) for k, (n, c) in enumerate(zip(sizes, alloc))]
            val_alloc = {
                "accuracy": sum(n * (c["accuracy"] or 0.0) for n, c in picked) / n_val,
                "truncation_rate": sum(n * (c["truncation_rate"] or 0.0) for n, c in picked) / n_val,
                "mean_tokens": fit["probe_tokens"] + sum(n * c["mean_tokens"] for n, c in picked) / n_val,
            }
        choices.append(
            {
                "budget_units": units,
                "token_budget": tokens,
                "allocation": alloc,
                "single": single,
                "validation": {"allocation": val_alloc, "single": fit["overall"].get(single)},
            }
        )
    return choices


def _apply_to_heldout(
    cfg: AllocateConfig, strategies: Strategies, verifier, held, fit: dict, choices: list[dict], progress: bool
) -> tuple[list[dict], list[int], list[dict]]:
    """Step 4: probe held-out, bin with the validation edges, run each problem's chosen cell (and the
    baseline's on every problem); each choice gains its ``heldout`` numbers."""
    m, names = cfg.probe_samples, fit["names"]
    probes = probe(strategies, held, m, cfg.seed, cfg.batch_problems)
    bins = [bin_of(p["agreement"], fit["edges"]) for p in probes]
    needed = {c for ch in choices for c in (ch["allocation"] or []) + ([ch["single"]] if ch["single"] else [])}
    plan = [(s, b) for s, b in allocate_plan(cfg) if _cell_name(s, b) in needed]
    rows = _run_plan(cfg, strategies, verifier, held, [p["agreement"] for p in probes], bins, progress, plan, names)
    rows += _vote_rows(verifier, held, probes, bins, names, m)
    for r in rows:
        r["agreement"] = r.pop("pass_rate")
    by_cell = _per_problem(rows)
    for ch in choices:
        result = {}
        if ch["allocation"]:
            picked = [by_cell[ch["allocation"][k]][q.id] for q, k in zip(held, bins)]
            result["allocation"] = {
                "accuracy": _mean([r["correct"] for r in picked]),
                "truncation_rate": _mean([r["truncated"] for r in picked]),
                "mean_tokens": _mean([r["tokens"] + p["tokens"] for r, p in zip(picked, probes)]),
            }
        if ch["single"]:
            result["single"] = _stats([by_cell[ch["single"]][q.id] for q in held])
        ch["heldout"] = result
    return rows, bins, probes


def _vote_rows(verifier, problems, probes: list[dict], bins: list[int], names: list[str], m: int) -> list[dict]:
    """Result rows of the ``probe_vote`` cell: the probe's majority answer, at no tokens beyond the probe."""
    verdicts = verifier.verify_batch([p["vote"] for p in probes], [q.reference for q in problems])
    return [
        {
            "strategy": PROBE_VOTE,
            "budget": m,
            "problem_id": q.id,
            "bin": names[k],
            "pass_rate": p["agreement"],
            "oracle": False,
            "answer": answer_of(p["vote"]),
            "completion": p["vote"],
            **judged(p["vote"], v),
            "tokens": 0,
            "prm_calls": 0,
            "verifier_calls": 1,  # the vote's verdict
            "seconds": 0.0,
            "candidates": m,
        }
        for q, p, k, v in zip(problems, probes, bins, verdicts)
    ]


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def _stats(rows: list[dict]) -> dict:
    if not rows:
        return {"accuracy": None, "truncation_rate": None, "mean_tokens": 0.0, "problems": 0}
    return {
        "accuracy": _mean([r["correct"] for r in rows]),
        "truncation_rate": _mean([r["truncated"] for r in rows]),
        "mean_tokens": _mean([r["tokens"] for r in rows]),
        "problems": len(rows),
    }


def allocation_table(summary: dict) -> str:
    names = list(summary["bins"])
    lines = [
        "| token budget (samples) | best single cell (validation) | held-out acc | truncated | held-out tokens | "
        "allocation per bin: " + " / ".join(names) + " | held-out acc | truncated | held-out tokens (probe "
        "included) |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for ch in summary["choices"]:
        h = ch["heldout"]
        s = h.get("single") or {}
        a = h.get("allocation") or {}
        alloc = " / ".join(ch["allocation"]) if ch["allocation"] else "(the probe alone exceeds the budget)"
        lines.append(
            f"| {ch['budget_units']:g} ({ch['token_budget']:.0f} tokens) | {ch['single'] or '-'} | "
            f"{_f(s.get('accuracy'))} | {_f(s.get('truncation_rate'))} | {_f(s.get('mean_tokens'), 1)} | "
            f"{alloc} | {_f(a.get('accuracy'))} | {_f(a.get('truncation_rate'))} | "
            f"{_f(a.get('mean_tokens'), 1)} |"
        )
    sizes = ", ".join(
        f"{n}: {v['validation_problems']} validation / {v['heldout_problems']} held-out"
        for n, v in summary["bins"].items()
    )
    oracles = summary.get("oracle_cells") or []
    if oracles:
        overall = summary["validation_overall"]
        bound = ", ".join(
            f"{n} {_f(overall[n]['accuracy'])} (truncated {_f(overall[n]['truncation_rate'])})"
            for n in oracles
            if n in overall
        )
        lines += [
            "",
            f"[oracle] cells read the reference answer (scorer=verifier or mcts_value=verifier), an upper "
            f"bound never chosen above; validation accuracy: {bound}.",
        ]
    lines += [
        "",
        f"Bins by the agreement of {summary['probe_samples']} probe samples (no reference): {sizes}.",
        f"One sample costs {summary['unit_tokens']:.1f} tokens on validation; the probe "
        f"{summary['probe_tokens']['validation']:.1f}.",
    ]
    for n, per_bin in summary.get("ratio_sweep", {}).items():
        counts = list(next(iter(per_bin.values())))
        lines += [
            "",
            f"Sequential/parallel ratio at {n} attempts (validation accuracy; C chains of {n}/C attempts, "
            "C = 1 all sequential):",
            "",
            "| bin | " + " | ".join(f"C = {c}" for c in counts) + " |",
            "|---|" + "---:|" * len(counts),
        ]
        lines += [f"| {name} | " + " | ".join(_f(acc[c]) for c in counts) + " |" for name, acc in per_bin.items()]
    return "\n".join(lines) + "\n"


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
