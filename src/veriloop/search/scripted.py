"""Scripted policies and scorers: search on a tree you wrote down, every number checkable by hand.

``ScriptedProposer(tree)``: ``tree[prefix]`` lists the next steps after ``prefix`` with their
probabilities; a step ending in ``;`` continues the solution, any other step ends it.  One
character is one token (so ``"1+1=2;"`` costs 6).  Greedy picks the most probable step (the
first of ties).  ``ScriptedScorer(values)``: ``values[prefix]`` is the score of the step that
ends ``prefix`` (missing prefixes score ``default``).
"""

from __future__ import annotations

import random

from veriloop.search.strategies import Cost


class ScriptedProposer:
    def __init__(self, tree: dict[str, list[tuple[str, float]]], seed: int = 0):
        for prefix, options in tree.items():
            if not options or any(p < 0 for _, p in options) or sum(p for _, p in options) <= 0:
                raise ValueError(f"tree[{prefix!r}]: options need non-negative probabilities with a positive sum")
        self.tree = tree
        self.rng = random.Random(seed)

    def reseed(self, seed: int) -> None:
        self.rng.seed(seed)

    def _next(self, prefix: str, greedy: bool) -> str:
        if prefix not in self.tree:
            raise KeyError(f"the scripted tree has no continuation of {prefix!r}")
        options = self.tree[prefix]
        if greedy:
            return max(options, key=lambda o: o[1])[0]
        return self.rng.choices([o[0] for o in options], weights=[o[1] for o in options])[0]

    def step(self, prompt, prefixes, n, cost: Cost, greedy=False):
        out = []
        for prefix in prefixes:
            for _ in range(n):
                s = self._next(prefix, greedy)
                cost.tokens += len(s)
                out.append((prefix + s, not s.endswith(";")))
        return out

    def complete(self, prompt, prefixes, n, cost: Cost, greedy=False):
        out = []
        for prefix in prefixes:
            for _ in range(n):
                text, done = prefix, False
                while not done:
                    (text, done), = self.step(prompt, [text], 1, cost, greedy)  # fmt: skip
                out.append(text)
        return out


class ScriptedScorer:
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
