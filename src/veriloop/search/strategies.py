"""Test-time strategies: spend a budget of samples on one problem, return one answer and its cost.

Every strategy sees the policy through a *proposer* (``complete``: finish prefixes; ``step``:
extend prefixes by one step) and partial solutions through a *scorer* (step scores), so the
same code runs on a language model (``LMProposer``, ``PRMScorer``) and on scripted policies
in the tests.  Costs are counted where they arise: tokens by the proposer, scored sequences
(PRM calls) by the scorer, wall time by ``run``.

Each strategy has one implementation, over a batch of problems (``Strategy.run``): searching one problem
(``Strategies.run``) is a batch of one, drawing from the proposer's stream of problem 0.  A strategy whose
every step depends on the last (mcts, revision, rstar) searches one problem per call (``one_problem``).
The built-in strategies are the ``Strategy`` objects defined here and in ``veriloop.search.rstar``;
``veriloop/search/__init__.py`` registers them in ``STRATEGIES``.

Strategies (``budget`` is their one size knob):

* ``single``: one sample (the budget is ignored).
* ``best_of_n``: ``budget`` samples, the one with the highest scorer aggregate.
* ``majority``: ``budget`` samples, the most frequent final answer (equivalent answers
  grouped by their normalised value; samples without an answer do not vote; ties go to the
  answer seen first).
* ``weighted_vote``: as majority, each sample weighted by its PRM aggregate.
* ``beam``: ``budget`` candidates per step: keep ``budget // e`` beams, extend each by
  ``e = min(expand, budget)`` sampled steps, keep the candidates whose newest step scores highest; finished
  solutions leave the beam; the best finished one by aggregate wins.
* ``lookahead``: beam search that values a candidate step by the PRM score at the end of a
  greedy rollout of ``lookahead`` more steps (tokens of the rollouts are counted).
* ``mcts``: ``budget`` simulations of UCT (``Q + c sqrt(ln N_parent / (1 + N_child))``) over
  step prefixes; a new node is valued by the PRM (its newest step) or by the outcome verifier
  on one sampled completion; the answer follows the most visited children.
* ``revision``: ``revision_chains`` parallel chains holding ``budget`` attempts in all (lengths
  differ by at most one): each starts with a sampled attempt, then successive rewrites by a revision
  model (``veriloop.search.revision``), each conditioned on its chain's last ``revision_history``
  attempts; the answer is chosen over every attempt by PRM aggregate, majority vote, or as the last
  attempt (of the one chain; with several, the majority of their last attempts) (``revision_select``).
* ``rstar``: ``budget`` rollouts of rStar's MCTS over reasoning actions, outcome self-consistency as
  the only reward, mutual consistency with a discriminator choosing the answer (``veriloop.search.rstar``).

Truncation (seeds 003 section 1.1): a text whose generation the token budget stopped (finish ``length``)
is a ``Truncated`` string; it did not end, so it has no answer of the model's (``answer_of`` is None): it
never votes, a scorer's choice takes an ended solution over it whatever their scores (the finish reason
is known at test time), and chosen anyway (nothing ended) it scores as not answered.

Oracles (seeds 004 section 2.2: a verifier at test time is a learned judge, ORM or PRM, not the answer
key): a strategy that reads the problem's reference under its settings - the outcome verifier as the
scorer (``scorer=verifier``) or as MCTS's node value (``mcts_value=verifier``) - is an oracle
(``Strategies.uses_reference``), reported as an upper bound and never chosen against test-time methods.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from veriloop.errors import InputError
from veriloop.prm.model import aggregate
from veriloop.registry import STRATEGIES
from veriloop.search.revision import revision_prompt
from veriloop.verifiers.answers import answer_key


class Truncated(str):
    """A solution text whose generation stopped at the token budget (finish ``length``), not at its end."""


def is_truncated(text: str) -> bool:
    return isinstance(text, Truncated)


def answer_of(text: str) -> str | None:
    """The normalised final answer of ``text``; None for a truncated text (the budget cut it, not the model)."""
    return None if is_truncated(text) else answer_key(text)


@dataclass(frozen=True)
class Strategy:
    """A registered strategy: ``run(strategies, prompts, budget, costs) -> [Outcome per prompt]`` and what it needs.

    Problem k of ``prompts`` draws from the proposer's stream k (``reseed_many``) and counts into ``costs[k]``."""

    run: Callable[..., list[Outcome]]
    batches: bool = True  # several problems per call; else one (the caller reseeds every model per problem)
    needs_scorer: Callable[[SearchSettings], bool] = lambda settings: False  # ranks with a PRM under settings
    needs_reviser: bool = False  # a revision model (--revision_policy)
    # judges with the outcome verifier against the reference under settings (mcts_value=verifier): an oracle
    needs_outcome_check: Callable[[SearchSettings], bool] = lambda settings: False
    # the `veriloop search` options it reads besides the sampling ones: its SearchSettings fields, and prm /
    # scorer / aggregation when it can rank with a scorer (others set by the user are refused)
    reads: tuple[str, ...] = ()


