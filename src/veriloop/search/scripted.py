"""Scripted policies and scorers: search on a tree you wrote down, every number checkable by hand.

``ScriptedProposer(tree)``: ``tree[prefix]`` lists the next steps after ``prefix`` with their
probabilities; a step ending in ``;`` continues the solution, any other step ends it.  One
character is one token (so ``"1+1=2;"`` costs 6).  Greedy picks the most probable step (the
first of ties).  ``per_prompt=True``: ``tree[prompt][prefix]``, one tree per problem.  The ``*_many``
methods serve several problems, problem k drawing from its own ``reseed_many`` stream; ``complete`` / ``step``
draw from problem 0's (what ``reseed`` seeds: one problem is a batch of one).
``ScriptedScorer(values)``: ``values[prefix]`` is the score of the step that
ends ``prefix`` (missing prefixes score ``default``).  ``max_new_tokens`` (0 = none) caps what one call
writes, as the sampler's budget does: a text cut there is ``Truncated`` (and, for ``step``, finished).
"""

from __future__ import annotations

import random

from veriloop.search.strategies import Cost, Truncated


class ScriptedProposer:
    def __init__(self, tree: dict, seed: int = 0, per_prompt: bool = False, max_new_tokens: int = 0):
        for prefix, options in [kv for t in tree.values() for kv in t.items()] if per_prompt else tree.items():
            if not options or any(p < 0 for _, p in options) or sum(p for _, p in options) <= 0:
                raise ValueError(f"tree[{prefix!r}]: options need non-negative probabilities with a positive sum")
        self.tree, self.per_prompt, self.max_new_tokens = tree, per_prompt, max_new_tokens
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        self.reseed_many([seed])

    def reseed_many(self, seeds: list[int]) -> None:
        self.rngs = [random.Random(s) for s in seeds]
        self.rng = self.rngs[0] if self.rngs else random.Random()  # what complete / step draw from: problem 0's

    def _many(self, method, jobs, n, costs, greedy):
        """``method`` (complete or step, a subclass's own included) on each job, from its problem's stream."""
        out, rng = [], self.rng
        try:
            for (k, prompt, prefixes), cost in zip(jobs, costs):
                self.rng = self.rngs[k]
                out.append(method(prompt, prefixes, n, cost, greedy))
        finally:
            self.rng = rng
        return out

    def complete_many(self, jobs, n, costs, greedy=False):
        return self._many(self.complete, jobs, n, costs, greedy)

    def step_many(self, jobs, n, costs, greedy=False):
        return self._many(self.step, jobs, n, costs, greedy)

    def _next(self, prompt: str, prefix: str, greedy: bool) -> str:
        tree = self.tree[prompt] if self.per_prompt else self.tree
        if prefix not in tree:
            raise KeyError(f"the scripted tree has no continuation of {prefix!r}")
        options = tree[prefix]
        if greedy:
            return max(options, key=lambda o: o[1])[0]
        return self.rng.choices([o[0] for o in options], weights=[o[1] for o in options])[0]

    def step(self, prompt, prefixes, n, cost: Cost, greedy=False):
        out = []
        for prefix in prefixes:
            for _ in range(n):
                s = self._next(prompt, prefix, greedy)
                if self.max_new_tokens and len(s) > self.max_new_tokens:  # the budget cuts the step: finished
                    cost.tokens += self.max_new_tokens
                    out.append((Truncated(prefix + s[: self.max_new_tokens]), True))
                    continue
                cost.tokens += len(s)
                out.append((prefix + s, not s.endswith(";")))
        return out

    def complete(self, prompt, prefixes, n, cost: Cost, greedy=False):
        out = []
        for prefix in prefixes:
            for _ in range(n):
                text, done = prefix, False
                while not done and not self.max_new_tokens:
                    ((text, done),) = self.step(prompt, [text], 1, cost, greedy)
                while not done:  # with a budget: the whole completion's, not one step's
                    s = self._next(prompt, text, greedy)
                    room = self.max_new_tokens - (len(text) - len(prefix))
                    if len(s) > room:  # the budget runs out inside this step: the text is cut there
                        text, done = Truncated(text + s[:room]), True
                        cost.tokens += room
                    else:
                        text, done = text + s, not s.endswith(";")
                        cost.tokens += len(s)
                out.append(text)
        return out


class ScriptedScorer:
    reads_reference = False

    def __init__(self, values: dict[str, float], default: float = 0.5):
        self.values, self.default = values, default

    def step_scores(self, prompt, texts, cost: Cost):
        cost.prm_calls += len(texts)
        out = []
        for text in texts:
            ends = [i + 1 for i, ch in enumerate(text) if ch == ";"]
            if text and not text.endswith(";"):
                ends.append(len(text))
            out.append([self.values.get(text[:e], self.default) for e in ends])
        return out
