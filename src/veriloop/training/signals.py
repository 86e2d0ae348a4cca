"""Scored records -> the learning signal: the gradient coefficient of every token.

``ESTIMATORS`` is the registry the trainer uses for every variant: each entry turns the
rewards ``[B, G]`` (and, for ``gae``, the critic's values) into per-token advantages
``[N, T]`` by calling the pure functions of ``veriloop.algorithms``.  The likelihood recipes
use ``one`` (SFT: coefficient 1 on every trace, whatever the verifier says) or ``filter``
(RFT, distillation: ``1[reward >= accept_threshold]``); DPO pairs accepted with rejected
completions of one prompt.  With ``kl.placement == "reward"`` the KL penalty
is subtracted from the reward before any of this (per token for ``gae``, summed per
completion otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from veriloop.algorithms import (
    gae_advantages,
    group_advantages,
    kl_estimate,
    process_advantages,
    reinforce_advantages,
    rloo_advantages,
)
from veriloop.models.batch import PolicyBatch, build_policy_batch
from veriloop.rollout.records import Record
from veriloop.training.run_config import TrainConfig


class LearningBatch(NamedTuple):
    """Everything the learner needs for one step (rows are the records in the update)."""

    records: list[Record]
    batch: PolicyBatch  # [N, L] sequences, completions [N, T]
    behavior: torch.Tensor | None  # [N, T] behaviour log-probs (None for task-teacher traces)
    advantages: torch.Tensor  # [N, T] gradient coefficients (advantages, or 0/1 for likelihood)
    ref_logprobs: torch.Tensor | None  # [N, T] (or [N, T, V] for the exact KL) under the reference
    returns: torch.Tensor | None  # [N, T] critic targets (gae)
    old_values: torch.Tensor | None  # [N, T] critic values at sampling time (gae)
    pairs: torch.Tensor | None  # [P, 2] row indices (chosen, rejected) for DPO
    kept_share: float = 1.0  # the selected rows' share of the batch's normaliser (rows or tokens)

    @property
    def size(self) -> int:
        return len(self.records)


class EstimatorInput(NamedTuple):
    rewards: torch.Tensor  # [B, G] sequence rewards (KL-shaped when placement is reward)
    mask: torch.Tensor  # [B*G, T] completion tokens
    token_rewards: torch.Tensor | None  # [B*G, T] for gae: terminal reward and per-token KL penalty
    values: torch.Tensor | None  # [B*G, T] critic values (gae)
    step_rewards: torch.Tensor | None = None  # [B*G, T] PRM score of the step closing at each token (process)
    step_ends: torch.Tensor | None = None  # [B*G, T] true where a step closes (process)


def _broadcast(per_seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # float64 throughout the signal: exact mode compares expectations to 1e-12
    return per_seq.reshape(-1, 1).double() * mask.double()


def _gae(x: EstimatorInput, cfg: TrainConfig) -> torch.Tensor:
    mask = x.mask.double()
    adv, _ = gae_advantages(x.token_rewards.double(), x.values.double(), mask, cfg.advantage.gamma, cfg.advantage.lam)
    return adv


def _accepted(x: EstimatorInput, cfg: TrainConfig) -> torch.Tensor:
    return _broadcast((x.rewards >= cfg.advantage.accept_threshold).to(x.mask.dtype), x.mask)


def _process(x: EstimatorInput, cfg: TrainConfig) -> torch.Tensor:
    """``w_p * process_advantages(PRM step rewards) + w_o * group_advantages(outcome rewards)``."""
    B, G = x.rewards.shape
    shape = (B, G, x.mask.shape[1])
    proc = process_advantages(x.step_rewards.double().view(shape), x.step_ends.view(shape), x.mask.view(shape),
                              cfg.advantage.std, cfg.advantage.eps).view(B * G, -1)  # fmt: skip
    adv = cfg.process.process_weight * proc
    if cfg.process.outcome_weight:
        outcome = group_advantages(x.rewards, cfg.advantage.std, cfg.advantage.eps)
        adv = adv + cfg.process.outcome_weight * _broadcast(outcome, x.mask)
    return adv * x.mask.double()


ESTIMATORS: dict[str, Callable[[EstimatorInput, TrainConfig], torch.Tensor]] = {
    "grpo": lambda x, c: _broadcast(group_advantages(x.rewards, c.advantage.std, c.advantage.eps), x.mask),
    "dr_grpo": lambda x, c: _broadcast(group_advantages(x.rewards, "none"), x.mask),
    "rloo": lambda x, c: _broadcast(rloo_advantages(x.rewards), x.mask),
    "reinforce": lambda x, c: _broadcast(
        reinforce_advantages(x.rewards, c.advantage.baseline, c.advantage.baseline_value), x.mask
    ),
    "gae": _gae,
    "filter": _accepted,
    "one": lambda x, c: torch.ones(x.mask.shape, dtype=torch.float64) * x.mask,
    "process": _process,
}


def records_batch(records: list[Record], pad_id: int) -> tuple[PolicyBatch, torch.Tensor | None]:
    """Sequences of the records and their behaviour log-probs ``[N, T]`` (None if unknown)."""
    batch = build_policy_batch([r.prompt_ids for r in records], [r.completion_ids for r in records], pad_id)
    if any(r.behavior_logprobs is None for r in records):
        return batch, None
    behavior = torch.zeros(batch.completion_mask.shape, dtype=torch.float64)
    for i, r in enumerate(records):
        behavior[i, : len(r.behavior_logprobs)] = torch.tensor(r.behavior_logprobs, dtype=torch.float64)
    return batch, behavior


def terminal_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, T]``: each completion's reward on its last token, 0 elsewhere."""
    out = torch.zeros(mask.shape, dtype=torch.float64)
    last = mask.sum(dim=1).long().clamp(min=1) - 1
    out[torch.arange(mask.shape[0]), last] = rewards.reshape(-1).double()
    return out


