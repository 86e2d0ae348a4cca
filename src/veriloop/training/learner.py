"""The update: mu passes of a policy objective over one learning batch.

Per micro-batch and token: the objective named by ``loss.policy_loss`` (from the registry
``OBJECTIVES``), minus ``beta * KL`` when the KL sits in the loss, plus an entropy bonus;
aggregated by ``loss.aggregation`` with micro-batch weights that make gradient accumulation
exact, and scaled by the kept rows' share of the batch so that leaving out zero-advantage
rows saves compute without changing the estimator; one optimizer step per mini-batch.
DPO works on accepted/rejected pairs instead.

Log-probs: ratio objectives use the sampling distribution (temperature, top-k, top-p) so
the ratio compares like with like; the likelihood objective (SFT, RFT) and DPO use the
model's own distribution (temperature 1).  The KL compares temperature-scaled full
distributions.  With ``loss.tis_cap`` the ratio's denominator is the learner's own
recomputed old log-prob and each token is weighted by ``min(pi_old / pi_behavior, cap)``
(truncated importance sampling between the rollout engine and the learner).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from veriloop.algorithms import (
    aggregate_loss,
    aggregation_weight,
    clip_fractions,
    clipped_surrogate,
    dpo_loss,
    dual_clip_surrogate,
    entropy_from_logprobs,
    gspo_surrogate,
    kl_estimate,
    kl_exact,
    likelihood_objective,
    pg_objective,
    sampling_logprobs,
)
from veriloop.models.batch import select
from veriloop.training.optim import clip_grad_norm
from veriloop.training.run_config import LossConfig, TrainConfig
from veriloop.training.signals import LearningBatch

# name -> objective(logprobs, denominators, advantages, mask, cfg) per token, to maximise
OBJECTIVES: dict[str, Callable[..., torch.Tensor]] = {
    "clip": lambda lp, den, adv, mask, c: clipped_surrogate(torch.exp(lp - den), adv, c.clip_eps_low, c.clip_eps_high),
    "dual-clip": lambda lp, den, adv, mask, c: dual_clip_surrogate(
        torch.exp(lp - den), adv, c.clip_eps_low, c.clip_eps_high, c.clip_ratio_c
    ),
    "gspo": lambda lp, den, adv, mask, c: gspo_surrogate(lp, den, adv[:, 0], mask, c.clip_eps_low, c.clip_eps_high),
    "pg": lambda lp, den, adv, mask, c: pg_objective(torch.exp(lp - den), adv),
    "likelihood": lambda lp, den, adv, mask, c: likelihood_objective(lp, adv),
}


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs of ``ids`` under the objective's distribution, temperature-scaled full log-probs)."""
    s = cfg.sampling
    temperature = s.temperature if s.temperature > 0 else 1.0
    full = torch.log_softmax(logits / temperature, dim=-1)
    if cfg.loss.policy_loss in ("likelihood", "dpo"):
        dist = full if temperature == 1.0 else torch.log_softmax(logits, dim=-1)
    elif s.top_k == 0 and s.top_p == 1.0:
        dist = full
    else:
        dist = sampling_logprobs(logits, temperature, s.top_k, s.top_p)
    return dist.gather(-1, ids[..., None]).squeeze(-1), full


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

    def ratios(self, ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, c: LossConfig) -> None:
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
    def __init__(self, policy, optimizer: torch.optim.Optimizer, cfg: TrainConfig, on_step: Callable[[], None]):
        self.policy, self.optimizer, self.cfg = policy, optimizer, cfg
        self.on_step = on_step  # called after every optimizer step (counts policy versions)

    def micro_batches(self, rows: torch.Tensor):
        return rows.split(self.cfg.update.micro_batch_size)

    def update(self, lb: LearningBatch, kl_beta: float, seed_generator: torch.Generator) -> dict:
        self.policy.model.eval()  # dropout off (as TRL's disable_dropout): the ratio starts at exactly 1
        if self.cfg.loss.policy_loss == "dpo":
            return self._dpo_passes(lb, seed_generator)
        old = self._old_logprobs(lb) if self.cfg.loss.tis_cap > 0 else None
        return self._token_passes(lb, kl_beta, old, seed_generator)

    @torch.no_grad()
    def _old_logprobs(self, lb: LearningBatch) -> torch.Tensor:
        """The learner's own log-probs of the batch before this step's updates (for TIS)."""
        out = torch.zeros_like(lb.batch.completion_mask)
        for rows in self.micro_batches(torch.arange(lb.size)):
            sub = select(lb.batch, rows)
            lp, _ = token_logprobs(self.policy.completion_logits(sub), sub.completion_ids, self.cfg)
            out[rows, : lp.shape[1]] = lp.to(out.dtype)
        return out

    def _mini_batches(self, n: int, gen: torch.Generator):
        u = self.cfg.update
        order = torch.randperm(n, generator=gen) if u.mini_batches > 1 else torch.arange(n)
        return order.chunk(u.mini_batches)

    def _token_passes(self, lb: LearningBatch, kl_beta: float, old: torch.Tensor | None, gen) -> dict:
        cfg, c = self.cfg, self.cfg.loss
        stats = UpdateStats()
        use_kl = kl_beta > 0 and cfg.kl.placement == "loss" and lb.ref_logprobs is not None
        for update_pass in range(cfg.update.inner_updates):
            for mb in self._mini_batches(lb.size, gen):
                self.optimizer.zero_grad(set_to_none=True)
                mb_mask = lb.batch.completion_mask[mb]
                for rows in self.micro_batches(mb):
                    sub = select(lb.batch, rows)
                    T, mask = sub.completion_ids.shape[1], sub.completion_mask
                    logits = self.policy.completion_logits(sub)
                    lp, full = token_logprobs(logits, sub.completion_ids, cfg)
                    adv = lb.advantages[rows, :T]
                    objective, den = self._objective(lp, lb, old, rows, T, adv, mask, stats, update_pass)
                    if use_kl:
                        kl = self._kl(lp, full, lb.ref_logprobs[rows, :T], sub.completion_ids)
                        objective = objective - kl_beta * kl
                        if update_pass == 0:
                            kl_sum = float((kl.detach() * mask).sum())
                            stats.acc("kl", kl_sum, float(mask.sum()))
                            stats.acc("kl_per_completion", kl_sum, float(mask.shape[0]))  # the adaptive controller's
                    if c.entropy_coef:
                        objective = objective + c.entropy_coef * entropy_from_logprobs(full)
                    loss = -aggregate_loss(objective, mask, c.aggregation, max_len=cfg.sampling.max_new_tokens)
                    weight = aggregation_weight(mask, mb_mask, c.aggregation) * lb.kept_share
                    (loss * weight).backward()
                    if update_pass == 0:
                        behavior = lb.behavior[rows, :T] if lb.behavior is not None else None
                        self._first_pass_stats(stats, lp, behavior, full, mask)
                stats.grad_norms.append(clip_grad_norm(self.policy.model, cfg.optim.grad_clip))
                self.optimizer.step()
                self.on_step()
        return stats.summary()

    def _objective(self, lp, lb, old, rows, T, adv, mask, stats, update_pass):
        c = self.cfg.loss
        if c.policy_loss == "likelihood":
            return OBJECTIVES["likelihood"](lp, None, adv, mask, c), None
        den = (old if old is not None else lb.behavior)[rows, :T].to(lp.dtype)
        objective = OBJECTIVES[c.policy_loss](lp, den, adv, mask, c)
        ratio = torch.exp(lp.detach() - den)
        stats.ratios(ratio, adv.expand_as(ratio), mask, c)
        if old is not None:  # truncated IS: pi_old(learner) / pi_behavior(rollout engine), capped
            w = torch.exp(den - lb.behavior[rows, :T].to(lp.dtype)).clamp(max=c.tis_cap)
            objective = objective * w
            if update_pass == 0:
                stats.acc("tis_weight", float((w * mask).sum()), float(mask.sum()))
        return objective, den

    def _kl(self, lp, full, ref, ids) -> torch.Tensor:
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

    def _dpo_passes(self, lb: LearningBatch, gen) -> dict:
        """DPO on (chosen, rejected) pairs: sequence log-probs of the policy against the reference."""
        stats = UpdateStats()
        pairs = lb.pairs
        ref_seq = (lb.ref_logprobs * lb.batch.completion_mask).sum(dim=1)  # [N]
        for _ in range(self.cfg.update.inner_updates):
            for mb in self._mini_batches(pairs.shape[0], gen):
                self.optimizer.zero_grad(set_to_none=True)
                for chunk in mb.split(max(1, self.cfg.update.micro_batch_size // 2)):
                    p = pairs[chunk]
                    rows = p.reshape(-1)
                    sub = select(lb.batch, rows)
                    lp, _ = token_logprobs(self.policy.completion_logits(sub), sub.completion_ids, self.cfg)
                    seq = (lp * sub.completion_mask).sum(dim=1).view(-1, 2)  # [P, (chosen, rejected)]
                    ref = ref_seq[rows].view(-1, 2).to(seq.dtype)
                    losses = dpo_loss(seq[:, 0], seq[:, 1], ref[:, 0], ref[:, 1], self.cfg.loss.dpo_beta)
                    (losses.sum() / mb.numel()).backward()
                    margin = ((seq[:, 0] - ref[:, 0]) - (seq[:, 1] - ref[:, 1])).detach()
                    stats.acc("dpo_loss", float(losses.detach().sum()), float(len(p)))
                    stats.acc("dpo_accuracy", float((margin > 0).sum()), float(len(p)))
                    stats.acc("dpo_margin", float(margin.sum()), float(len(p)))
                stats.grad_norms.append(clip_grad_norm(self.policy.model, self.cfg.optim.grad_clip))
                self.optimizer.step()
                self.on_step()
        return stats.summary()
