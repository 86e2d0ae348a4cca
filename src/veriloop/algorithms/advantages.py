"""Advantage estimators: rewards -> the coefficient that multiplies each token's log-prob gradient.

Outcome-supervised estimators take the rewards ``[B, G]`` of B prompts x G completions and
give one advantage per completion (broadcast to its tokens by the trainer):

* ``group_advantages`` (GRPO, DeepSeekMath): ``(r_i - mean(r)) / (std(r) + eps)`` per group.
  ``std="population"`` (divide by G) is our default, as in the seeds; TRL, verl and
  OpenRLHF use the sample std (divide by G-1), ``sqrt(G/(G-1))`` times larger.
  ``std="none"`` only centres (Dr. GRPO).  ``eps`` (``adv_eps`` in configs, distinct from
  the clip width) is added to the std, not under the root; an all-equal group gives exact
  zeros.  The group mean includes the completion itself, so the expected centred gradient
  is ``(1 - 1/G)`` times the true one (seeds, section 4.3).
* ``rloo_advantages`` (RLOO, Ahmadian et al. 2024): ``r_i - mean_{j != i} r_j``, an
  action-independent baseline, so unbiased; equals ``G/(G-1)`` times the centred reward.
* ``reinforce_advantages``: the raw reward, minus a constant, or minus the batch mean.

Token-level estimators:

* ``gae_advantages`` (Schulman et al. 2016): ``delta_t = r_t + gamma V_{t+1} - V_t``,
  ``A_t = sum_l (gamma lambda)^l delta_{t+l}``, with a learned critic V (PPO proper).
* ``process_advantages`` (DeepSeekMath, process supervision): step rewards normalised over
  all steps of the group's completions; a token's advantage is the sum of the normalised
  rewards of its own step and every later step.
* ``process_token_rewards`` (Math-Shepherd's step-by-step PPO): the PRM's step scores as
  rewards on the tokens that close the steps, beside the outcome on the last token; GAE and
  the critic then carry them back (``gae_advantages``), with no group normalisation.
"""

from __future__ import annotations

import typing
from typing import Literal

import torch

StdMode = Literal["population", "sample", "none"]
STD_MODES = typing.get_args(StdMode)
REINFORCE_BASELINES = ("none", "batch", "constant")


def _check_groups(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B, G], got {tuple(rewards.shape)}")


def group_advantages(rewards: torch.Tensor, std: str = "population", eps: float = 1e-6) -> torch.Tensor:
    """Normalised advantages of ``rewards[B, G]`` (B prompts, G completions each); detached."""
    _check_groups(rewards)
    if std not in STD_MODES:
        raise ValueError(f"std must be one of {STD_MODES}, got {std!r}")
    G = rewards.shape[1]
    if G < 2 and std == "sample":
        raise ValueError("the sample std needs at least 2 completions per group")
    r = rewards.detach().to(torch.float64)
    centred = r - r.mean(dim=1, keepdim=True)
    if std == "none":
        adv = centred
    else:
        ddof = 0 if std == "population" else 1
        var = (centred**2).sum(dim=1, keepdim=True) / (G - ddof)
        adv = centred / (var.sqrt() + eps)
    return adv.to(rewards.dtype)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out advantages ``r_i - (sum_j r_j - r_i) / (G - 1)`` of ``rewards[B, G]``."""
    _check_groups(rewards)
    G = rewards.shape[1]
    if G < 2:
        raise ValueError("RLOO needs at least 2 completions per group")
    r = rewards.detach().to(torch.float64)
    loo_mean = (r.sum(dim=1, keepdim=True) - r) / (G - 1)
    return (r - loo_mean).to(rewards.dtype)


def reinforce_advantages(rewards: torch.Tensor, baseline: str = "none", value: float = 0.0) -> torch.Tensor:
    """REINFORCE: the raw reward, minus the batch mean (``"batch"``) or a fixed ``value``.

    A constant baseline does not depend on the sampled action, so the estimate stays
    unbiased (seeds: p = 0.25, b = 0.25 gives the true gradient 0.1875 in expectation);
    the batch mean includes the sample itself, so it does not.
    """
    _check_groups(rewards)
    if baseline not in REINFORCE_BASELINES:
        raise ValueError(f"baseline must be one of {REINFORCE_BASELINES}, got {baseline!r}")
    r = rewards.detach()
    if baseline == "batch":
        return r - r.mean()
    return r - value if baseline == "constant" else r.clone()


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the groups whose rewards are all equal (no relative signal)."""
    return (rewards == rewards[:, :1]).all(dim=1)


