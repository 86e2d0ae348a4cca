"""Advantage estimators: scored rewards -> the gradient coefficient of every token.

Each is an ``Estimator`` in the registry ``ESTIMATORS``, declaring what it needs (a
critic, a PRM, groups of at least two) and which ``advantage.*`` options it reads, so
config validation and the trainer ask the entry instead of comparing names.  Each turns
the rewards ``[B, G]`` (and, for ``gae``, the critic's values; for ``process``, the PRM's
step rewards) into per-token advantages ``[N, T]`` by calling the pure functions of
``veriloop.algorithms``.  ``kind == "coefficient"`` marks the likelihood recipes' 0/1
weights: ``one`` (SFT: every trace) and ``filter`` (RFT, distillation, DPO pairs:
``1[reward >= accept_threshold]``); there the verifier's filter chooses the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from veriloop.algorithms import (
    gae_advantages,
    group_advantages,
    process_advantages,
    process_token_rewards,
    reinforce_advantages,
    rloo_advantages,
)


class EstimatorInput(NamedTuple):
    rewards: torch.Tensor  # [B, G] sequence rewards (KL-shaped when placement is reward)
    mask: torch.Tensor  # [B*G, T] completion tokens
    token_rewards: torch.Tensor | None  # [B*G, T] for gae: terminal reward and per-token KL penalty
    values: torch.Tensor | None  # [B*G, T] critic values (gae)
    step_rewards: torch.Tensor | None = None  # [B*G, T] PRM score of the step closing at each token (process)
    step_ends: torch.Tensor | None = None  # [B*G, T] true where a step closes (process)
    outcome_rewards: torch.Tensor | None = None  # [B, G] the rewards before any KL shaping (gae_process)


@dataclass(frozen=True)
class Estimator:
    """``fn(EstimatorInput, TrainConfig) -> advantages [N, T]`` and what it needs."""

    fn: Callable[[EstimatorInput, object], torch.Tensor]
    description: str = ""
    kind: str = "advantage"  # "advantage" (ratio objectives) | "coefficient" (0/1 weights: likelihood, DPO)
    per_token: bool = False  # a different value at every token (gae), not one per completion
    min_group_size: int = 1  # compares completions within a group (grpo, rloo)
    needs_critic: bool = False
    needs_prm: bool = False
    reads: tuple[str, ...] = ()  # the advantage.* options it reads (others set by the user are refused)

    def __call__(self, x: EstimatorInput, cfg) -> torch.Tensor:
        return self.fn(x, cfg)


def broadcast(per_seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One value per completion on each of its tokens. float64 throughout the signal: exact mode
    compares expectations to 1e-12."""
    return per_seq.reshape(-1, 1).double() * mask.double()


def _gae(x: EstimatorInput, cfg, token_rewards: torch.Tensor | None = None) -> torch.Tensor:
    # A tool's output leaves holes in the mask; the recursion runs over the model's tokens only (the tool's are
    # the environment's transition, not actions), so each row's model tokens are packed to the left first, in
    # order (the identity for a row without holes), and the advantages put back where the tokens were.
    mask = x.mask.double()
    order = torch.argsort((mask == 0).to(torch.int8), dim=1, stable=True)
    adv, _ = gae_advantages(
        (x.token_rewards if token_rewards is None else token_rewards).double().gather(1, order),
        x.values.double().gather(1, order),
        mask.gather(1, order),
        cfg.advantage.gamma,
        cfg.advantage.lam,
    )
    return torch.zeros_like(adv).scatter(1, order, adv)


def _gae_process(x: EstimatorInput, cfg) -> torch.Tensor:
    """GAE over ``w_o * R`` on the last token, ``w_p * (s_k - step_offset)`` on each step's closing token, and the
    per-token KL penalty where the KL is in the reward (``x.token_rewards`` minus the terminal outcome)."""
    pc = cfg.process
    outcome = x.outcome_rewards if x.outcome_rewards is not None else x.rewards
    kl_part = x.token_rewards.double() - terminal_outcome(outcome, x.mask)
    shaped = process_token_rewards(
        outcome, x.step_rewards, x.step_ends, x.mask, pc.process_weight, pc.outcome_weight, pc.step_offset
    )
    return _gae(x, cfg, shaped + kl_part)


def terminal_outcome(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, T]``: each completion's reward on its last model token (what ``token_rewards`` holds besides the KL)."""
    return process_token_rewards(
        rewards, torch.zeros(mask.shape, dtype=torch.float64), torch.zeros(mask.shape, dtype=torch.bool), mask, 0.0, 1.0
    )


def _accepted(x: EstimatorInput, cfg) -> torch.Tensor:
    return broadcast((x.rewards >= cfg.advantage.accept_threshold).to(x.mask.dtype), x.mask)


def _process(x: EstimatorInput, cfg) -> torch.Tensor:
    """``w_p * process_advantages(PRM step rewards) + w_o * group_advantages(outcome rewards)``."""
    B, G = x.rewards.shape
    shape = (B, G, x.mask.shape[1])
    proc = process_advantages(
        x.step_rewards.double().view(shape),
        x.step_ends.view(shape),
        x.mask.view(shape),
        cfg.advantage.std,
        cfg.advantage.eps,
    ).view(B * G, -1)
    adv = cfg.process.process_weight * proc
    if cfg.process.outcome_weight:
        outcome = group_advantages(x.rewards, cfg.advantage.std, cfg.advantage.eps)
        adv = adv + cfg.process.outcome_weight * broadcast(outcome, x.mask)
    return adv * x.mask.double()


# the built-in estimators, registered by training/__init__.py under these names
BUILT_IN = {
    "grpo": Estimator(
        lambda x, c: broadcast(group_advantages(x.rewards, c.advantage.std, c.advantage.eps), x.mask),
        "(r - group mean) / (group std + eps)",
        min_group_size=2,
        reads=("std", "eps"),
    ),
    "dr_grpo": Estimator(
        lambda x, c: broadcast(group_advantages(x.rewards, "none"), x.mask), "r - group mean", min_group_size=2
    ),
    "rloo": Estimator(
        lambda x, c: broadcast(rloo_advantages(x.rewards), x.mask), "r - mean of the others", min_group_size=2
    ),
    "reinforce": Estimator(
        lambda x, c: broadcast(
            reinforce_advantages(x.rewards, c.advantage.baseline, c.advantage.baseline_value), x.mask
        ),
        "r - baseline",
        reads=("baseline", "baseline_value"),
    ),
    "gae": Estimator(_gae, "GAE with a learned critic", per_token=True, needs_critic=True, reads=("gamma", "lam")),
    "gae_process": Estimator(
        _gae_process,
        "GAE with a learned critic over PRM step rewards on the step-end tokens and the outcome on the last",
        per_token=True,
        needs_critic=True,
        needs_prm=True,
        reads=("gamma", "lam"),
    ),
    "filter": Estimator(_accepted, "1[reward >= accept_threshold]", kind="coefficient", reads=("accept_threshold",)),
    "one": Estimator(
        lambda x, c: torch.ones(x.mask.shape, dtype=torch.float64) * x.mask, "1 on every trace", kind="coefficient"
    ),
    "process": Estimator(
        _process, "PRM step rewards, group-normalised, summed from each step on", needs_prm=True, reads=("std", "eps")
    ),
}