@dataclass
class Cost:
    """What one problem cost: completion tokens generated, sequences scored by a PRM, texts judged by a verifier
    during the search (a rule-based one included: the verifier scorer, MCTS's verifier value), wall seconds.
    Tool calls: none (``veriloop search`` samples whole completions and refuses task.reasoning tool)."""

    tokens: int = 0
    prm_calls: int = 0
    verifier_calls: int = 0
    seconds: float = 0.0


@dataclass
class Outcome:
    text: str  # the chosen solution
    answer: str | None  # its normalised final answer
    cost: Cost
    candidates: int = 0  # finished solutions the strategy chose among
    chains: list[list[str]] | None = None  # revision: every chain's attempts, in order
    # what the run browser shows of the choice: each candidate {text, answer, score, chosen} (whole solutions),
    # and the search tree {id, parent (-1: the root), step, value, visits, kept, finished, chosen} (step-level)
    considered: list[dict] | None = None
    tree: list[dict] | None = None

    @property
    def truncated(self) -> bool:
        """The chosen text was cut by the token budget: it is not answered."""
        return is_truncated(self.text)


Job = tuple[int, str, list[str]]  # (problem k of the proposer's reseed_many, its prompt, prefixes to extend)


class Proposer(Protocol):
    def complete_many(self, jobs: list[Job], n: int, costs: list[Cost], greedy: bool = False) -> list[list[str]]:
        """Per job, ``n`` finished solutions per prefix (prefix + continuation), prefix-major order; job j draws
        from problem ``jobs[j][0]``'s stream and counts into ``costs[j]``."""

    def step_many(
        self, jobs: list[Job], n: int, costs: list[Cost], greedy: bool = False
    ) -> list[list[tuple[str, bool]]]:
        """Per job, ``n`` one-step extensions per prefix: (prefix + step, finished?), prefix-major order."""

    def complete(self, prompt: str, prefixes: list[str], n: int, cost: Cost, greedy: bool = False) -> list[str]:
        """``complete_many`` of one job of problem 0 (the stream ``reseed`` seeds)."""

    def step(
        self, prompt: str, prefixes: list[str], n: int, cost: Cost, greedy: bool = False
    ) -> list[tuple[str, bool]]:
        """``step_many`` of one job of problem 0."""


class Scorer(Protocol):
    reads_reference: bool  # judges against the problem's reference (an oracle), not as a learned scorer

    def step_scores(self, prompt: str, texts: list[str], cost: Cost) -> list[list[float]]:
        """Scores of every step of each text (``cost.prm_calls`` grows by ``len(texts)``)."""


