"""Reward shaping by completion length.

``overlong_penalty`` (DAPO, Yu et al. 2025, "soft overlong punishment"): with a hard limit
``L_max`` and a buffer ``L_cache`` the length reward is

    0                                  if |y| <= L_max - L_cache
    ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
    -1                                 if |y| > L_max

so a completion is pushed away from the limit before it is cut off there.

``length_cost`` (a token price): ``R_total = R_task - lambda * T / 1000`` with ``T`` the completion's
tokens and ``lambda`` the reward given up per 1,000 tokens.  It charges every token, not only those
near the limit, so it compares what an answer earns with what it costs: with ``lambda = 0.1`` a right
answer of 1,000 tokens nets 0.9 and one of 3,000 nets 0.7, yet if the long form is right 95% of the
time and the short one 60%, their expected net rewards are 0.65 and 0.5, and the long form still wins.
"""

from __future__ import annotations

import math

import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """The length reward of each completion (``lengths`` in tokens); in [-1, 0]."""
    if not 0 < buffer <= max_len:
        raise ValueError(f"overlong buffer must be in (0, max_len={max_len}], got {buffer}")
    soft_start = max_len - buffer
    lengths = lengths.to(torch.float64)
    ramp = (soft_start - lengths) / buffer
    out = torch.where(lengths <= soft_start, torch.zeros_like(lengths), ramp)
    return torch.where(lengths > max_len, torch.full_like(lengths, -1.0), out)


def length_cost(lengths: torch.Tensor, per_thousand: float) -> torch.Tensor:
    """``-per_thousand * T / 1000`` for each completion of ``T`` tokens (``lengths``); <= 0."""
    if not math.isfinite(per_thousand) or per_thousand < 0:
        raise ValueError(f"length cost per 1,000 tokens must be finite and >= 0, got {per_thousand}")
    return -per_thousand * lengths.to(torch.float64) / 1000.0
