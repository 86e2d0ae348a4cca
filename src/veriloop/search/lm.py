"""A language model as a proposer, a PRM as a scorer (the real parts behind the strategies)."""

from __future__ import annotations

from dataclasses import replace

import torch

from veriloop.prm.steps import SEPARATORS
from veriloop.rollout.sampler import GroupStreams, SamplingParams
from veriloop.rollout.thinking import generate_with_thinking_budget
from veriloop.search.strategies import Cost, Truncated


def separator_ids(tokenizer, splitter: str) -> tuple[int, ...]:
    """Every token whose text contains the step separator: generation of one step stops there."""
    sep = SEPARATORS[splitter]
    direct = tokenizer.convert_tokens_to_ids(sep)
    if isinstance(direct, int) and direct != tokenizer.unk_token_id and tokenizer.decode([direct]) == sep:
        return (direct,)
    return tuple(i for i in range(len(tokenizer)) if sep in tokenizer.decode([i]))


class LMProposer:
    """Samples with the policy's KV-cached sampler; ``seed`` makes each problem's draws repeatable.

    ``complete_many`` / ``step_many`` serve several problems in one sampler call: problem k's rows
    draw from its own generator (``reseed_many``) exactly what its own call would draw
    (``GroupStreams``), so batching problems changes no draw, only the batch the matmuls see.
    One problem is a batch of one: ``reseed`` seeds problem 0, and ``complete`` / ``step`` draw from it.
    """

    def __init__(self, policy, sampling: SamplingParams, splitter: str, seed: int = 0):
        self.policy, self.sampling, self.splitter = policy, sampling, splitter
        self.stops = separator_ids(policy.tokenizer, splitter)
        self.generators: list[torch.Generator] = []  # one per problem of a batch (reseed_many)
        self.reseed(seed)
        self.greedy_params = SamplingParams(
            temperature=0.0,
            max_new_tokens=sampling.max_new_tokens,
            max_thinking_tokens=sampling.max_thinking_tokens,
            thinking_end=sampling.thinking_end,
        )

    def reseed(self, seed: int) -> None:
        self.reseed_many([seed])

    def reseed_many(self, seeds: list[int]) -> None:
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]

    def _generate_many(self, jobs, n, costs, greedy, stop, generators):
        """``jobs``: (prompt, prefixes) per problem; ``generators[k]`` draws for job k's rows.  With
        ``sampling.max_thinking_tokens`` a whole solution (no prefix, no step stop) is sampled under budget
        forcing (``rollout/thinking.py``); step-wise calls are refused by ``veriloop search``'s options."""
        p = self.policy
        ids, sizes = [], []
        for prompt, prefixes in jobs:
            base = p.encode_prompt(prompt)
            ids += [base + (p.tokenizer(x, add_special_tokens=False).input_ids if x else []) for x in prefixes]
            sizes.append(len(prefixes) * (1 if greedy else n))
        params = self.greedy_params if greedy else self.sampling  # max_new_tokens bounds each call
        whole = not stop and not any(x for _, prefixes in jobs for x in prefixes)
        if params.max_thinking_tokens and whole:  # budget forcing: each row's seed drawn from its problem's stream
            seeds = (
                [0] * sum(sizes)
                if greedy
                else [s for g, size in zip(generators, sizes) for s in torch.randint(0, 2**62, (size,), generator=g)]
            )
            out = generate_with_thinking_budget(p, ids, params, row_seeds=[int(s) for s in seeds], n=1 if greedy else n)
        else:
            gen = generators[0] if len(jobs) == 1 else None if greedy else GroupStreams(generators, sizes)
            out = p.sample(
                ids,
                replace(params, max_thinking_tokens=0),
                generator=gen,
                n=1 if greedy else n,
                stop_ids=self.stops if stop else (),
            )
        reps = 1 if greedy else n
        results, row = [], 0
        for (_, prefixes), size, cost in zip(jobs, sizes, costs):
            res = []
            for j in range(size):
                c, f = out.completion_ids[row + j], out.finish_reasons[row + j]
                cost.tokens += len(c)
                text = prefixes[j // reps] + p.completion_text(c, f)
                res.append((Truncated(text) if f == "length" else text, f != "stop"))  # cut: finished, unanswered
            row += size
            if greedy and n > 1:
                res = [r for r in res for _ in range(n)]
            results.append(res)
        return results

    def complete(self, prompt, prefixes, n, cost: Cost, greedy=False):
        return self.complete_many([(0, prompt, prefixes)], n, [cost], greedy)[0]

    def step(self, prompt, prefixes, n, cost: Cost, greedy=False):
        return self.step_many([(0, prompt, prefixes)], n, [cost], greedy)[0]

    def complete_many(self, jobs: list[tuple[int, str, list[str]]], n, costs: list[Cost], greedy=False):
        """``jobs``: (problem k of ``reseed_many``, prompt, prefixes); per job, ``complete``'s list."""
        res = self._generate_many([j[1:] for j in jobs], n, costs, greedy, False, [self.generators[j[0]] for j in jobs])
        return [[t for t, _ in r] for r in res]

    def step_many(self, jobs: list[tuple[int, str, list[str]]], n, costs: list[Cost], greedy=False):
        """As ``complete_many``, one step per prefix: per job, ``step``'s list."""
        return self._generate_many([j[1:] for j in jobs], n, costs, greedy, True, [self.generators[j[0]] for j in jobs])


class PRMScorer:
    reads_reference = False  # a learned judge: a test-time method

    def __init__(self, prm):
        self.prm = prm

    def step_scores(self, prompt, texts, cost: Cost):
        cost.prm_calls += len(texts)
        return self.prm.score([prompt] * len(texts), texts)

    def step_scores_many(self, jobs: list[tuple[str, list[str]]], costs: list[Cost]) -> list[list[list[float]]]:
        """``step_scores`` of several problems' texts in one PRM pass: per job, its list."""
        prompts = [prompt for prompt, texts in jobs for _ in texts]
        flat = self.prm.score(prompts, [t for _, texts in jobs for t in texts]) if prompts else []
        out, i = [], 0
        for (_, texts), cost in zip(jobs, costs):
            cost.prm_calls += len(texts)
            out.append(flat[i : i + len(texts)])
            i += len(texts)
        return out


class VerifierScorer:
    """The outcome verifier as a scorer (best-of-N by verifier score, e.g. unit tests for code).

    It needs the problem's reference (``reference`` is set per problem) and judges whole solutions
    only: one score per text, the verdict's score, with no step scores to guide a step-level search.
    Reading the reference makes it an oracle (an upper bound), not a test-time method.
    """

    reads_reference = True

    def __init__(self, verifier):
        self.verifier, self.reference = verifier, None

    def step_scores(self, prompt, texts, cost: Cost):
        if self.reference is None:
            raise ValueError("the verifier scorer needs the problem's reference")
        cost.verifier_calls += len(texts)
        return [[v.score] for v in self.verifier.verify_batch(texts, [self.reference] * len(texts))]
