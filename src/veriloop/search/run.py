"""``veriloop search``: accuracy against compute for each strategy and budget, by difficulty.

Difficulty bins come from the policy's own pass rate on each held-out problem over
``bin_samples`` samples (drawn with a seed of their own, apart from the strategies' draws).
Each (budget, problem) has its own seed, shared by every strategy (common random numbers: at
equal N, best-of-N, majority and weighted vote choose among the same N samples, so their
differences are the selection rule's alone); any cell can be re-run by itself.
Correctness is the task's outcome verifier on the chosen solution; a solution the token budget cut
(finish ``length``) is not answered (outcome ``truncated``), and every accuracy has its
``truncation_rate`` beside it.  A strategy that reads the reference (``scorer=verifier``,
``mcts_value=verifier``) is an oracle: its cells carry ``oracle: true``, the table and the plot tag
them, and the compute-optimal choice never picks them (an upper bound, not a test-time method).
The run directory gets:

* ``summary.json``: per strategy and budget ``accuracy``, ``truncation_rate``, ``oracle``,
  ``mean_tokens``, ``mean_prm_calls``, ``mean_verifier_calls`` (the chosen solution's verdict included),
  ``mean_seconds`` and accuracy (and truncation) per bin; bin edges
  and sizes; the compute-optimal choice per bin (best accuracy within each token budget, oracles
  excluded);
* ``results.jsonl``: one row per (strategy, budget, problem) with the answer, verdict, outcome and cost;
* ``table.md`` and ``accuracy_vs_tokens.png``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch

from veriloop.errors import InputError
from veriloop.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from veriloop.logs import progress as progress_display
from veriloop.models.loading import load_policy
from veriloop.models.solutions import sample_solutions
from veriloop.registry import STRATEGIES
from veriloop.rollout.thinking import with_thinking_end
from veriloop.search.config import (  # the options (search/config.py), re-exported where commands import them
    SEARCH_COMMON,
    STRATEGY_OPTIONS,
    STRATEGY_SCOPE,
    WHOLE_SOLUTION_STRATEGIES,
    SearchConfig,
)
from veriloop.search.lm import LMProposer, PRMScorer, VerifierScorer
from veriloop.search.strategies import SearchSettings, Strategies, is_truncated
from veriloop.seeding import derive_seed
from veriloop.tasks.base import split_problems
from veriloop.training.run.compute import parameter_counts, search_compute
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct

__all__ = [
    "SEARCH_COMMON",
    "STRATEGY_OPTIONS",
    "STRATEGY_SCOPE",
    "WHOLE_SOLUTION_STRATEGIES",
    "SearchConfig",
    "run_search",
]


def bin_names(edges: list[float]) -> list[str]:
    bounds = [0.0, *edges, 1.0]
    return [f"pass {bounds[i]:.2f}-{bounds[i + 1]:.2f}" for i in range(len(bounds) - 1)]


def bin_of(value: float, edges: list[float]) -> int:
    """The bin of ``value`` (a pass rate here, a probe's agreement in ``allocate``): how many edges it reaches."""
    return sum(value >= e for e in edges)


BIN_BATCH = 64  # problems per sampler call of the difficulty bins' samples


def difficulty(policy, problems, verifier, cfg: SearchConfig) -> list[float]:
    """Each problem's pass rate over ``bin_samples`` samples of the policy."""
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "bins"))
    rates = []
    # the bins are the policy's unbudgeted pass rate (a thinking budget is what the strategies are measured under)
    unbudgeted = replace(cfg.sampling, max_thinking_tokens=0, thinking_end="")
    for chunk, texts, finish in sample_solutions(policy, problems, unbudgeted, gen, cfg.bin_samples, batch=BIN_BATCH):
        refs = [chunk[j // cfg.bin_samples].reference for j in range(len(texts))]
        ok = [is_correct(v) and f != "length" for v, f in zip(verifier.verify_batch(texts, refs), finish)]
        rates += [sum(ok[j : j + cfg.bin_samples]) / cfg.bin_samples for j in range(0, len(ok), cfg.bin_samples)]
    return rates


def compute_optimal(cells: dict, names: list[str]) -> dict:
    """Per bin: for each token budget (the cost levels measured), the best strategy that fits in it.

    Oracle cells (``oracle``: they read the reference) are never chosen, nor set a cost level.  Ties in
    accuracy go to the cheaper cell, then to the one listed first (``single`` before the rest).
    """
    points = [
        (c["mean_tokens"], i, s, b)
        for i, (s, per) in enumerate(cells.items())
        for b, c in per.items()
        if not c.get("oracle")
    ]
    levels = sorted({t for t, _, _, _ in points})
    out = {}
    for k, name in enumerate(names):
        rows = []
        for level in levels:
            fits = [
                (cells[s][b]["by_bin"][k]["accuracy"], -t, -i, s, b)
                for t, i, s, b in points
                if t <= level and cells[s][b]["by_bin"][k]["problems"]
            ]
            if fits:
                acc, neg_t, _, s, b = max(fits)
                rows.append(
                    {
                        "token_budget": level,
                        "strategy": s,
                        "budget": int(b),
                        "accuracy": acc,
                        "truncation_rate": cells[s][b]["by_bin"][k].get("truncation_rate"),
                        "mean_tokens": -neg_t,
                    }
                )
        out[name] = rows
    return out


def run_search(cfg: SearchConfig, progress: bool = True, *, policy=None, prm=None, task=None) -> dict:
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task, verifier, policy, prm, settings, problems = search_inputs(cfg, policy=policy, prm=prm, task=task)
    strategies = _strategies(cfg, task, policy, prm, verifier, settings)
    edges, names = cfg.edge_list(), bin_names(cfg.edge_list())
    rates = difficulty(policy, problems, verifier, cfg)
    bins = [bin_of(r, edges) for r in rates]
    results, cells = _run_cells(cfg, strategies, verifier, problems, rates, bins, progress)
    summary = {
        "policy": cfg.policy,
        "prm": cfg.prm,
        "scorer": cfg.scorer,
        "task": task.name,
        "problems": len(problems),
        "bins": {
            n: {"problems": bins.count(k), "mean_pass_rate": _mean([r for r, x in zip(rates, bins) if x == k])}
            for k, n in enumerate(names)
        },
        "strategies": cells,
        "compute_optimal": compute_optimal(cells, names),
        "settings": {
            **settings.__dict__,
            "sampling": cfg.sampling.as_dict(),
            "bin_samples": cfg.bin_samples,
            "seed": cfg.seed,
        },
        "seconds": round(time.time() - t0, 1),
    }
    out_dir = Path(cfg.out)
    atomic_write_json(out_dir / "summary.json", summary)
    atomic_write_jsonl(out_dir / "results.jsonl", results)
    atomic_write_text(out_dir / "table.md", table(summary))
    model = getattr(policy, "model", None)  # (a scripted policy has no weights)
    params = parameter_counts(model)[0] if model is not None else 0
    atomic_write_json(out_dir / "compute.json", search_compute(cfg.policy, params, summary))
    plot(summary, out_dir / "accuracy_vs_tokens.png")
    return summary


class SearchInputs(NamedTuple):
    task: object
    verifier: object  # the task's outcome verifier
    policy: object
    prm: object | None
    settings: SearchSettings
    problems: list  # the first ``cfg.problems`` of the split


def search_inputs(cfg: SearchConfig, *, policy=None, prm=None, task=None) -> SearchInputs:
    """What a search reads before its first draw; loading it says the input errors a search says (``veriloop search
    --dry-run`` loads the same, so it refuses what the search would)."""
    task = task or cfg.task.build()
    verifier = get_verifier(task.default_verifier)
    policy = policy or load_policy(cfg.policy)
    if prm is None and cfg.prm:
        from veriloop.prm.model import load_prm

        prm = load_prm(cfg.prm)
    settings = _settings(cfg, prm)
    problems = split_problems(task, cfg.split)[: cfg.problems]
    if not problems:
        raise InputError(f"task {task.name!r} has no {cfg.split} problems to search on")
    return SearchInputs(task, verifier, policy, prm, settings, problems)


def _settings(cfg: SearchConfig, prm) -> SearchSettings:
    """The strategies' settings; an InputError if a chosen strategy needs a PRM and none is given."""
    aggregation = cfg.aggregation or (prm.meta.get("aggregation", "min") if prm is not None else "min")
    settings = cfg.settings(aggregation)
    scored = [s for s in cfg.strategy_list() if settings.needs_scorer(s)]
    if scored and prm is None and cfg.scorer == "prm":
        raise InputError(f"strategies {scored} score solutions with a PRM: give --prm DIR (from `veriloop prm train`)")
    return settings


def _strategies(cfg: SearchConfig, task, policy, prm, verifier, settings: SearchSettings) -> Strategies:
    splitter = getattr(task, "step_splitter", "lines")
    proposer = LMProposer(policy, with_thinking_end(cfg.sampling, task), splitter)
    reviser = LMProposer(revision_model(cfg), cfg.sampling, splitter) if cfg.revision_policy else None
    scorer = VerifierScorer(verifier) if cfg.scorer == "verifier" else PRMScorer(prm) if prm is not None else None
    discriminator = None
    if "rstar" in cfg.strategy_list():
        discriminator = LMProposer(discriminator_model(cfg, policy), cfg.sampling, splitter)
    return Strategies(
        proposer,
        scorer,
        settings,
        reviser=reviser,
        discriminator=discriminator,
        sub_questions=getattr(task, "sub_questions", None),
        splitter=splitter,
    )


def revision_model(cfg: SearchConfig):
    """The revision strategy's model (``--revision_policy``); None without one."""
    return load_policy(cfg.revision_policy) if cfg.revision_policy else None


def discriminator_model(cfg: SearchConfig, policy):
    """rstar's discriminator: ``--discriminator``'s policy, else the policy itself (drawing from a seed of its own)."""
    try:
        return load_policy(cfg.discriminator) if cfg.discriminator else policy
    except InputError as e:
        raise InputError(f"--discriminator: {e}") from None


def search_plan(cfg: SearchConfig) -> list[tuple[str, int]]:
    """Every (strategy, budget) cell of a search: ``single`` at budget 1 only."""
    return [(s, b) for s in cfg.strategy_list() for b in ([1] if s == "single" else cfg.budget_list())]


def _run_cells(
    cfg: SearchConfig,
    strategies: Strategies,
    verifier,
    problems,
    rates: list[float],
    bins: list[int],
    progress: bool,
    *,
    plan: list[tuple[str, int]] | None = None,
    names: list[str] | None = None,
) -> tuple[list[dict], dict]:
    """Every (strategy, budget) of ``plan`` (default: the search's) on every problem: the result rows, and
    per strategy and budget its cell (bins named ``names``, default those of ``cfg.bin_edges``)."""
    names = names or bin_names(cfg.edge_list())
    plan = plan or search_plan(cfg)
    bar = progress_display(total=len(plan) * len(problems), desc="search", unit="problem", enabled=progress)
    results, cells = [], {}
    for s, b in plan:
        rows, oracle = [], strategies.uses_reference(s)
        size = problems_per_call(cfg, s, isinstance(strategies.scorer, VerifierScorer))
        for start in range(0, len(problems), size):
            chunk = problems[start : start + size]
            for i, row in enumerate(_solve(cfg, strategies, verifier, s, b, chunk), start):
                rows.append(
                    {
                        "strategy": s,
                        "budget": b,
                        "problem_id": problems[i].id,
                        "bin": names[bins[i]],
                        "pass_rate": rates[i],
                        "oracle": oracle,
                        **row,
                    }
                )
            bar.update(len(chunk))
        results += rows
        cells.setdefault(s, {})[str(b)] = {**_cell(rows, bins, names), "oracle": oracle}
        bar.set_postfix(last=f"{s}@{b} acc={cells[s][str(b)]['accuracy']:.3f}")
    bar.close()
    return results, cells


def _solve(cfg: SearchConfig, strategies: Strategies, verifier, strategy: str, budget: int, problems) -> list[dict]:
    """One strategy at one budget on a batch of problems (``problems_per_call`` of them; one problem is a batch
    of one): each one's answer, whether it is right, and its cost."""
    # Common random numbers: every strategy at budget b on problem p starts from one seed, so best-of-N,
    # majority and weighted vote at equal N choose among the very same N samples; batched, each problem
    # keeps its own seed, so its draws are those it makes alone.
    strategies.proposer.reseed_many([derive_seed(cfg.seed, budget, p.id) for p in problems])
    if len(problems) == 1:
        _prepare_one(cfg, strategies, verifier, budget, problems[0])
        outs = [strategies.run(strategy, problems[0].prompt, budget)]
    else:
        outs = strategies.run_many(strategy, [p.prompt for p in problems], budget)
    verdicts = verifier.verify_batch([o.text for o in outs], [p.reference for p in problems])
    rows = [_result_row(out, verdict) for out, verdict in zip(outs, verdicts)]
    for row, out, p in zip(rows, outs, problems):
        if out.chains is not None:  # revision: what its rewrites did, judged against the reference
            row.update(revision_drift(out.chains, verifier, p.reference))
    return rows


def _prepare_one(cfg: SearchConfig, strategies: Strategies, verifier, budget: int, p) -> None:
    """What a strategy that searches one problem per call reads of that problem besides the proposer's seed:
    the revision model's and the discriminator's seeds, and its reference (the outcome check, the verifier scorer)."""
    if strategies.reviser is not None:
        strategies.reviser.reseed(derive_seed(cfg.seed, budget, p.id, "revise"))
    if strategies.discriminator is not None:
        strategies.discriminator.reseed(derive_seed(cfg.seed, budget, p.id, "discriminate"))
    strategies.outcome_check = lambda text, ref=p.reference: verifier.verify(text, ref).score
    if isinstance(strategies.scorer, VerifierScorer):
        strategies.scorer.reference = p.reference


def revision_drift(chains: list[list[str]], verifier, reference: str) -> dict:
    """What each revision did, judged against the reference (a report, never a choice): of the revisions
    of a right attempt, how many made it wrong; of a wrong one, how many made it right (a truncated attempt
    is not right)."""
    counts = {"revised_right": 0, "right_to_wrong": 0, "revised_wrong": 0, "wrong_to_right": 0}
    for chain in chains:
        verdicts = verifier.verify_batch(chain, [reference] * len(chain))
        ok = [is_correct(v) and not is_truncated(t) for v, t in zip(verdicts, chain)]
        for before, after in zip(ok, ok[1:]):
            if before:
                counts["revised_right"] += 1
                counts["right_to_wrong"] += not after
            else:
                counts["revised_wrong"] += 1
                counts["wrong_to_right"] += after
    return counts


def problems_per_call(cfg: SearchConfig, strategy: str, verifier_scores: bool) -> int:
    """``batch_problems`` where ``strategy`` serves several problems per call: it batches, and the scorer needs no
    per-problem reference (the verifier scorer, ``verifier_scores``, judges against one problem's at a time); else 1."""
    return cfg.batch_problems if STRATEGIES.get(strategy).batches and not verifier_scores else 1


def judged(text: str, verdict) -> dict:
    """Whether a chosen solution is right, was cut by the token budget, and its outcome: a truncated text is
    not answered (outcome ``truncated``), whatever the verifier reads in it."""
    cut = is_truncated(text)
    outcome = "truncated" if cut else verdict.outcome or ("correct" if is_correct(verdict) else "wrong")
    return {"correct": is_correct(verdict) and not cut, "truncated": cut, "outcome": outcome}


def _result_row(out, verdict) -> dict:
    """One problem's result: the chosen solution, whether the verifier accepts it, and its cost."""
    return {
        "answer": out.answer,
        "completion": out.text,
        **judged(out.text, verdict),
        "tokens": out.cost.tokens,
        "prm_calls": out.cost.prm_calls,
        "verifier_calls": out.cost.verifier_calls + 1,  # the search's own, and the chosen solution's verdict
        "seconds": round(out.cost.seconds, 4),
        "candidates": out.candidates,
        **({"considered": out.considered} if out.considered else {}),
        **({"tree": out.tree} if out.tree else {}),
    }


def _mean(xs) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _cell(rows: list[dict], bins: list[int], names: list[str]) -> dict:
    cell = {
        "accuracy": _mean([r["correct"] for r in rows]),
        "truncation_rate": _mean([r["truncated"] for r in rows]),
        "mean_tokens": _mean([r["tokens"] for r in rows]),
        "mean_prm_calls": _mean([r["prm_calls"] for r in rows]),
        "mean_verifier_calls": _mean([r.get("verifier_calls", 1) for r in rows]),
        "mean_seconds": _mean([r["seconds"] for r in rows]),
        "by_bin": [],
    }
    if rows and "revised_right" in rows[0]:  # revision: the drift of its chains, over every revision made
        right, wrong = sum(r["revised_right"] for r in rows), sum(r["revised_wrong"] for r in rows)
        cell["right_to_wrong_rate"] = round(sum(r["right_to_wrong"] for r in rows) / right, 4) if right else None
        cell["wrong_to_right_rate"] = round(sum(r["wrong_to_right"] for r in rows) / wrong, 4) if wrong else None
    for k in range(len(names)):
        sub = [r for r, x in zip(rows, bins) if x == k]
        cell["by_bin"].append(
            {
                "bin": names[k],
                "problems": len(sub),
                "accuracy": _mean([r["correct"] for r in sub]),
                "truncation_rate": _mean([r["truncated"] for r in sub]),
                "mean_tokens": _mean([r["tokens"] for r in sub]),
            }
        )
    return cell


def tagged(strategy: str, cell: dict) -> str:
    """The strategy's name, tagged ``[oracle]`` where it read the reference."""
    return f"{strategy} [oracle]" if cell.get("oracle") else strategy


def table(summary: dict) -> str:
    names = list(summary["bins"])
    head = (
        "| strategy | budget | accuracy | truncated | mean tokens | PRM calls | verifier calls | s/problem | "
        + " | ".join(names)
        + " |"
    )
    lines = [head, "|" + "---|" * (8 + len(names))]
    for s, per in summary["strategies"].items():
        for b, c in per.items():
            accs = " | ".join("-" if x["accuracy"] is None else f"{x['accuracy']:.3f}" for x in c["by_bin"])
            lines.append(
                f"| {tagged(s, c)} | {b} | {c['accuracy']:.3f} | {_rate(c.get('truncation_rate'))} | "
                f"{c['mean_tokens']:.1f} | {c['mean_prm_calls']:.1f} | {c.get('mean_verifier_calls') or 1:.1f} | "
                f"{c['mean_seconds']:.3f} | {accs} |"
            )
    oracles = sorted({s for s, per in summary["strategies"].items() for c in per.values() if c.get("oracle")})
    if oracles:
        lines += [
            "",
            f"[oracle]: {', '.join(oracles)} read the problem's reference answer (scorer=verifier or "
            "mcts_value=verifier): an upper bound, not a test-time method; never chosen below.",
        ]
    drift = [
        f"{s}@{b}: right -> wrong {_rate(c['right_to_wrong_rate'])}, wrong -> right {_rate(c['wrong_to_right_rate'])}"
        for s, per in summary["strategies"].items()
        for b, c in per.items()
        if "right_to_wrong_rate" in c
    ]
    if drift:
        lines += ["", "Revisions, judged against the reference: " + "; ".join(drift) + "."]
    sizes = ", ".join(f"{n}: {v['problems']} problems" for n, v in summary["bins"].items())
    lines += ["", f"Bins by the policy's own pass rate: {sizes}.", ""]
    lines += ["Compute-optimal per bin (best within each token budget, oracles excluded):", ""]
    for n, rows in summary["compute_optimal"].items():
        picks, last = [], None
        for r in rows:
            if (r["strategy"], r["budget"]) != last:
                picks.append(
                    f"<= {r['token_budget']:.1f} tokens: {r['strategy']}@{r['budget']} ({r['accuracy']:.3f}, "
                    f"truncated {_rate(r.get('truncation_rate'))})"
                )
                last = (r["strategy"], r["budget"])
        lines.append(f"- {n}: " + "; ".join(picks))
    return "\n".join(lines) + "\n"


def _rate(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    names = list(summary["bins"])
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(4.2 * (len(names) + 1), 3.8), sharey=True)
    for ax, k in zip(axes, [None, *range(len(names))]):
        for s, per in summary["strategies"].items():
            pts = []
            for c in per.values():
                acc = c["accuracy"] if k is None else c["by_bin"][k]["accuracy"]
                tok = c["mean_tokens"] if k is None else c["by_bin"][k]["mean_tokens"]
                if acc is not None:
                    pts.append((tok, acc))
            pts.sort()
            oracle = any(c.get("oracle") for c in per.values())
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=tagged(s, {"oracle": oracle}),
                linestyle="--" if oracle else "-",
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("mean tokens per problem (log scale)")
        ax.set_title("all problems" if k is None else names[k])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