@dataclass
class SearchSettings:
    """How the strategies search; ``veriloop search`` has one option of the same name for each."""

    expand: int = 4  # beam/lookahead/mcts: steps sampled per expanded node
    max_steps: int = 12  # beam/lookahead/mcts: longest solution in steps
    lookahead: int = 1  # lookahead: greedy steps rolled out before scoring
    uct_c: float = 1.0  # mcts exploration constant
    mcts_value: str = "prm"  # mcts: prm | verifier
    aggregation: str = "min"  # PRM aggregate used to choose among finished solutions
    revision_select: str = "prm"  # revision: prm | majority | last
    revision_history: int = 4  # revision: attempts of its chain the revision model reads, at most
    revision_chains: int = 1  # revision: parallel chains sharing the budget
    rstar_reanswer: int = 4  # rstar: samples whose majority re-answers a sub-question (action A4)
    rstar_rephrase: str = ""  # rstar A5: template naming {question} that asks for a restatement; '' = no A5
    rstar_subquestion: str = ""  # rstar A3: template naming {question} and {trace} that asks the next sub-question

    def needs_scorer(self, strategy: str) -> bool:
        """Whether ``strategy`` ranks solutions or steps with a scorer (a PRM) under these settings."""
        return STRATEGIES.get(strategy).needs_scorer(self)


