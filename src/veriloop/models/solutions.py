"""``n`` sampled solutions of each problem, a batch of problems at a time."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from veriloop.tasks.base import Problem


def sample_solutions(
    policy, problems: list[Problem], sampling, generator: torch.Generator, n: int, batch: int
) -> Iterator[tuple[list[Problem], list[str], list[str]]]:
    """``(problems of the batch, texts, finish reasons)`` per ``batch`` problems; solution ``j`` of a batch
    is problem ``j // n``'s.  Batches are drawn in order from ``generator``, one as each is asked for."""
    for i in range(0, len(problems), batch):
        chunk = problems[i : i + batch]
        out = policy.sample([policy.encode_prompt(p.prompt) for p in chunk], sampling, generator=generator, n=n)
        texts = [policy.completion_text(c, f) for c, f in zip(out.completion_ids, out.finish_reasons)]
        yield chunk, texts, out.finish_reasons