def kl_penalty(behavior: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate of the sampled tokens (the reward-placement penalty), 0 on padding."""
    return kl_estimate(behavior, ref_logprobs.to(behavior.dtype), estimator) * mask


def kept_share(mask: torch.Tensor, rows: torch.Tensor, aggregation: str) -> float:
    """Share of the full batch's loss normaliser that the selected rows carry.

    Leaving out rows whose advantage is 0 must not change the estimator: the loss over the
    kept rows is scaled as if the left-out rows (contributing 0) were still in the mean.
    """
    if aggregation == "token-mean":
        return float(mask[rows].sum()) / max(float(mask.sum()), 1.0)
    return rows.numel() / mask.shape[0]


def zero_advantage_means_zero_gradient(cfg: TrainConfig, kl_beta: float) -> bool:
    """Is a row whose advantage is 0 at every token free of gradient?

    Only when nothing else sits in its loss: no KL term (``beta == 0``, or the KL is in the
    reward, where it already moved the advantage) and no entropy bonus.  Otherwise the row
    still pulls towards the reference (or higher entropy), and leaving it out would scale the
    KL weight by the share of rows with a non-zero advantage.
    """
    kl_in_loss = kl_beta > 0 and cfg.kl.placement == "loss"
    return not kl_in_loss and cfg.loss.entropy_coef == 0


def dpo_pairs(rewards: torch.Tensor, threshold: float) -> list[tuple[int, int]]:
    """(chosen, rejected) flat indices: accepted and rejected completions of one prompt, zipped in order."""
    B, G = rewards.shape
    pairs = []
    for b in range(B):
        row = rewards[b].tolist()
        accepted = [b * G + g for g in range(G) if row[g] >= threshold]
        rejected = [b * G + g for g in range(G) if row[g] < threshold]
        pairs.extend(zip(accepted, rejected))
    return pairs