@dataclass
class Strategies:
    proposer: Proposer
    scorer: Scorer | None = None
    settings: SearchSettings = field(default_factory=SearchSettings)
    outcome_check: Callable[[str], float] | None = None  # mcts_value=verifier: score of a finished text
    reviser: Proposer | None = None  # revision: the revision model, prompted with revision_prompt()
    discriminator: Proposer | None = None  # rstar: completes cut trajectories (None: the proposer itself)
    sub_questions: Callable[[str], list[str]] | None = None  # rstar A3: the task's sub-questions of a prompt
    splitter: str = "semicolon"  # how solutions split into steps (the task's step_splitter)

    def uses_reference(self, name: str) -> bool:
        """Whether strategy ``name`` reads the problem's reference here (an oracle): its scorer does and it
        scores with it, or it values nodes with the outcome verifier (``mcts_value=verifier``)."""
        strategy = STRATEGIES.get(name)
        scored = strategy.needs_scorer(self.settings) and getattr(self.scorer, "reads_reference", False)
        return scored or strategy.needs_outcome_check(self.settings)

    def run(self, name: str, prompt: str, budget: int) -> Outcome:
        """Strategy ``name`` on one problem: a batch of one, drawing from the proposer's stream of problem 0
        (what ``reseed`` seeds)."""
        return self._search(STRATEGIES.get(name), name, [prompt], budget)[0]

    def run_many(self, name: str, prompts: list[str], budget: int) -> list[Outcome]:
        """``run`` on several problems at once, for a strategy that batches (``Strategy.batches``): one sampler
        call and one PRM pass serve every problem's step.  The proposer's ``reseed_many`` gave problem k its
        generator; each problem's draws are those of its own ``run``.  A strategy that does not batch (mcts,
        revision, rstar) runs problem by problem (the caller reseeds it per problem).  ``Cost.seconds`` is the
        batch's wall time shared equally."""
        strategy = STRATEGIES.get(name)  # an unknown name: UnknownNameError listing the known ones
        if not strategy.batches:
            raise InputError(f"strategy {name!r} does not batch problems; run it problem by problem")
        return self._search(strategy, name, prompts, budget)

    def _search(self, strategy: Strategy, name: str, prompts: list[str], budget: int) -> list[Outcome]:
        if budget < 1:
            raise InputError(f"budget must be >= 1, got {budget}")
        if strategy.needs_reviser and self.reviser is None:
            raise InputError(f"strategy {name!r} needs a revision model (--revision_policy DIR)")
        if strategy.needs_scorer(self.settings) and self.scorer is None:
            raise InputError(f"strategy {name!r} needs a scorer (a PRM: --prm DIR)")
        costs, t0 = [Cost() for _ in prompts], time.perf_counter()
        outs = strategy.run(self, prompts, budget, costs)
        share = (time.perf_counter() - t0) / max(len(prompts), 1)
        for out, cost in zip(outs, costs):
            cost.seconds = share
            out.cost = cost
        return outs

    def _scores(self, jobs: list[tuple[str, list[str]]], costs: list[Cost]) -> list[list[list[float]]]:
        """Step scores of several problems' texts (``jobs``: prompt, texts), in one pass where the scorer can."""
        many = getattr(self.scorer, "step_scores_many", None)
        if many is not None:
            return many(jobs, costs)
        return [self.scorer.step_scores(prompt, texts, cost) for (prompt, texts), cost in zip(jobs, costs)]

    def _best(self, texts: list[str], step_scores: list[list[float]], cost: Cost) -> Outcome:
        """The highest aggregate among the solutions that ended (a truncated one only if none did)."""
        scores = [aggregate(sc, self.settings.aggregation) for sc in step_scores]
        best = max(range(len(texts)), key=lambda i: (not is_truncated(texts[i]), scores[i]))  # first of the ties
        # every copy of the chosen text is marked: which of identical samples won a tie is float noise
        considered = [
            {"text": t, "answer": answer_of(t), "score": round(sc, 5), "chosen": t == texts[best]}
            for t, sc in zip(texts, scores)
        ]
        return Outcome(texts[best], answer_of(texts[best]), cost, len(texts), considered=considered)

    # -------------------------------------------------------------- whole-solution strategies

    def _samples(self, prompts, n, costs) -> list[list[str]]:
        """``n`` whole solutions of every problem, in one sampler call."""
        return self.proposer.complete_many([(k, p, [""]) for k, p in enumerate(prompts)], n, costs)

    def _single(self, prompts, budget, costs):
        return [Outcome(t[0], answer_of(t[0]), c, 1) for t, c in zip(self._samples(prompts, 1, costs), costs)]

    def _best_of_n(self, prompts, budget, costs):
        texts = self._samples(prompts, budget, costs)
        scores = self._scores(list(zip(prompts, texts)), costs)
        return [self._best(t, sc, c) for t, sc, c in zip(texts, scores, costs)]

    def _majority(self, prompts, budget, costs):
        texts = self._samples(prompts, budget, costs)
        return [self._vote(t, [1.0] * len(t), c) for t, c in zip(texts, costs)]

    def _weighted_vote(self, prompts, budget, costs):
        texts = self._samples(prompts, budget, costs)
        scores = self._scores(list(zip(prompts, texts)), costs)
        return [
            self._vote(t, [aggregate(x, self.settings.aggregation) for x in sc], c)
            for t, sc, c in zip(texts, scores, costs)
        ]

    def _vote(self, texts: list[str], weights: list[float], cost: Cost) -> Outcome:
        """The answer of the largest total weight; a sample without an answer (a truncated one included) does not
        vote.  No answer at all: the first text that ended (else the first), unanswered."""
        totals: dict[str, float] = {}
        first: dict[str, str] = {}
        for t, w in zip(texts, weights):
            key = answer_of(t)
            if key is None:
                continue
            totals[key] = totals.get(key, 0.0) + w
            first.setdefault(key, t)
        considered = [{"text": t, "answer": answer_of(t), "score": round(w, 5)} for t, w in zip(texts, weights)]
        if not totals:
            return Outcome(
                next((t for t in texts if not is_truncated(t)), texts[0]), None, cost, len(texts), considered=considered
            )
        best = max(totals, key=lambda k: totals[k])  # dicts keep insertion order: ties go to the first seen
        for c in considered:  # every sample of the winning answer is chosen (its first one is the text shown)
            total = totals.get(c["answer"])
            c["chosen"], c["answer_total"] = c["answer"] == best, None if total is None else round(total, 5)
        return Outcome(first[best], best, cost, len(texts), considered=considered)

    # -------------------------------------------------------------- step-level search

    def _beam(self, prompts, budget, costs, lookahead: int = 0):
        """Beam search on every problem in lockstep: each round one sampler call extends every live
        problem's beams, one PRM pass values every problem's candidates."""
        expand = min(self.settings.expand, budget)  # budget = candidates per step = beams x expansions
        width = max(1, budget // expand)
        beams = [[""] for _ in prompts]
        finished: list[list[str]] = [[] for _ in prompts]
        trees = [SearchTree() for _ in prompts]
        live = list(range(len(prompts)))  # problems whose search goes on
        for _ in range(self.settings.max_steps):
            if not live:
                break
            cands = self.proposer.step_many([(k, prompts[k], beams[k]) for k in live], expand, [costs[k] for k in live])
            opens = {}
            for k, cand in zip(live, cands):
                trees[k].extend(beams[k], expand, cand)
                finished[k] += [t for t, f in cand if f]
                open_ = list(dict.fromkeys(t for t, f in cand if not f))  # identical prefixes once
                if open_:
                    opens[k] = open_
            live = list(opens)
            if not live:
                break
            if lookahead:
                rolled = self._rollout([(k, prompts[k], opens[k]) for k in live], lookahead, costs)
                jobs = [(prompts[k], rolled[i]) for i, k in enumerate(live)]
            else:
                jobs = [(prompts[k], opens[k]) for k in live]
            values = self._scores(jobs, [costs[k] for k in live])
            for k, vals in zip(live, values):
                newest = [x[-1] if x else 0.0 for x in vals]
                order = sorted(range(len(opens[k])), key=lambda i: -newest[i])
                beams[k] = [opens[k][i] for i in order[:width]]
                trees[k].valued(opens[k], newest, beams[k])
        # problems still searching after max_steps finish their beams greedily, as does one that finished nothing
        rest = sorted(set(live) | {k for k in range(len(prompts)) if not finished[k]})
        if rest:
            done = self.proposer.complete_many(
                [(k, prompts[k], beams[k]) for k in rest], 1, [costs[k] for k in rest], greedy=True
            )
            for k, texts in zip(rest, done):
                finished[k] += trees[k].finish(beams[k], texts)
        scores = self._scores([(prompts[k], finished[k]) for k in range(len(prompts))], costs)
        outs = [self._best(finished[k], scores[k], costs[k]) for k in range(len(prompts))]
        for out, tree in zip(outs, trees):
            out.tree = tree.nodes(out.text)
        return outs

    def _lookahead(self, prompts, budget, costs):
        return self._beam(prompts, budget, costs, lookahead=max(1, self.settings.lookahead))

    def _rollout(self, jobs: list[Job], k: int, costs: list[Cost]) -> list[list[str]]:
        """Each job's prefixes rolled out ``k`` greedy steps (fewer where they finish), each round one sampler call."""
        out = [list(prefixes) for _, _, prefixes in jobs]
        live = [list(range(len(o))) for o in out]
        for _ in range(k):
            todo = [j for j in range(len(jobs)) if live[j]]
            if not todo:
                break
            ext = self.proposer.step_many(
                [(jobs[j][0], jobs[j][1], [out[j][i] for i in live[j]]) for j in todo],
                1,
                [costs[jobs[j][0]] for j in todo],
                greedy=True,
            )
            for j, rows in zip(todo, ext):
                for i, (t, f) in zip(list(live[j]), rows):
                    out[j][i] = t
                    if f:
                        live[j].remove(i)
        return out

    def _mcts(self, prompt, budget, cost):
        st = self.settings
        root = _Node("", False, 0)
        for _ in range(budget):
            node, path = root, [root]
            while node.children and not node.finished:
                node = max(node.children, key=lambda ch: ch.uct(node.visits, st.uct_c))
                path.append(node)
            if not node.finished and node.depth < st.max_steps:
                ext = self.proposer.step(prompt, [node.text], st.expand, cost)
                seen = {}
                for t, f in ext:
                    seen.setdefault(t, f)
                node.children = [_Node(t, f, node.depth + 1) for t, f in seen.items()]
                node = node.children[0]
                path.append(node)
            value = self._value(prompt, node, cost)
            for n in path:
                n.visits += 1
                n.total += value
        node = root
        while node.children and not node.finished:
            node = max(node.children, key=lambda ch: (ch.visits, ch.q))
        text = node.text if node.finished else self.proposer.complete(prompt, [node.text], 1, cost, greedy=True)[0]
        return Outcome(text, answer_of(text), cost, 1, tree=mcts_nodes(root, node))

    def _revision(self, prompt, budget, cost):
        st = self.settings
        n_chains = min(st.revision_chains, budget)
        lengths = [budget // n_chains + (i < budget % n_chains) for i in range(n_chains)]
        chains = [[a] for a in self.proposer.complete(prompt, [""], n_chains, cost)]
        for chain, length in zip(chains, lengths):
            for _ in range(length - 1):
                chain += self.reviser.complete(revision_prompt(prompt, chain[-st.revision_history :]), [""], 1, cost)
        attempts = [a for c in chains for a in c]
        if st.revision_select == "last" and n_chains == 1:
            out = Outcome(attempts[-1], answer_of(attempts[-1]), cost, len(attempts))
        elif st.revision_select in ("last", "majority"):
            voters = [c[-1] for c in chains] if st.revision_select == "last" else attempts
            out = self._vote(voters, [1.0] * len(voters), cost)
            out.candidates = len(attempts)
        else:
            out = self._best(attempts, self.scorer.step_scores(prompt, attempts, cost), cost)
        out.chains = chains
        return out

    def _value(self, prompt, node, cost) -> float:
        if node.value is None:
            if self.settings.mcts_value == "verifier":
                if self.outcome_check is None:
                    raise ValueError("mcts_value=verifier needs an outcome check (the problem's reference)")
                text = node.text if node.finished else self.proposer.complete(prompt, [node.text], 1, cost)[0]
                if is_truncated(text):  # cut: not answered, nothing to judge
                    node.value = 0.0
                else:
                    cost.verifier_calls += 1
                    node.value = float(self.outcome_check(text))
            else:
                scores = self.scorer.step_scores(prompt, [node.text], cost)[0]
                node.value = aggregate(scores, self.settings.aggregation) if node.finished else (scores or [0.0])[-1]
        return node.value


class Visited:
    """Visit statistics of a search-tree node (``visits``, ``total``): its mean value and UCT score.

    ``uct = Q + c sqrt(ln N_parent / (visit_offset + N_child))``; an unvisited child scores infinity, so
    every child is tried once before any is tried twice."""

    visit_offset = 0

    @property
    def q(self) -> float:
        return self.total / self.visits if self.visits else 0.0

    def uct(self, parent_visits: int, c: float) -> float:
        if self.visits == 0:
            return math.inf
        return self.q + c * math.sqrt(math.log(max(parent_visits, 1)) / (self.visit_offset + self.visits))


@dataclass
class _Node(Visited):
    text: str
    finished: bool
    depth: int
    children: list = field(default_factory=list)
    visits: int = 0
    total: float = 0.0
    value: float | None = None

    visit_offset = 1  # the mcts strategy's UCT: ln N_parent / (1 + N_child)


class SearchTree:
    """The nodes a beam search made, for the run browser: each candidate step under the beam it extends, its
    value, and whether it stayed in the beam.  A node is a prefix text (identical prefixes are one node)."""

    def __init__(self):
        self.by_text: dict[str, dict] = {"": {"id": -1}}
        self.order: list[dict] = []

    def _node(self, text: str, parent: str, finished: bool) -> dict:
        if text not in self.by_text:
            node = {
                "id": len(self.order),
                "parent": self.by_text.get(parent, {"id": -1})["id"],
                "step": text[len(parent) :],
                "finished": finished,
            }
            self.by_text[text] = node
            self.order.append(node)
        return self.by_text[text]

    def extend(self, beams: list[str], n: int, candidates: list[tuple[str, bool]]) -> None:
        for j, (text, finished) in enumerate(candidates):  # prefix-major: n candidates per beam
            self._node(text, beams[j // n], finished)

    def valued(self, texts: list[str], values: list[float], kept: list[str]) -> None:
        keep = set(kept)
        for text, value in zip(texts, values):
            node = self.by_text.get(text)
            if node is not None:
                node.update(value=round(float(value), 5), kept=text in keep)

    def finish(self, beams: list[str], texts: list[str]) -> list[str]:
        """Each beam's greedy completion (one per beam), as a finished child of that beam."""
        for beam, text in zip(beams, texts):
            self._node(text, beam, True)
        return texts

    def nodes(self, chosen: str) -> list[dict]:
        on_path = {t for t in self.by_text if t and chosen.startswith(t)}
        return [{**n, "chosen": t in on_path} for t, n in self.by_text.items() if t]


def mcts_nodes(root, chosen) -> list[dict]:
    """An MCTS tree, breadth first: each node's step text, visits, mean value Q and PRM value."""
    out, queue = [], [(root, -1)]
    while queue:
        node, parent = queue.pop(0)
        for child in node.children:
            out.append(
                {
                    "id": len(out),
                    "parent": parent,
                    "step": child.text[len(node.text) :],
                    "visits": child.visits,
                    "value": round(child.q, 5),
                    "finished": child.finished,
                    "chosen": chosen.text.startswith(child.text),
                }
            )
            queue.append((child, out[-1]["id"]))
    return out


def one_problem(search: Callable[..., Outcome]) -> Callable[..., list[Outcome]]:
    """A strategy's ``run`` from ``search(strategies, prompt, budget, cost) -> Outcome``, for a strategy that does
    not batch: ``run_many`` refuses it, so its batch is the one problem whose models the caller reseeded."""

    def run(strategies: Strategies, prompts: list[str], budget: int, costs: list[Cost]) -> list[Outcome]:
        (prompt,), (cost,) = prompts, costs
        return [search(strategies, prompt, budget, cost)]

    return run


def _always(settings: SearchSettings) -> bool:
    return True


# The built-in strategies (registered by veriloop/search/__init__.py, with rstar's from veriloop.search.rstar).
SCORED = ("prm", "scorer", "aggregation")  # what a strategy that ranks with a scorer reads
STEPWISE = ("expand", "max_steps")  # what a step-level search reads
SINGLE = Strategy(Strategies._single)
BEST_OF_N = Strategy(Strategies._best_of_n, needs_scorer=_always, reads=SCORED)
MAJORITY = Strategy(Strategies._majority)
WEIGHTED_VOTE = Strategy(Strategies._weighted_vote, needs_scorer=_always, reads=SCORED)
BEAM = Strategy(Strategies._beam, needs_scorer=_always, reads=(*SCORED, *STEPWISE))
LOOKAHEAD = Strategy(Strategies._lookahead, needs_scorer=_always, reads=(*SCORED, *STEPWISE, "lookahead"))
MCTS = Strategy(
    one_problem(Strategies._mcts),
    batches=False,  # each simulation walks the tree the last one grew
    needs_scorer=lambda s: s.mcts_value == "prm",
    needs_outcome_check=lambda s: s.mcts_value == "verifier",
    reads=(*SCORED, *STEPWISE, "uct_c", "mcts_value"),
)
REVISION = Strategy(
    one_problem(Strategies._revision),
    batches=False,  # each rewrite reads its chain's last attempts; the reviser is reseeded per problem
    needs_scorer=lambda s: s.revision_select == "prm",
    needs_reviser=True,
    reads=(*SCORED, "revision_policy", "revision_select", "revision_history", "revision_chains"),
)
