"""Advantage estimators: rewards of a group of completions -> one advantage per completion.

``group_advantages`` is GRPO's (DeepSeekMath) outcome-supervised estimator:

    A_i = (r_i - mean(r)) / (std(r) + eps)

over the G completions of one prompt.  Conventions, explicit because frameworks differ:

* ``std="population"`` (divide by G) is our default, as in the seeds; TRL, verl and
  OpenRLHF use the sample std (divide by G-1), which is ``sqrt(G/(G-1))`` times larger
  and so gives advantages ``sqrt((G-1)/G)`` times smaller.  ``std="none"`` keeps only
  the centring (Dr. GRPO).
* ``eps`` (called ``adv_eps`` in configs, distinct from the clip width ``clip_eps``)
  is added to the std, not inside the square root.  A group whose rewards are all equal
  has a zero numerator, so its advantages are exactly 0 whatever ``eps`` is.
* The group mean includes the completion itself, so the expected centred gradient is
  ``(1 - 1/G)`` times the true one (the seeds, section 4.3); RLOO's leave-one-out mean
  avoids that.
"""

from __future__ import annotations

import torch

STD_MODES = ("population", "sample", "none")


def group_advantages(rewards: torch.Tensor, std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """Normalised advantages of ``rewards[B, G]`` (B prompts, G completions each).

    Returns a tensor of the same shape, detached (advantages are constants in the loss).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B, G], got {tuple(rewards.shape)}")
    if std not in STD_MODES:
        raise ValueError(f"std must be one of {STD_MODES}, got {std!r}")
    G = rewards.shape[1]
    if G < 2 and std == "sample":
        raise ValueError("the sample std needs at least 2 completions per group")
    r = rewards.detach().to(torch.float64)
    mean = r.mean(dim=1, keepdim=True)
    centred = r - mean
    if std == "none":
        adv = centred
    else:
        ddof = 0 if std == "population" else 1
        var = (centred**2).sum(dim=1, keepdim=True) / (G - ddof)
        adv = centred / (var.sqrt() + eps)
    return adv.to(rewards.dtype)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the groups whose rewards are all equal (no relative signal)."""
    return (rewards == rewards[:, :1]).all(dim=1)


ADVANTAGE_ESTIMATORS = {"grpo": group_advantages}
