"""Scored records -> the learning signal: the gradient coefficient of every token.

``learning_signal`` is stage 4 of the loop.  With ``kl.placement == "reward"`` the KL penalty
is subtracted from the reward first (per token for ``gae``, summed per completion otherwise);
the configured estimator (``training/loop/estimators.py``) turns the rewards into advantages; the
objective (or the default rule) chooses the rows to learn from; reference log-probs are
computed for those rows only, and only when something reads them.

Truncation (``update.mask_truncated``, on by default; seeds 003 section 1.1: the budget's cut is the
environment's, not the model's ending, and mixing the two changes the learning direction): a completion
cut at ``sampling.max_new_tokens`` (finish ``length``) is left out of the loss, out of its group's
statistics (the group is the prompt's completions that ended: ``ended_advantages``), out of DPO's
pairs, and out of the loss normaliser (the loss is the mean over the completions that ended, whatever
the truncation rate).  ``rollout.overlong_buffer`` penalises cut completions instead, and needs them
learned from: the two together are refused (``check_signal_options``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from veriloop.algorithms import kl_estimate
from veriloop.config import ConfigError
from veriloop.models.batch import PolicyBatch, build_policy_batch, last_token_index, select
from veriloop.registry import ESTIMATORS, OBJECTIVES
from veriloop.rollout.records import Record
from veriloop.training.loop.estimators import EstimatorInput
from veriloop.training.loop.logprobs import reference_temperature, temperature_of


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


class Signal(NamedTuple):
    batch: LearningBatch | None  # None: nothing to learn from this step
    rewards: torch.Tensor  # [B, G]
    advantages: torch.Tensor  # [N, T]
    mask: torch.Tensor  # [N, T] completion tokens
    stats: dict  # what this stage measured (the KL in the reward)


def records_batch(records: list[Record], pad_id: int) -> tuple[PolicyBatch, torch.Tensor | None]:
    """Sequences of the records and their behaviour log-probs ``[N, T]`` (None if unknown)."""
    batch = build_policy_batch(
        [r.prompt_ids for r in records],
        [r.completion_ids for r in records],
        pad_id,
        [r.model_mask for r in records] if any(r.model_mask for r in records) else None,
    )
    if any(r.behavior_logprobs is None for r in records):
        return batch, None
    behavior = torch.zeros(batch.completion_mask.shape, dtype=torch.float64)
    for i, r in enumerate(records):
        behavior[i, : len(r.behavior_logprobs)] = torch.tensor(r.behavior_logprobs, dtype=torch.float64)
    return batch, behavior


def terminal_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, T]``: each completion's reward on its last token the model wrote, 0 elsewhere."""
    out = torch.zeros(mask.shape, dtype=torch.float64)
    last = last_token_index(mask)
    out[torch.arange(mask.shape[0]), last] = rewards.reshape(-1).double()
    return out


