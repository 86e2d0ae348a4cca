"""rStar (seeds, test-time compute, 2.3.3.2): MCTS over human-like reasoning actions, rewarded only by
the self-consistency of the answers it reaches, and answers chosen by mutual consistency with a
second policy (the discriminator).

Actions, each asked of the policy with a prompt of its own for the task at hand:

* ``A1`` propose one step: the task's prompt and the trace so far; generation stops at the step separator.
* ``A2`` propose the remaining steps: the same prompt, generated to the end: a terminal node.
* ``A3`` ask the next sub-question and answer it: the sub-question is posed to the policy as a problem
  of its own (the task's prompt format), and the steps of its answer join the trace.  Where the sub-questions
  come from: a task that decomposes a problem (``sub_questions(prompt)``; the built-in arithmetic task's are the
  operand sub-expressions of the root operation, in the order its traces compute them), or, on any task with
  steps (GSM8K included), the policy itself, asked with ``rstar_subquestion`` (a template naming ``{question}``
  and ``{trace}``, the steps so far): ``expand`` sub-questions are sampled (the first line of each), each
  answered once.  The template wins over the task's decomposition where both exist.
* ``A4`` re-answer the last sub-question: only right after A3; the sub-question's majority answer over
  ``rstar_reanswer`` samples (the seed's few-shot CoT re-answer, as self-consistency: the built-in policy
  reads no few-shot prompt).
* ``A5`` rephrase the question: only at the root, with ``rstar_rephrase`` (a template naming ``{question}``,
  e.g. a few-shot "list every condition of the problem" prompt): ``expand`` restatements are sampled, and
  every action below one reads the restatement as its question (A1, A2, and A3's template) while the
  task's own decomposition and mutual consistency read the original.  An instruction-following policy is what
  makes a restatement worth having: the built-in policy writes bare expression traces, so on it A5 is off by
  default (no template) and its tests check the mechanics with scripted policies.

Each rollout walks from the root by UCT (``Q + c sqrt(ln N_parent / N_child)``, an unvisited child
first), expanding a node with every action that applies (``expand`` samples each) the first time it is
reached, until it reaches a terminal node (an answer; at depth ``max_steps`` - 1 only A2 applies).
There is no intermediate self-evaluation: the terminal node's reward is the self-consistency
(majority-vote) confidence of its answer, the share of every terminal sample the tree has drawn so far
that reached that answer, and it is added to every node on the path (``R(s_i) += R(s_K)``).  The vote
is over the whole tree, not over one node's own samples as in rStar: on traces whose last step only
copies the last value (the built-in task's ``answer=``), one node's samples agree trivially.

Mutual consistency: every distinct terminal trajectory is cut after a random step (at least one step
hidden, the answer among them), the discriminator completes the cut trajectory once, and the trajectory
counts only when the completion reaches the same answer.  A truncated text (cut by the token budget) has
no answer (``answer_of``): it does not vote, confirm or get confirmed.  Among those, the highest ``reward x
confidence`` wins (reward: the mean Q of the nodes on its path, the search's global value; confidence:
the terminal's own).  When no trajectory is confirmed, the highest score among all of them wins
(``Outcome.candidates`` counts the confirmed ones then as 0).  Tokens of the policy and of the
discriminator both count in the cost.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from veriloop.prm.steps import SEPARATORS, split_steps
from veriloop.search.strategies import Cost, Outcome, Strategies, Strategy, Visited, answer_of, one_problem
from veriloop.verifiers.answers import answer_key


@dataclass
class RNode(Visited):
    """One node of an rStar tree: the trace so far, how it was made, and what the search learnt of it."""

    text: str  # the trace so far (what A1 / A2 continue)
    action: str  # the action that made it ("" for the root)
    depth: int
    terminal: bool = False
    sub_done: int = 0  # sub-questions of the problem answered on the path so far
    sub_question: str | None = None  # A3 / A4 nodes: the sub-question answered last
    question: str | None = None  # the question below an A5 node (its restatement); None: the problem's own
    parent: RNode | None = None
    children: list[RNode] = field(default_factory=list)
    expanded: bool = False
    visits: int = 0
    total: float = 0.0

    def path(self) -> list[RNode]:
        out, node = [], self
        while node.parent is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


def sub_steps(completion: str, splitter: str) -> str:
    """The steps of a sub-question's answer without its final answer step, as trace text to append."""
    sep = SEPARATORS[splitter]
    steps = [s.text for s in split_steps(completion, splitter)]
    if steps and answer_key(steps[-1]) is not None:
        steps = steps[:-1]
    return "".join(s + sep for s in steps)


