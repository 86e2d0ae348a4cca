"""``veriloop search --dry-run``: what a search will cost, worked out from its config, the models' shapes and the
problems, without drawing, scoring or writing anything (docs/configuration.md#dry-run).

It loads what the search loads (``run.search_inputs``: the task, the policy, the PRM, the problems), so it refuses
what the search would refuse, in the same words.  Per strategy and budget, per problem, each an upper bound
(``b`` the budget, ``e = expand``, ``S = max_steps``; a generation is one sampled or greedy continuation of at most
``sampling.max_new_tokens`` tokens, a whole solution or one step):

* ``single`` 1 generation; ``majority`` ``b``; ``best_of_n`` and ``weighted_vote`` ``b``, each scored once;
* ``beam``: ``e' = min(e, b)`` steps sampled per beam, ``w = max(1, b // e')`` beams kept: ``e'`` candidates at
  the first step and ``w x e'`` at each later one, each valued once; the beams left after ``S`` steps are
  completed greedily (``w`` more generations, scored); ``lookahead`` rolls each candidate ``lookahead`` greedy
  steps on before valuing it;
* ``mcts``: ``b`` simulations, each expanding one node by ``e`` steps and valuing one node (by the PRM, or by the
  verifier on one more generation that completes it), then one greedy completion of the answer's path;
* ``revision``: ``b`` attempts (``revision_chains`` sampled, the rest revised), every one judged by the verifier
  for the drift report and, with ``revision_select prm``, scored;
* ``rstar``: ``b`` rollouts, each expanding at most one node per level (``S`` levels) with A1 and A2 (``e`` each)
  and, on a task with sub-questions, A3 (``e``) and A4 (``rstar_reanswer``); the discriminator completes each
  terminal trajectory once.  Loose: a tree that revisits its nodes expands far fewer, and the draws say so.

Every cell's chosen solution is judged once by the verifier.  Memory: the weights of every model the search holds
(policy, PRM, revision model, discriminator) and the KV cache of the policy's largest sampler call: rows x
(longest prompt + the prefix a row carries + ``max_new_tokens``) x layers x 2 x key/value width, the length
capped at the model's context (``training.dry_run``'s shapes; the revision model's and a discriminator's calls are
counted at the policy's shapes).  A PRM's scoring pass (64 sequences at a time) is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from veriloop.registry import STRATEGIES
from veriloop.search.run import (
    BIN_BATCH,
    SearchConfig,
    bin_names,
    discriminator_model,
    problems_per_call,
    revision_model,
    search_inputs,
    search_plan,
    tagged,
)
from veriloop.search.strategies import SearchSettings
from veriloop.tasks.base import split_problems
from veriloop.training.dry_run import gib, model_shapes
from veriloop.training.run.preflight import context_of


@dataclass(frozen=True)
class CellCost:
    """What one strategy at one budget implies for one problem, each an upper bound."""

    draws: str  # what it samples and how it chooses, in the strategy's own words
    generations: int  # sampler rows, each at most sampling.max_new_tokens tokens
    prm_calls: int
    verifier_calls: int  # the chosen solution's verdict included
    rows_per_call: int  # rows of its largest sampler call for one problem
    carried: int = 0  # generations' worth of text a row carries before its new tokens (a prefix, earlier attempts)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _single(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    return CellCost("1 sample (the budget is ignored)", 1, 0, 1, 1)


def _majority(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    return CellCost(f"{_n(b, 'sample')}, the most frequent answer", b, 0, 1, b)


def _ranked(choice: str):
    def cost(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
        prm = cfg.scorer == "prm"  # else the verifier scores each sample against the reference
        return CellCost(
            f"{_n(b, 'sample')}, {choice} by the {'PRM' if prm else 'verifier'}",
            b,
            b if prm else 0,
            1 + (0 if prm else b),
            b,
        )

    return cost


def _beam(cfg: SearchConfig, st: SearchSettings, b: int, task, lookahead: int = 0) -> CellCost:
    expand = min(st.expand, b)
    width = max(1, b // expand)
    candidates = expand + (st.max_steps - 1) * width * expand  # one beam at the first step
    ahead = f", each valued {_n(lookahead, 'greedy step')} ahead" if lookahead else ""
    draws = (
        f"{_n(width, 'beam')} x {_n(expand, 'step')} = {_n(width * expand, 'candidate')} per step{ahead}, "
        f"depth <= {st.max_steps}; the best finished by the PRM"
    )
    # the beams still open after max_steps are completed greedily: width more generations, each scored
    return CellCost(draws, candidates * (1 + lookahead) + width, candidates + width, 1, width * expand, st.max_steps)


def _lookahead(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    return _beam(cfg, st, b, task, lookahead=max(1, st.lookahead))  # as the strategy reads it


def _mcts(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    verifier = st.mcts_value == "verifier"  # a node is completed (one more generation) and judged
    draws = (
        f"{_n(b, 'simulation')}, each expanding a node by {_n(st.expand, 'step')}, depth <= {st.max_steps}, "
        f"valued by the {'verifier' if verifier else 'PRM'}; the most visited path"
    )
    return CellCost(
        draws,
        b * st.expand + (b if verifier else 0) + 1,
        0 if verifier else b,
        1 + (b if verifier else 0),
        st.expand,
        st.max_steps,
    )


def _revision(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    chains = min(st.revision_chains, b)
    draws = (
        f"{_n(chains, 'chain')}, {_n(b, 'attempt')} in all ({chains} sampled, {b - chains} revised, each "
        f"reading up to {st.revision_history}); chosen by {st.revision_select}"
    )
    # every attempt is judged against the reference for the drift report (right -> wrong, wrong -> right)
    return CellCost(draws, b, b if st.revision_select == "prm" else 0, 1 + b, chains, st.revision_history)


def _rstar(cfg: SearchConfig, st: SearchSettings, b: int, task) -> CellCost:
    subs = getattr(task, "sub_questions", None) is not None  # A3 and A4 apply only where a task decomposes
    per_node = 2 * st.expand + (st.expand + st.rstar_reanswer if subs else 0)
    expansions = b * st.max_steps
    terminals = expansions * 2 * st.expand  # A1's finished steps and A2's solutions, each confirmed once
    actions = "A1, A2, A3 x expand, A4 x rstar_reanswer" if subs else "A1, A2 x expand"
    draws = (
        f"{_n(b, 'rollout')}, up to {_n(expansions, 'expansion')} ({actions}: up to {_n(per_node, 'sample')} "
        "each); each terminal trajectory completed once by the discriminator; a loose bound"
    )
    rows = max(st.expand, st.rstar_reanswer if subs else 1)
    return CellCost(draws, expansions * per_node + terminals + 1, 0, 1, rows, st.max_steps)


COSTS = {
    "single": _single,
    "majority": _majority,
    "best_of_n": _ranked("the best"),
    "weighted_vote": _ranked("a vote weighted"),
    "beam": _beam,
    "lookahead": _lookahead,
    "mcts": _mcts,
    "revision": _revision,
    "rstar": _rstar,
}


def oracle(cfg: SearchConfig, st: SearchSettings, strategy: str) -> bool:
    """As ``Strategies.uses_reference``: it ranks with the verifier scorer, or values nodes with the verifier."""
    s = STRATEGIES.get(strategy)
    return (s.needs_scorer(st) and cfg.scorer == "verifier") or s.needs_outcome_check(st)


@dataclass(frozen=True)
class Engine:
    """The policy's shapes, and what it and the other models the search holds weigh."""

    shapes: dict
    context: int | None
    dtype: str
    element: int  # bytes of one weight (and one cached key or value)
    params: int
    weights: int  # bytes of the policy's weights
    others: dict  # name -> bytes of another model's weights (PRM, revision model, discriminator)

    def row_tokens(self, longest: int, new: int, carried: int) -> int:
        tokens = longest + (carried + 1) * new
        return min(tokens, self.context) if self.context else tokens

    def kv_cache(self, rows: int, tokens: int) -> int:
        return rows * tokens * self.shapes["layers"] * 2 * self.shapes["kv_dim"] * self.element


