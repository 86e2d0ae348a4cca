"""A language model as a proposer, a PRM as a scorer (the real parts behind the strategies)."""

from __future__ import annotations

import torch

from veriloop.prm.steps import SEPARATORS
from veriloop.rollout.sampler import SamplingParams
from veriloop.search.strategies import Cost


def separator_ids(tokenizer, splitter: str) -> tuple[int, ...]:
    """Every token whose text contains the step separator: generation of one step stops there."""
    sep = SEPARATORS[splitter]
    direct = tokenizer.convert_tokens_to_ids(sep)
    if isinstance(direct, int) and direct != tokenizer.unk_token_id and tokenizer.decode([direct]) == sep:
        return (direct,)
    return tuple(i for i in range(len(tokenizer)) if sep in tokenizer.decode([i]))


class LMProposer:
    """Samples with the policy's KV-cached sampler; ``seed`` makes each problem's draws repeatable."""

    def __init__(self, policy, sampling: SamplingParams, splitter: str, seed: int = 0):
        self.policy, self.sampling, self.splitter = policy, sampling, splitter
        self.stops = separator_ids(policy.tokenizer, splitter)
        self.generator = torch.Generator().manual_seed(seed)
        self.greedy_params = SamplingParams(temperature=0.0, max_new_tokens=sampling.max_new_tokens)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def _generate(self, prompt, prefixes, n, cost, greedy, stop):
        p = self.policy
        base = p.encode_prompt(prompt)
        ids = [base + (p.tokenizer(x, add_special_tokens=False).input_ids if x else []) for x in prefixes]
        params = self.greedy_params if greedy else self.sampling  # max_new_tokens bounds each call
        out = p.sample(ids, params, generator=self.generator, n=1 if greedy else n, stop_ids=self.stops if stop else ())
        cost.tokens += out.num_tokens
        reps = 1 if greedy else n
        res = []
        for j, (c, f) in enumerate(zip(out.completion_ids, out.finish_reasons)):
            text = prefixes[j // reps] + p.completion_text(c, f)
            res.append((text, f != "stop"))
        if greedy and n > 1:
            res = [r for r in res for _ in range(n)]
        return res

    def complete(self, prompt, prefixes, n, cost: Cost, greedy=False):
        return [t for t, _ in self._generate(prompt, prefixes, n, cost, greedy, stop=False)]

    def step(self, prompt, prefixes, n, cost: Cost, greedy=False):
        return self._generate(prompt, prefixes, n, cost, greedy, stop=True)


class PRMScorer:
    def __init__(self, prm):
        self.prm = prm

    def step_scores(self, prompt, texts, cost: Cost):
        cost.prm_calls += len(texts)
        return self.prm.score([prompt] * len(texts), texts)


class VerifierScorer:
    """The outcome verifier as a scorer (best-of-N by verifier score, e.g. unit tests for code).

    It needs the problem's reference (``reference`` is set per problem) and judges whole solutions
    only: one score per text, the verdict's score, with no step scores to guide a step-level search.
    """

    def __init__(self, verifier):
        self.verifier, self.reference = verifier, None

    def step_scores(self, prompt, texts, cost: Cost):
        if self.reference is None:
            raise ValueError("the verifier scorer needs the problem's reference")
        return [[v.score] for v in self.verifier.verify_batch(texts, [self.reference] * len(texts))]