def kl_penalty(behavior: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate of the sampled tokens (the reward-placement penalty), 0 on padding."""
    return kl_estimate(behavior, ref_logprobs.to(behavior.dtype), estimator) * mask


def kept_share(mask: torch.Tensor, rows: torch.Tensor, aggregation: str, among: torch.Tensor | None = None) -> float:
    """Share of the loss normaliser that the selected rows carry: the normaliser counts the rows ``among``
    (default: every row of the batch).

    Leaving out rows whose advantage is 0 must not change the estimator: the loss over the
    kept rows is scaled as if the left-out rows (contributing 0) were still in the mean.  Rows
    outside ``among`` (cut completions, with ``update.mask_truncated``) are not in the mean at all.
    """
    among = torch.arange(mask.shape[0]) if among is None else among
    if aggregation == "token-mean":
        return float(mask[rows].sum()) / max(float(mask[among].sum()), 1.0)
    return rows.numel() / max(among.numel(), 1)


def check_signal_options(cfg) -> None:
    """The learning signal's rules across config sections (a ``ConfigError`` naming the options)."""
    if cfg.update.mask_truncated and cfg.rollout.overlong_buffer:
        raise ConfigError(
            f"rollout.overlong_buffer={cfg.rollout.overlong_buffer} penalises completions cut at "
            "sampling.max_new_tokens (its ramp reaches -1 there) and update.mask_truncated (on by default) leaves "
            "them out of the loss, where no penalty reaches them: choose one. To penalise them set "
            "update.mask_truncated false (DAPO's overlong shaping); to keep them apart set "
            "rollout.overlong_buffer 0"
        )
    if cfg.kl.importance_weighted and cfg.kl.beta > 0:
        if cfg.rollout.source == "task-teacher":
            raise ConfigError(
                "kl.importance_weighted with rollout.source task-teacher: the task's traces were "
                "sampled by no policy, so there are no behaviour log-probs to weight by"
            )
        if OBJECTIVES.get(cfg.loss.policy_loss).distribution != "sampling":
            raise ConfigError(
                f"kl.importance_weighted with loss.policy_loss={cfg.loss.policy_loss}: its log-probs "
                "are the model's, not the sampling distribution's that the behaviour log-probs were "
                "recorded under; use a ratio objective (clip, dual-clip, gspo, pg)"
            )


def _input_rows(x: EstimatorInput, rows: torch.Tensor, groups: int) -> EstimatorInput:
    """The estimator's input restricted to completions ``rows`` (flat indices), as ``groups`` equal groups."""
    pick = [t[rows] if t is not None else None for t in (x.token_rewards, x.values, x.step_rewards, x.step_ends)]
    outcome = x.outcome_rewards.reshape(-1)[rows].view(groups, -1) if x.outcome_rewards is not None else None
    return EstimatorInput(x.rewards.reshape(-1)[rows].view(groups, -1), x.mask[rows], *pick, outcome)


def ended_advantages(estimator, x: EstimatorInput, cfg, ended: torch.Tensor) -> torch.Tensor:
    """Advantages ``[N, T]`` in which only completions that ended (``ended [B, G]``) take part.

    A cut completion has no verdict, so it is no point of comparison either: each group's statistics
    (mean, std, leave-one-out mean) are over its ended members, a group with fewer of them than the
    estimator compares (``min_group_size``) gets 0, and cut completions get 0.  The groups that all
    ended go to the estimator together, each other group alone; a batch-wide statistic (reinforce's
    ``advantage.baseline batch``, the one that spans groups) is taken over every ended completion.
    """
    if bool(ended.all()):
        return estimator(x, cfg)
    B, G = ended.shape
    out = torch.zeros(x.mask.shape, dtype=torch.float64)
    flat = torch.arange(B * G).view(B, G)
    if cfg.advantage.baseline == "batch":
        parts = [(flat[ended], 1)]
    else:
        whole = ended.all(dim=1)
        parts = [(flat[whole].reshape(-1), int(whole.sum()))] if whole.any() else []
        parts += [
            (flat[b][ended[b]], 1)
            for b in (~whole).nonzero().squeeze(1).tolist()
            if int(ended[b].sum()) >= max(estimator.min_group_size, 1)
        ]
    for rows, groups in parts:
        out[rows] = estimator(_input_rows(x, rows, groups), cfg).double()
    return out


def zero_advantage_means_zero_gradient(cfg, kl_beta: float) -> bool:
    """Is a row whose advantage is 0 at every token free of gradient?

    Only when nothing else sits in its loss: no KL term (``beta == 0``, or the KL is in the
    reward, where it already moved the advantage) and no entropy bonus.  Otherwise the row
    still pulls towards the reference (or higher entropy), and leaving it out would scale the
    KL weight by the share of rows with a non-zero advantage.
    """
    return not cfg.kl.in_loss(kl_beta) and cfg.loss.entropy_coef == 0


class SignalMaker:
    """Stage 4: records -> ``Signal``, reading the roles that hold what it needs (reference, critic, PRM)."""

    def __init__(self, cfg, objective, pad_id: int, reference=None, critic=None, process=None):
        self.cfg, self.objective, self.pad_id = cfg, objective, pad_id
        self.reference, self.critic, self.process = reference, critic, process
        self.estimator = ESTIMATORS.get(cfg.advantage.estimator)
        check_signal_options(cfg)

    def __call__(self, records: list[Record], beta: float) -> Signal:
        cfg, G = self.cfg, self.cfg.rollout.group_size
        rewards = torch.tensor([r.reward for r in records], dtype=torch.float64).view(-1, G)
        batch, behavior = records_batch(records, self.pad_id)
        mask = batch.completion_mask
        shaped, token_rewards, stats = self._kl_in_reward(rewards, batch, behavior, beta)
        values = self.critic.values(batch) if self.critic is not None else None
        if self.estimator.per_token and token_rewards is None:
            token_rewards = terminal_rewards(rewards, mask)
        steps = self.process.step_rewards(records, mask) if self.process is not None else (None, None)
        ended = self.ended(records).view(-1, G)
        advantages = ended_advantages(
            self.estimator, EstimatorInput(shaped, mask, token_rewards, values, *steps, rewards), cfg, ended
        )
        if cfg.update.mask_truncated:
            stats["truncated_left_out"] = int((~ended).sum())
        rows, pairs = self.select_rows(records, rewards, advantages, beta)
        if rows.numel() == 0:
            return Signal(None, rewards, advantages, mask, stats)
        sub = select(batch, rows)
        T = sub.completion_ids.shape[1]
        ref = self._reference(sub, beta)
        # Likelihood recipes (coefficients 0/1): the verifier's filter chooses the data, and the loss is the
        # mean over what it kept, as fine-tuning on the filtered set would be.  Elsewhere rows left out for
        # a zero advantage keep their place in the normaliser, so skipping changes nothing.
        filtered = pairs is not None or self.estimator.kind == "coefficient"
        lb = LearningBatch(
            records=[records[i] for i in rows.tolist()],
            batch=sub,
            behavior=behavior[rows, :T] if behavior is not None else None,
            advantages=advantages[rows, :T],
            ref_logprobs=ref,
            returns=(advantages + values.double())[rows, :T] if values is not None else None,
            old_values=values[rows, :T] if values is not None else None,
            pairs=pairs,
            kept_share=1.0
            if filtered
            else kept_share(mask, rows, cfg.loss.aggregation, ended.reshape(-1).nonzero().squeeze(1)),
        )
        return Signal(lb, rewards, advantages, mask, stats)

    def _kl_in_reward(self, rewards, batch, behavior, beta):
        """KL in the reward: (shaped rewards [B, G], token rewards [N, T] or None, stats)."""
        cfg = self.cfg
        if not cfg.kl.in_reward(beta):
            return rewards, None, {}
        ref_all = self.reference.logprobs(batch, temperature_of(cfg.sampling), full=False)
        mask = batch.completion_mask
        penalty = kl_penalty(behavior, ref_all, mask, cfg.kl.estimator)
        stats = {
            "kl": float(penalty.sum() / mask.sum().clamp(min=1)),  # per token: the "kl" metric
            "kl_per_completion": float(penalty.sum(dim=1).mean()),
        }  # what the adaptive controller tracks
        shaped = rewards - beta * penalty.sum(dim=1).view(-1, cfg.rollout.group_size)
        return shaped, terminal_rewards(rewards, mask) - beta * penalty, stats

    def _reference(self, sub: PolicyBatch, beta: float):
        """Reference log-probs of the kept rows: for the KL in the loss (whole distributions for the exact
        KL), or for an objective that reads them (DPO); None when nothing does."""
        kl_in_loss = self.cfg.kl.in_loss(beta)
        if not (kl_in_loss or self.objective.needs_reference):
            return None
        full = kl_in_loss and self.cfg.kl.estimator == "exact"
        return self.reference.logprobs(sub, reference_temperature(self.objective, self.cfg.sampling), full)

    def ended(self, records: list[Record]) -> torch.Tensor:
        """``[N]`` bool: the completions that take part (all of them unless ``update.mask_truncated``)."""
        if not self.cfg.update.mask_truncated:
            return torch.ones(len(records), dtype=torch.bool)
        return torch.tensor([not r.truncated for r in records], dtype=torch.bool)

    def select_rows(self, records, rewards, advantages, beta) -> tuple[torch.Tensor, torch.Tensor | None]:
        ended = self.ended(records)
        chosen = self.objective.select_rows(records, rewards, advantages, self.cfg)
        if chosen is not None:
            return without_cut(*chosen, ended)
        keep = ended.clone()  # a cut-off completion has no verdict on its ending: left out (update.mask_truncated)
        skip = self.cfg.update.skip_zero_advantage and zero_advantage_means_zero_gradient(self.cfg, beta)
        if skip or self.estimator.kind == "coefficient":
            keep &= (advantages != 0).any(dim=1)
        return keep.nonzero().squeeze(1), None


def without_cut(rows: torch.Tensor, pairs: torch.Tensor | None, ended: torch.Tensor):
    """An objective's own ``(rows, pairs)`` without the completions that did not end: a pair with a cut member
    is dropped (DPO: a cut completion is neither the chosen nor the rejected one)."""
    if bool(ended[rows].all()):
        return rows, pairs
    if pairs is None:
        return rows[ended[rows]], None
    members = rows.tolist()
    kept = [(members[a], members[b]) for a, b in pairs.tolist() if ended[members[a]] and ended[members[b]]]
    new = sorted({i for p in kept for i in p})
    where = {row: k for k, row in enumerate(new)}
    return (
        torch.tensor(new, dtype=torch.long),
        torch.tensor([[where[a], where[b]] for a, b in kept], dtype=torch.long).view(-1, 2),
    )