def _bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _engine(cfg: SearchConfig, policy, prm) -> Engine:
    others = {}
    if prm is not None:
        others["PRM"] = _bytes(prm)
    if cfg.revision_policy:
        others["revision model"] = _bytes(revision_model(cfg).model)
    if "rstar" in cfg.strategy_list() and cfg.discriminator:  # else the policy itself judges
        others["discriminator"] = _bytes(discriminator_model(cfg, policy).model)
    model = policy.model
    first, params = next(model.parameters()), sum(p.numel() for p in model.parameters())
    return Engine(
        model_shapes(model),
        context_of(model),
        str(first.dtype).removeprefix("torch."),
        first.element_size(),
        params,
        _bytes(model),
        others,
    )


def _cell(cfg: SearchConfig, inputs, engine: Engine, longest: int, strategy: str, budget: int) -> dict:
    """One (strategy, budget) cell's row: per problem and over every problem, at most."""
    st, n, new = inputs.settings, len(inputs.problems), cfg.sampling.max_new_tokens
    name = tagged(strategy, {"oracle": oracle(cfg, st, strategy)})
    estimate = COSTS.get(strategy)
    if estimate is None:  # a plugin's strategy: its costs are its own
        return {"strategy": name, "budget": budget, "problems": n, "draws": "a plugin strategy: not estimated"}
    c = estimate(cfg, st, budget, inputs.task)
    rows = min(problems_per_call(cfg, strategy, cfg.scorer == "verifier"), n) * c.rows_per_call
    tokens = engine.row_tokens(longest, new, c.carried)
    return {
        "strategy": name,
        "budget": budget,
        "problems": n,
        "generations": c.generations,
        "tokens": c.generations * new,
        "all tokens": n * c.generations * new,
        "PRM calls": c.prm_calls,
        "verifier calls": c.verifier_calls,
        "rows": rows,
        "row tokens": tokens,
        "KV cache": engine.kv_cache(rows, tokens),
        "draws": c.draws,
    }


