"""The policy's sampled solutions with a rule verifier's verdicts: the rows `veriloop rm pairs` and `veriloop judge
data` are made from (``rule_judged_samples``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from veriloop.models.solutions import sample_solutions
from veriloop.tasks.base import Problem


@dataclass
class RuleJudgedSamples:
    """The policy's sampled solutions of a config's problems, each with a rule verifier's full marks or not: what
    `veriloop rm pairs` and `veriloop judge data` build their rows from.  ``provenance`` goes on every row."""

    problems: list[Problem]
    provenance: dict
    batches: Iterator[tuple[list[Problem], list[str], list[bool]]]  # (problems, texts, correct) per batch

    def per_problem(self, n: int) -> Iterator[tuple[Problem, list[str], list[bool]]]:
        """Each problem with its ``n`` solutions and their verdicts, in order."""
        for chunk, texts, ok in self.batches:
            for i, p in enumerate(chunk):
                yield p, texts[i * n : (i + 1) * n], ok[i * n : (i + 1) * n]


def rule_judged_samples(cfg, policy=None, task=None) -> RuleJudgedSamples:
    """``cfg`` has ``policy``, ``split``, ``problems``, ``samples``, ``verifier`` ('' = the task's outcome one),
    ``seed``, ``batch_prompts``, ``task`` and ``sampling``; problems and samples are drawn from ``cfg.seed``."""
    from veriloop.models.loading import load_policy
    from veriloop.tasks.base import draw_problems
    from veriloop.verifiers import get as get_verifier
    from veriloop.verifiers import is_correct

    task = task or cfg.task.build()
    verifier = get_verifier(cfg.verifier or cfg.task.eval_verifiers()["outcome"])
    policy = policy or load_policy(cfg.policy)
    problems = draw_problems(task, cfg.split, cfg.problems, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    provenance = {
        "policy": getattr(policy, "source", cfg.policy),
        "verifier": verifier.tag,
        "task": task.name,
        "split": cfg.split,
        "seed": cfg.seed,
        "samples": cfg.samples,
        "temperature": cfg.sampling.temperature,
    }

    def batches():
        for chunk, texts, _ in sample_solutions(policy, problems, cfg.sampling, gen, cfg.samples, cfg.batch_prompts):
            verdicts = verifier.verify_batch(texts, [chunk[j // cfg.samples].reference for j in range(len(texts))])
            yield chunk, texts, [is_correct(v) for v in verdicts]

    return RuleJudgedSamples(problems, provenance, batches())
