"""Policy objectives: the PPO clipped surrogate and its clip statistics.

For one sampled token with probability ratio ``rho = pi_current / pi_behavior`` and
advantage ``A`` the clipped surrogate (PPO, Schulman et al. 2017) is

    L = min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)

an objective to *maximise*; the trainer's loss is its negative.  The two clip widths
are separate so that DAPO's clip-higher (``eps_high > eps_low``) is a setting, not a fork.
With ``A > 0`` the objective stops growing once ``rho > 1 + eps_high``; with ``A < 0``
it stops growing once ``rho < 1 - eps_low``; in the other direction nothing is clipped,
so a bad token whose probability has *risen* keeps its full penalty.
"""

from __future__ import annotations

import torch


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_eps_low: float = 0.2, clip_eps_high: float = 0.2
) -> torch.Tensor:
    """Elementwise ``min(rho*A, clip(rho, 1-low, 1+high)*A)``; shapes broadcast."""
    if clip_eps_low < 0 or clip_eps_high < 0:
        raise ValueError(f"clip widths must be >= 0, got low={clip_eps_low}, high={clip_eps_high}")
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
    return torch.minimum(unclipped, clipped)


def clip_fractions(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip_eps_low: float, clip_eps_high: float
) -> tuple[float, float]:
    """Share of valid tokens whose gradient the clip cuts: (low side, high side).

    low: ``A < 0`` and ``rho < 1 - eps_low``;  high: ``A > 0`` and ``rho > 1 + eps_high``.
    """
    valid = mask.bool()
    n = valid.sum().clamp(min=1)
    adv = advantages.expand_as(ratio)
    low = ((adv < 0) & (ratio < 1.0 - clip_eps_low) & valid).sum() / n
    high = ((adv > 0) & (ratio > 1.0 + clip_eps_high) & valid).sum() / n
    return float(low), float(high)