def _bins(cfg: SearchConfig, inputs, engine: Engine, longest: int) -> dict:
    """The difficulty bins' draws, as a cell's row: ``bin_samples`` whole solutions per problem, each judged."""
    n, k, new = len(inputs.problems), cfg.bin_samples, cfg.sampling.max_new_tokens
    rows, tokens = min(BIN_BATCH, n) * k, engine.row_tokens(longest, new, 0)
    return {
        "problems": n,
        "generations": k,
        "tokens": k * new,
        "all tokens": n * k * new,
        "PRM calls": 0,
        "verifier calls": k,
        "rows": rows,
        "row tokens": tokens,
        "KV cache": engine.kv_cache(rows, tokens),
    }


def plan(cfg: SearchConfig, *, policy=None, prm=None, task=None) -> tuple[list[tuple[str, str]], list[dict]]:
    """(quantity, value) rows, and one row per (strategy, budget) cell (``_cell``); ``policy``, ``prm`` and ``task``
    as ``run_search`` takes them (loaded when None)."""
    inputs = search_inputs(cfg, policy=policy, prm=prm, task=task)
    engine = _engine(cfg, inputs.policy, inputs.prm)
    longest = max(len(inputs.policy.encode_prompt(p.prompt)) for p in inputs.problems)
    cells = [_cell(cfg, inputs, engine, longest, s, b) for s, b in search_plan(cfg)]
    bins = _bins(cfg, inputs, engine, longest)
    return _summary(cfg, inputs, engine, longest, cells, bins), cells


