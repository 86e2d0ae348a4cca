"""The learner: ``update(batch) -> stats``, weights out as named tensors, state in a checkpoint.

One update is ``update.inner_updates`` passes of the configured objective (``OBJECTIVES``,
``training/objectives.py``) over one learning batch.  Token objectives: per micro-batch and
token the objective, minus ``beta * KL`` when the KL sits in the loss, plus an entropy bonus;
aggregated by ``loss.aggregation`` with micro-batch weights that make gradient accumulation
exact, and scaled by the kept rows' share of the batch so that leaving out zero-gradient rows
saves compute without changing the estimator; one optimizer step per mini-batch.  DPO runs
passes over pairs instead.  Which distribution each log-prob is taken under:
``training/logprobs.py``.  With ``loss.tis_cap`` the ratio's denominator is the learner's own
recomputed old log-prob and each token is weighted by ``min(pi_old / pi_behavior, cap)``
(truncated importance sampling between the rollout engine and the learner).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from veriloop.algorithms import (
    aggregate_loss,
    aggregation_weight,
    clip_fractions,
    dpo_loss,
    entropy_from_logprobs,
    kl_estimate,
    kl_exact,
)
from veriloop.models.batch import select
from veriloop.models.loading import load_policy
from veriloop.registry import OBJECTIVES
from veriloop.training.logprobs import token_logprobs
from veriloop.training.optim import build_optimizer, clip_grad_norm, set_lr
from veriloop.training.signals import LearningBatch


class UpdateStats:
    """Per-token statistics of the learner passes (no gradients)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.ratio_min, self.ratio_max = float("inf"), float("-inf")
        self.grad_norms: list[float] = []

    def acc(self, key: str, total: float, count: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + total
        self.counts[key] = self.counts.get(key, 0.0) + count

    def ratios(self, ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, c) -> None:
        valid, n = mask.bool(), float(mask.sum())
        low, high = clip_fractions(ratio, adv, mask, c.clip_eps_low, c.clip_eps_high)
        self.acc("clip_frac_low", low * n, n)
        self.acc("clip_frac_high", high * n, n)
        self.ratio_min = min(self.ratio_min, float(ratio[valid].min()))
        self.ratio_max = max(self.ratio_max, float(ratio[valid].max()))

    def summary(self) -> dict:
        out = {k: self.sums[k] / max(self.counts[k], 1.0) for k in self.sums}
        if self.ratio_min != float("inf"):
            out.update(ratio_min=self.ratio_min, ratio_max=self.ratio_max)
        if self.grad_norms:
            out["grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)
        return out


class Learner:
    def __init__(self, policy, cfg, on_step: Callable[[], None] = lambda: None):
        self.policy, self.cfg = policy, cfg
        self.objective = OBJECTIVES.get(cfg.loss.policy_loss)
        self.optimizer = build_optimizer(policy.model, cfg.optim)
        self.on_step = on_step  # called after every optimizer step (counts policy versions)

    # ------------------------------------------------------------------ the role's interface

    def update(self, lb: LearningBatch, kl_beta: float, seed_generator: torch.Generator) -> dict:
        self.policy.model.eval()  # dropout off (as TRL's disable_dropout): the ratio starts at exactly 1
        return self.objective.passes(self, lb, kl_beta, seed_generator)

    def set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights as named tensors (what a rollout engine's ``load_weights`` takes)."""
        return list(self.policy.model.state_dict().items())

    def save(self, directory: Path) -> None:
        """The learner's state in a checkpoint: ``model/`` (safetensors) and ``optimizer.pt``."""
        self.policy.save(directory / "model")
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        """Resume from ``save``'s files: the weights of ``model/`` and the optimizer's moments and step."""
        saved = load_policy(str(directory / "model")).model.state_dict()
        with torch.no_grad():
            self.policy.model.load_state_dict(saved)
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))

    # ------------------------------------------------------------------ passes

    def micro_batches(self, rows: torch.Tensor):
        return rows.split(self.cfg.update.micro_batch_size)

    def logprobs(self, sub):
        return token_logprobs(self.policy.completion_logits(sub), sub.completion_ids, self.cfg.sampling,
                              self.objective.distribution)  # fmt: skip

    @torch.no_grad()
    def old_logprobs(self, lb: LearningBatch) -> torch.Tensor:
        """The learner's own log-probs of the batch before this step's updates (for TIS)."""
        out = torch.zeros_like(lb.batch.completion_mask)
        for rows in self.micro_batches(torch.arange(lb.size)):
            lp, _ = self.logprobs(select(lb.batch, rows))
            out[rows, : lp.shape[1]] = lp.to(out.dtype)
        return out

    def mini_batches(self, n: int, gen: torch.Generator):
        u = self.cfg.update
        order = torch.randperm(n, generator=gen) if u.mini_batches > 1 else torch.arange(n)
        return order.chunk(u.mini_batches)

    def optimizer_step(self, stats: UpdateStats) -> None:
        stats.grad_norms.append(clip_grad_norm(self.policy.model, self.cfg.optim.grad_clip))
        self.optimizer.step()
        self.on_step()

    def token_passes(self, objective, lb: LearningBatch, kl_beta: float, gen) -> dict:
        cfg, stats = self.cfg, UpdateStats()
        old = self.old_logprobs(lb) if cfg.loss.tis_cap > 0 and objective.needs_behavior else None
        use_kl = kl_beta > 0 and cfg.kl.placement == "loss" and lb.ref_logprobs is not None
        for update_pass in range(cfg.update.inner_updates):
            for mb in self.mini_batches(lb.size, gen):
                self.optimizer.zero_grad(set_to_none=True)
                mb_mask, mb_loss = lb.batch.completion_mask[mb], 0.0
                for rows in self.micro_batches(mb):
                    loss, weight = self._micro_batch_loss(objective, lb, rows, old, kl_beta if use_kl else 0.0,
                                                          mb_mask, stats, first=update_pass == 0)  # fmt: skip
                    (loss * weight).backward()
                    mb_loss += float(loss.detach() * weight)  # the weights make this the mini-batch's loss
                if update_pass == 0:
                    stats.acc("loss", mb_loss, 1.0)
                self.optimizer_step(stats)
        return stats.summary()

    def _micro_batch_loss(self, objective, lb, rows, old, kl_beta, mb_mask, stats, first: bool):
        c, sub = self.cfg.loss, select(lb.batch, rows)
        T, mask = sub.completion_ids.shape[1], sub.completion_mask
        lp, full = self.logprobs(sub)
        adv = lb.advantages[rows, :T]
        objective_t = self._objective(objective, lp, lb, old, rows, T, adv, mask, stats, first)
        if kl_beta:
            kl = self._kl(full, lb.ref_logprobs[rows, :T], sub.completion_ids)
            objective_t = objective_t - kl_beta * kl
            if first:
                kl_sum = float((kl.detach() * mask).sum())
                stats.acc("kl", kl_sum, float(mask.sum()))
                stats.acc("kl_per_completion", kl_sum, float(mask.shape[0]))  # the adaptive controller's
        if c.entropy_coef:
            objective_t = objective_t + c.entropy_coef * entropy_from_logprobs(full)
        loss = -aggregate_loss(objective_t, mask, c.aggregation, max_len=self.cfg.sampling.max_new_tokens)
        if first:
            self._first_pass_stats(stats, lp, lb.behavior[rows, :T] if lb.behavior is not None else None, full, mask)
        return loss, aggregation_weight(mask, mb_mask, c.aggregation) * lb.kept_share

    def _objective(self, objective, lp, lb, old, rows, T, adv, mask, stats, first):
        c = self.cfg.loss
        if not objective.needs_behavior:  # likelihood: no ratio
            return objective.per_token(lp, None, adv, mask, c)
        den = (old if old is not None else lb.behavior)[rows, :T].to(lp.dtype)
        out = objective.per_token(lp, den, adv, mask, c)
        ratio = torch.exp(lp.detach() - den)
        stats.ratios(ratio, adv.expand_as(ratio), mask, c)
        if old is not None:  # truncated IS: pi_old(learner) / pi_behavior(rollout engine), capped
            w = torch.exp(den - lb.behavior[rows, :T].to(lp.dtype)).clamp(max=c.tis_cap)
            out = out * w
            if first:
                stats.acc("tis_weight", float((w * mask).sum()), float(mask.sum()))
        return out

    def _kl(self, full, ref, ids) -> torch.Tensor:
        est = self.cfg.kl.estimator
        if est == "exact":  # the whole next-token distribution at each visited position
            return kl_exact(full, ref.to(full.dtype))
        lp_full = full.gather(-1, ids[..., None]).squeeze(-1)
        return kl_estimate(lp_full, ref.to(lp_full.dtype), est)

    @torch.no_grad()
    def _first_pass_stats(self, stats: UpdateStats, lp, behavior, full, mask) -> None:
        valid, n = mask.bool(), float(mask.sum())
        stats.acc("entropy", float(entropy_from_logprobs(full)[valid].sum()), n)
        if behavior is not None:  # the rollout engine's log-probs vs the learner's, before any update
            diff = (lp.detach() - behavior.to(lp.dtype)).abs()
            stats.acc("logprob_mismatch", float(diff[valid].sum()), n)

    def pair_passes(self, lb: LearningBatch, gen) -> dict:
        """DPO on (chosen, rejected) pairs: sequence log-probs of the policy against the reference."""
        stats, pairs = UpdateStats(), lb.pairs
        ref_seq = (lb.ref_logprobs * lb.batch.completion_mask).sum(dim=1)  # [N]
        for _ in range(self.cfg.update.inner_updates):
            for mb in self.mini_batches(pairs.shape[0], gen):
                self.optimizer.zero_grad(set_to_none=True)
                for chunk in mb.split(max(1, self.cfg.update.micro_batch_size // 2)):
                    self._pair_chunk(lb, pairs[chunk], ref_seq, mb.numel(), stats)
                self.optimizer_step(stats)
        return stats.summary()

    def _pair_chunk(self, lb, p, ref_seq, n_pairs: int, stats: UpdateStats) -> None:
        rows = p.reshape(-1)
        sub = select(lb.batch, rows)
        lp, _ = self.logprobs(sub)
        seq = (lp * sub.completion_mask).sum(dim=1).view(-1, 2)  # [P, (chosen, rejected)]
        ref = ref_seq[rows].view(-1, 2).to(seq.dtype)
        losses = dpo_loss(seq[:, 0], seq[:, 1], ref[:, 0], ref[:, 1], self.cfg.loss.dpo_beta)
        (losses.sum() / n_pairs).backward()
        margin = ((seq[:, 0] - ref[:, 0]) - (seq[:, 1] - ref[:, 1])).detach()
        stats.acc("dpo_loss", float(losses.detach().sum()), float(len(p)))
        stats.acc("dpo_accuracy", float((margin > 0).sum()), float(len(p)))
        stats.acc("dpo_margin", float(margin.sum()), float(len(p)))
