"""Reward shaping by completion length.

``overlong_penalty`` (DAPO, Yu et al. 2025, "soft overlong punishment"): with a hard limit
``L_max`` and a buffer ``L_cache`` the length reward is

    0                                  if |y| <= L_max - L_cache
    ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
    -1                                 if |y| > L_max

so a completion is pushed away from the limit before it is cut off there.
"""

from __future__ import annotations

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