class RStar:
    """One problem's rStar search (the ``rstar`` strategy, ``RSTAR`` below, runs it)."""

    def __init__(self, strategies: Strategies, prompt: str, cost: Cost):
        self.s, self.prompt, self.cost = strategies, prompt, cost
        self.settings = strategies.settings
        self.posed = bool(strategies.settings.rstar_subquestion)  # A3's sub-questions asked of the policy
        self.subs = [] if self.posed or strategies.sub_questions is None else strategies.sub_questions(prompt)
        self.splitter = strategies.splitter
        self.votes: dict[str | None, int] = {}  # answer -> terminal samples that reached it (repeats counted)
        self.n_votes = 0  # sum(self.votes.values())

    def confidence(self, node: RNode) -> float:
        """Self-consistency: the share of the tree's terminal samples whose answer is ``node``'s (0 without one)."""
        key = answer_of(node.text)
        return self.votes.get(key, 0) / self.n_votes if key is not None and self.n_votes else 0.0

    def applicable(self, node: RNode) -> list[str]:
        """The actions that apply at ``node`` (the seed's order constraints included)."""
        if node.terminal:
            return []
        if node.depth >= self.settings.max_steps - 1:
            return ["A2"]  # the last level: only a finished solution
        acts = ["A1", "A2"]
        # sub-questions are answered in order from the root (or from a restatement), before any free step (the
        # trace stays in the order the task's traces compute them)
        before = all(n.action in ("A3", "A4", "A5") for n in node.path())
        if before and (self.posed or node.sub_done < len(self.subs)):
            acts.append("A3")
        if node.action == "A3":
            acts.append("A4")
        if node.depth == 0 and self.settings.rstar_rephrase:
            acts.append("A5")
        return acts

    def question(self, node: RNode) -> str:
        return node.question if node.question is not None else self.prompt

    def sub_questions(self, node: RNode, n: int) -> list[str]:
        """A3's next sub-question(s) at ``node``: the task's next one, or ``n`` asked of the policy."""
        if not self.posed:
            return [self.subs[node.sub_done]]
        ask = self.settings.rstar_subquestion.format(question=self.question(node), trace=node.text)
        out = [t.strip().split("\n", 1)[0].strip() for t in self.s.proposer.complete(ask, [""], n, self.cost)]
        return [q for q in dict.fromkeys(out) if q]  # a blank line poses nothing; a repeat once

    def expand(self, node: RNode) -> None:
        """Every action that applies at ``node``, sampled; one child per distinct result."""
        kids: list[RNode] = []
        for act in self.applicable(node):
            kids += getattr(self, f"_{act.lower()}")(node)
        for k in kids:  # every terminal sample votes, repeats included
            if k.terminal:
                key = answer_of(k.text)
                self.votes[key] = self.votes.get(key, 0) + 1
                self.n_votes += 1
        seen: dict[tuple, RNode] = {}
        for k in kids:  # one node per distinct (trace, action, terminal, question): a repeat adds no branch
            seen.setdefault((k.text, k.action, k.terminal, k.question), k)
        node.children = list(seen.values())
        for k in node.children:
            k.parent = node
        node.expanded = True

    def _a1(self, node: RNode) -> list[RNode]:
        ext = self.s.proposer.step(self.question(node), [node.text], self.settings.expand, self.cost)
        return [RNode(t, "A1", node.depth + 1, f, node.sub_done, question=node.question) for t, f in ext]

    def _a2(self, node: RNode) -> list[RNode]:
        texts = self.s.proposer.complete(self.question(node), [node.text], self.settings.expand, self.cost)
        return [RNode(t, "A2", node.depth + 1, True, node.sub_done, question=node.question) for t in texts]

    def _a3(self, node: RNode) -> list[RNode]:
        p, n = self.s.proposer, self.settings.expand
        if self.posed:  # each of `expand` posed sub-questions answered once
            pairs = [(q, a) for q in self.sub_questions(node, n) for a in p.complete(q, [""], 1, self.cost)]
        else:  # the task's next sub-question answered `expand` times
            q = self.subs[node.sub_done]
            pairs = [(q, a) for a in p.complete(q, [""], n, self.cost)]
        text = lambda a: node.text + sub_steps(a, self.splitter)  # noqa: E731
        return [
            RNode(text(a), "A3", node.depth + 1, False, node.sub_done + 1, q, question=node.question) for q, a in pairs
        ]

    def _a4(self, node: RNode) -> list[RNode]:
        answers = self.s.proposer.complete(node.sub_question, [""], self.settings.rstar_reanswer, self.cost)
        key_of = [answer_of(a) for a in answers]
        counted = [k for k in key_of if k is not None]
        best = max(counted, key=counted.count) if counted else None  # ties: the first seen
        a = answers[key_of.index(best)] if best is not None else answers[0]
        base = node.parent.text if node.parent is not None else ""
        text = base + sub_steps(a, self.splitter)
        return [RNode(text, "A4", node.depth + 1, False, node.sub_done, node.sub_question, question=node.question)]

    def _a5(self, node: RNode) -> list[RNode]:
        ask = self.settings.rstar_rephrase.format(question=self.prompt)
        restated = self.s.proposer.complete(ask, [""], self.settings.expand, self.cost)
        return [RNode("", "A5", 1, False, 0, question=t.strip()) for t in dict.fromkeys(restated) if t.strip()]

    def rollout(self, root: RNode) -> None:
        node = root
        while not node.terminal:
            if not node.expanded:
                self.expand(node)
            if not node.children:
                break
            node = max(node.children, key=lambda ch: ch.uct(node.visits, self.settings.uct_c))
        reward = self.confidence(node) if node.terminal else 0.0  # no intermediate self-evaluation
        while node is not None:
            node.visits += 1
            node.total += reward
            node = node.parent

    def terminals(self, root: RNode) -> list[RNode]:
        out, stack = [], [root]
        while stack:
            n = stack.pop()
            if n.terminal:
                out.append(n)
            stack += reversed(n.children)
        return out

    def score(self, node: RNode) -> float:
        """``reward x confidence``: the mean Q over the path (an unvisited terminal's Q is its confidence)."""
        conf = self.confidence(node)
        qs = [n.q if n.visits else conf for n in node.path()]
        return sum(qs) / len(qs) * conf

    def confirmed(self, text: str) -> bool:
        """Mutual consistency: the discriminator completes ``text`` cut after a random step; same answer?"""
        key = answer_of(text)
        if key is None:
            return False
        steps = split_steps(text, self.splitter)
        rng = random.Random(zlib.crc32(f"{self.prompt}\0{text}".encode()))  # repeatable, one cut per trajectory
        keep = rng.randint(1, len(steps) - 1) if len(steps) > 1 else 0  # at least one step hidden
        prefix = text[: steps[keep].start] if keep else ""
        disc = self.s.discriminator or self.s.proposer
        return answer_of(disc.complete(self.prompt, [prefix], 1, self.cost)[0]) == key

    def run(self, rollouts: int) -> Outcome:
        root = RNode("", "", 0)
        for _ in range(rollouts):
            self.rollout(root)
        best: dict[str, tuple[float, RNode]] = {}
        for n in self.terminals(root):  # a trajectory reached twice: its better-scored node
            sc = self.score(n)
            if n.text not in best or sc > best[n.text][0]:
                best[n.text] = (sc, n)
        ranked = [n for _, n in sorted(best.values(), key=lambda x: -x[0])]  # stable: ties keep tree order
        if not ranked:
            text = self.s.proposer.complete(self.prompt, [""], 1, self.cost)[0]
            return Outcome(text, answer_of(text), self.cost, 0)
        valid = [n for n in ranked if self.confirmed(n.text)]
        pick = valid[0] if valid else ranked[0]
        return Outcome(pick.text, answer_of(pick.text), self.cost, len(valid))


def _rstar(self: Strategies, prompt: str, budget: int, cost: Cost) -> Outcome:
    """``budget`` rollouts of rStar's MCTS on ``prompt`` (the module's docstring)."""
    return RStar(self, prompt, cost).run(budget)


# registered by veriloop/search/__init__.py; each rollout walks the tree the last ones grew: one problem per call
RSTAR = Strategy(
    one_problem(_rstar),
    batches=False,
    reads=("expand", "max_steps", "uct_c", "rstar_reanswer", "rstar_rephrase", "rstar_subquestion", "discriminator"),
)