def discounted_reverse_cumsum(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """``y_t = x_t + discount * y_{t+1}`` along the last dim, restarting after masked tails."""
    out = torch.zeros_like(x)
    running = torch.zeros_like(x[..., 0])
    for t in range(x.shape[-1] - 1, -1, -1):
        running = (x[..., t] + discount * running) * mask[..., t]
        out[..., t] = running
    return out


def gae_advantages(
    token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over ``[N, T]`` tokens; returns (advantages, returns).

    ``values[:, t]`` is the critic's V of the state before token t; the value after the last
    valid token is 0 (the episode ends).  ``returns = advantages + values`` are the critic's
    regression targets.  Masked positions come out 0.
    """
    if not (token_rewards.shape == values.shape == mask.shape):
        raise ValueError("token_rewards, values and mask must have the same [N, T] shape")
    m = mask.to(values.dtype)
    v = values.detach() * m
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)  # V_{t+1}; 0 past the end
    deltas = (token_rewards + gamma * next_v - v) * m
    adv = discounted_reverse_cumsum(deltas, m, gamma * lam)
    return adv, (adv + v) * m


def process_advantages(
    step_rewards: torch.Tensor, step_ends: torch.Tensor, mask: torch.Tensor, std: str = "population", eps: float = 1e-6
) -> torch.Tensor:
    """Process-supervised advantages ``[B, G, T]`` (DeepSeekMath, section 4.1.3).

    ``step_rewards[b, g, t]`` holds the reward of the step that ends at token t (read only
    where ``step_ends`` is true).  All step rewards of group b are normalised together; the
    advantage of token t is the sum of the normalised rewards of the steps ending at or
    after t.  Tokens after the last step end (or masked) get 0.
    """
    if not (step_rewards.shape == step_ends.shape == mask.shape) or step_rewards.dim() != 3:
        raise ValueError("step_rewards, step_ends and mask must share the shape [B, G, T]")
    if std not in STD_MODES:
        raise ValueError(f"std must be one of {STD_MODES}, got {std!r}")
    ends = step_ends.bool() & mask.bool()
    r = step_rewards.detach().to(torch.float64)
    normed = torch.zeros_like(r)
    for b in range(r.shape[0]):
        vals = r[b][ends[b]]
        if vals.numel() == 0:
            continue
        centred = vals - vals.mean()
        if std != "none":
            ddof = 1 if std == "sample" else 0
            var = (centred**2).sum() / max(vals.numel() - ddof, 1)
            centred = centred / (var.sqrt() + eps)
        normed[b][ends[b]] = centred
    # Sum of the normalised rewards from each token's step onwards: a reverse cumulative sum.
    adv = torch.flip(torch.cumsum(torch.flip(normed, dims=[-1]), dim=-1), dims=[-1])
    return (adv * mask.to(adv.dtype)).to(step_rewards.dtype)


def process_token_rewards(
    outcome_rewards: torch.Tensor,
    step_rewards: torch.Tensor,
    step_ends: torch.Tensor,
    mask: torch.Tensor,
    process_weight: float = 1.0,
    outcome_weight: float = 0.0,
    step_offset: float = 0.0,
) -> torch.Tensor:
    """Token rewards ``[N, T]`` for GAE from an outcome reward and PRM step scores (Math-Shepherd, PPO form).

    ``r_t = w_o * R * 1[t is the completion's last token] + w_p * (s_k - step_offset) * 1[step k closes at t]``

    ``outcome_rewards [N]`` (or ``[B, G]``) are the completions' outcome rewards R; ``step_rewards[n, t]`` holds
    the score s_k of the step that closes at token t, read only where ``step_ends`` is true (and the token is
    in ``mask``).  ``step_offset`` is subtracted from every step score: 0 gives Math-Shepherd's raw score (every
    step pays, so more steps pay more), 0.5 centres a [0, 1] PRM (a doubtful step costs).  A per-token KL
    penalty, where the KL is in the reward, is added by the caller; the last token takes both its step's score
    and the outcome.
    """
    if not (step_rewards.shape == step_ends.shape == mask.shape) or mask.dim() != 2:
        raise ValueError("step_rewards, step_ends and mask must share the shape [N, T]")
    if outcome_rewards.numel() != mask.shape[0]:
        raise ValueError(f"outcome_rewards has {outcome_rewards.numel()} values for {mask.shape[0]} completions")
    m = mask.bool()
    ends = step_ends.bool() & m
    out = torch.where(ends, process_weight * (step_rewards.detach().double() - step_offset), 0.0).double()
    lengths = m.sum(dim=1)
    ended = lengths > 0
    # the last token the model wrote: the highest index in the mask (a tool's output may leave holes before it)
    last = (torch.arange(mask.shape[1]).expand_as(m) * m).argmax(dim=1)
    rows = torch.arange(mask.shape[0])[ended]
    out[rows, last[ended]] += outcome_weight * outcome_rewards.reshape(-1).double()[ended]
    return out
