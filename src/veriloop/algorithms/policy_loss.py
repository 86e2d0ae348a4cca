"""Policy objectives, each per token and to be *maximised* (the trainer's loss is the negative).

With ``rho = pi_current(y_t) / pi_behavior(y_t)`` and advantage ``A``:

* ``clipped_surrogate`` (PPO): ``min(rho A, clip(rho, 1-low, 1+high) A)``.  Separate low/high
  widths make DAPO's clip-higher a setting.  With ``A > 0`` the objective stops growing once
  ``rho > 1 + high``; with ``A < 0`` once ``rho < 1 - low``; in the other direction nothing
  is clipped, so a bad token whose probability *rose* keeps its full penalty.
* ``dual_clip_surrogate`` (Ye et al. 2020): for ``A < 0`` also ``max(., c A)``, so one token
  with a huge ratio cannot dominate the batch (``clip_ratio_c`` = c > 1).
* ``gspo_surrogate`` (GSPO, Zheng et al. 2025): the clipped surrogate on the *sequence*
  ratio ``s_i = exp(mean_t log rho_{i,t})`` (the length-normalised likelihood ratio), one
  value per completion, broadcast to its tokens.
* ``pg_objective``: ``rho A`` with no clip (REINFORCE / RLOO with one update per batch,
  where rho = 1 and the gradient is ``A grad log pi``).
* ``likelihood_objective``: ``c log pi`` (SFT with c = 1, RFT with c = 1[accepted]): the
  gradient coefficient times the log-likelihood, no behaviour policy involved.
* ``dpo_loss`` (Rafailov et al. 2023): ``-log sigmoid(beta [(log pi(y+) - log ref(y+)) -
  (log pi(y-) - log ref(y-))])`` per pair of sequence log-probs (a loss, to minimise).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_clip(low: float, high: float) -> None:
    if low < 0 or high < 0:
        raise ValueError(f"clip widths must be >= 0, got low={low}, high={high}")


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_eps_low: float = 0.2, clip_eps_high: float = 0.2
) -> torch.Tensor:
    """Elementwise ``min(rho*A, clip(rho, 1-low, 1+high)*A)``; shapes broadcast."""
    _check_clip(clip_eps_low, clip_eps_high)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * advantages
    return torch.minimum(unclipped, clipped)


def dual_clip_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    clip_ratio_c: float = 3.0,
) -> torch.Tensor:
    """The clipped surrogate, bounded below by ``c * A`` where ``A < 0``."""
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
    base = clipped_surrogate(ratio, advantages, clip_eps_low, clip_eps_high)
    return torch.where(advantages < 0, torch.maximum(base, clip_ratio_c * advantages), base)


def sequence_ratio(logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N]``: ``exp(mean over valid tokens of (log pi - log pi_behavior))``."""
    m = mask.to(logprobs.dtype)
    diff = torch.where(mask.bool(), logprobs - behavior_logprobs, torch.zeros_like(logprobs))
    return torch.exp(diff.sum(dim=-1) / m.sum(dim=-1).clamp(min=1))


def gspo_surrogate(
    logprobs: torch.Tensor,
    behavior_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps_low: float = 3e-4,
    clip_eps_high: float = 4e-4,
) -> torch.Tensor:
    """``[N, T]``: the sequence-level clipped surrogate of each completion on each of its tokens.

    ``advantages`` is ``[N]`` or ``[N, 1]`` (one per completion).  Aggregate with a per-sequence
    mode (``seq-mean-token-mean``) to get GSPO's mean over completions.
    """
    s = sequence_ratio(logprobs, behavior_logprobs, mask)  # [N]
    per_seq = clipped_surrogate(s, advantages.reshape(-1), clip_eps_low, clip_eps_high)  # [N]
    return per_seq[:, None].expand_as(logprobs)


def pg_objective(ratio: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Unclipped importance-weighted policy gradient objective ``rho * A``."""
    return ratio * advantages


def likelihood_objective(logprobs: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """``c * log pi``: SFT (c = 1) and rejection-sampling fine-tuning (c = 1[accepted])."""
    return coefficients * logprobs


def dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """Per-pair DPO loss from sequence log-probs (sums over each completion's tokens)."""
    if beta <= 0:
        raise ValueError(f"dpo beta must be > 0, got {beta}")
    margin = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(beta * margin)


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