def _summary(cfg: SearchConfig, inputs, engine: Engine, longest: int, cells: list[dict], bins: dict) -> list:
    sh, n, split = engine.shapes, len(inputs.problems), len(split_problems(inputs.task, cfg.split))
    names = bin_names(cfg.edge_list())
    context = f"context {engine.context} positions" if engine.context else "no context limit named"
    known = [c for c in cells if "generations" in c] + [bins]
    total = {
        k: sum(c["problems"] * c[k] for c in known) for k in ("generations", "tokens", "PRM calls", "verifier calls")
    }
    unknown = [f"{c['strategy']}@{c['budget']}" for c in cells if "generations" not in c]
    return [
        (
            "policy",
            f"{cfg.policy}: {engine.params / 1e6:.2f}M parameters, hidden {sh['hidden']}, {sh['layers']} "
            f"layers, vocabulary {sh['vocab']}, {context}, {engine.dtype}",
        ),
        (
            "problems",
            f"{n} of task {inputs.task.name}'s {split} {cfg.split} problems; longest prompt {longest} "
            f"tokens; a generation is at most {cfg.sampling.max_new_tokens} tokens (sampling.max_new_tokens)",
        ),
        (
            "difficulty bins",
            f"{len(names)} ({', '.join(names)}): {cfg.bin_samples} samples per problem, "
            f"{n * bins['generations']:,} in all, at most {bins['all tokens']:,} tokens",
        ),
        ("scorer", _scorer(cfg, inputs)),
        ("cells", f"{len(cells)} (strategies x budgets; single at budget 1 only)"),
        (
            "in all, at most",
            f"{total['generations']:,} generations, {total['tokens']:,} tokens, "
            f"{total['PRM calls']:,} PRM calls, {total['verifier calls']:,} verifier calls (the bins' "
            "included)" + (f"; not counted: {', '.join(unknown)}" if unknown else ""),
        ),
        ("memory, estimated", _memory(engine, cells, bins)),
    ]


def _scorer(cfg: SearchConfig, inputs) -> str:
    ranked = [s for s in cfg.strategy_list() if inputs.settings.needs_scorer(s)]
    if not ranked:
        return "none: no strategy of this set ranks with one"
    if cfg.scorer == "verifier":
        return f"the outcome verifier ranks {', '.join(ranked)}: it reads the reference (an oracle, an upper bound)"
    params = sum(p.numel() for p in inputs.prm.parameters())
    return (
        f"PRM {cfg.prm} ({params / 1e6:.2f}M parameters, aggregation {inputs.settings.aggregation}) ranks "
        f"{', '.join(ranked)}"
    )


def _memory(engine: Engine, cells: list[dict], bins: dict) -> str:
    calls = [("the difficulty bins", bins)] + [(f"{c['strategy']}@{c['budget']}", c) for c in cells if "rows" in c]
    where, big = max(calls, key=lambda x: x[1]["KV cache"])  # the first of the largest
    total = engine.weights + big["KV cache"] + sum(engine.others.values())
    others = "".join(f", {name} weights {gib(b)}" for name, b in engine.others.items())
    return (
        f"{gib(total)}: policy weights {gib(engine.weights)}, KV cache {gib(big['KV cache'])} of its largest "
        f"call ({where}: {big['rows']} rows of up to {big['row tokens']} tokens){others}"
    )


COLUMNS = (
    "strategy",
    "budget",
    "problems",
    "generations",
    "tokens",
    "all tokens",
    "PRM calls",
    "verifier calls",
    "largest call",
    "KV cache",
    "draws",
)


def _table(cells: list[dict]) -> list[str]:
    def text(c: dict, k: str) -> str:
        if k == "largest call":
            return f"{c['rows']} x {c['row tokens']}" if "rows" in c else "-"
        if k == "KV cache":
            return gib(c[k]) if k in c else "-"
        return f"{c[k]:,}" if isinstance(c.get(k), int) else str(c.get(k, "-"))

    table = [list(COLUMNS)] + [[text(c, k) for k in COLUMNS] for c in cells]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS) - 1)]
    # numbers right-aligned (the strategy's name first, the free-text draws last)
    cell = lambda i, x: x.ljust(widths[i]) if i == 0 else x.rjust(widths[i])  # noqa: E731
    return ["  ".join([*(cell(i, x) for i, x in enumerate(r[:-1])), r[-1]]) for r in table]


def dry_run(cfg: SearchConfig) -> str:
    """What ``veriloop search --dry-run`` prints."""
    rows, cells = plan(cfg)
    width = max(len(k) for k, _ in rows)
    lines = ["veriloop search --dry-run: nothing is sampled, scored or written, no run directory is made", ""]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [
        "",
        "per (strategy, budget); generations, tokens, PRM and verifier calls per problem, all tokens over "
        "every problem, each at most; largest call: rows x tokens of one sampler call",
        "",
    ]
    return "\n".join(lines + _table(cells))
