"""The learner: ``update(batch) -> stats``, weights out as named tensors, state in a checkpoint.

One update is ``update.inner_updates`` passes of the configured objective (``OBJECTIVES``,
``training/loop/objectives.py``) over one learning batch.  Token objectives: per micro-batch and
token the objective, minus ``beta * KL`` when the KL sits in the loss, plus an entropy bonus;
aggregated by ``loss.aggregation`` with micro-batch weights that make gradient accumulation
exact, and scaled by the kept rows' share of the batch so that leaving out zero-gradient rows
saves compute without changing the estimator; one optimizer step per mini-batch.  DPO runs
passes over pairs instead.  Which distribution each log-prob is taken under:
``training/loop/logprobs.py``.  With ``loss.tis_cap`` the ratio's denominator is the learner's own
recomputed old log-prob and each token is weighted by ``min(pi_old / pi_behavior, cap)``
(truncated importance sampling between the rollout engine and the learner).  With
``kl.importance_weighted`` each token's KL estimate is weighted by ``pi / pi_behaviour`` (the records'
behaviour log-probs, detached): reused and lagged samples then estimate the current policy's KL
(``algorithms/kl.py``); the metric ``kl`` is that weighted estimate (first pass) and ``kl_weight_deviation``
the weights' mean ``|w - 1|`` over every pass (their mean is 1 in expectation by construction, so the
distance is what shows how far the reused samples are from the current policy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import torch

from veriloop.algorithms import (
    aggregate_loss,
    aggregation_weight,
    clip_fractions,
    dpo_loss,
    importance_weighted_kl,
    kl_estimate,
    kl_exact,
)
from veriloop.models.batch import select, to_device, token_budget_split
from veriloop.models.loading import load_policy
from veriloop.models.lora import load_adapter_weights
from veriloop.registry import OBJECTIVES
from veriloop.training.loop.logprobs import (
    TokenLogprobs,
    can_leave_support,
    completion_logprobs,
    off_support_tokens,
)
from veriloop.training.loop.optim import backward_scaled, build_optimizer, clip_grad_norm, set_lr
from veriloop.training.loop.share import ONE_RANK
from veriloop.training.loop.signals import LearningBatch
from veriloop.training.run.alarms import NonFiniteError


@dataclass(frozen=True)
class LearnerCapabilities:
    """What a learner strategy can run (read by ``training/capabilities.py``, never by name)."""

    distributed: bool = False  # runs as learner.world_size rank processes (world_size > 1; the learner.* options)
    shards_weights: bool = False  # each rank holds a shard of the policy and its optimizer state (fsdp2)
    shards_critic: bool = False  # the critic sharded too (none yet: on the ranks it trains ddp-style)
    lora: bool = True  # trains LoRA adapters (lora.r > 0)
    devices: tuple[str, ...] = ("cpu", "cuda")  # the device kinds it updates on (the run's `device`)
    dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")  # the weight dtypes it trains (`dtype`)


class Learner(Protocol):
    """The update role: learning batches in, new weights and statistics out; it owns the optimizer and, for the
    estimators that have one (gae), the critic and the critic's optimizer - on one process as on many."""

    name: ClassVar[str]
    capabilities: ClassVar[LearnerCapabilities]
    objective: object  # the registered objective (``OBJECTIVES``) its passes run
    critic: object | None  # training/loop/critic.py's Critic, or None

    def update(self, lb: LearningBatch, kl_beta: float, seed_generator: torch.Generator) -> dict: ...

    def critic_update(self, batch, returns, old_values, seed_generator: torch.Generator) -> dict: ...

    def load_critic_state_dict(self, state: dict) -> None: ...

    def set_lr(self, lr: float) -> None: ...

    def weights(self) -> list[tuple[str, torch.Tensor]]: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...

    def close(self) -> None: ...


def enable_gradient_checkpointing(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Turn on transformers' per-layer activation checkpointing; the layers it wraps (to mark as training)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"update.gradient_checkpointing: {type(model).__name__} does not support it")
    kwargs = {"use_reentrant": False}  # the reentrant variant needs inputs that require grad (frozen embeddings)
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"update.gradient_checkpointing: {type(model).__name__} has no checkpointable layers")
    return layers


def load_weights(policy, directory: Path) -> None:
    """``policy``'s weights from a saved ``model/`` directory (a LoRA policy's: its adapter)."""
    if policy.adapted:
        load_adapter_weights(policy.model, directory)
    else:
        saved = load_policy(str(directory)).model.state_dict()
        with torch.no_grad():
            policy.model.load_state_dict(saved)


class UpdateStats:
    """Per-token statistics of the learner passes (no gradients)."""

    def __init__(self, keep_tokens: bool = True):
        self.keep_tokens = keep_tokens  # save_rollouts off: no per-token values are kept (nothing would read them)
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.ratio_min, self.ratio_max = float("inf"), float("-inf")
        self.grad_norms: list[float] = []
        # per-token values the run browser colours tokens by: name -> {learning-batch row: [value per token]}
        self.tokens: dict[str, dict[int, list[float]]] = {}

    def token_values(self, name: str, rows: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> None:
        """Keep each row's values up to its last loss token (a later pass overwrites: ``ratio`` is the last
        pass's); tool-output tokens inside keep a value no loss reads."""
        if not self.keep_tokens:
            return
        positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
        lengths = (mask.bool() * positions).amax(dim=1).tolist() if mask.numel() else []
        kept = self.tokens.setdefault(name, {})
        for row, v, n in zip(rows.tolist(), values.detach().float().cpu().tolist(), lengths):
            kept[row] = [round(x, 5) for x in v[:n]]

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
        if self.tokens:  # not a metric: the trainer moves it to the step's annotations file
            out["token_values"] = self.tokens
        return out


class LocalLearner:
    """The update in this process (``learner.strategy local``)."""

    name = "local"
    capabilities = LearnerCapabilities()

    def __init__(self, policy, cfg, on_step: Callable[[], None] = lambda: None, critic=None):
        self.policy, self.cfg, self.critic = policy, cfg, critic
        self.objective = OBJECTIVES.get(cfg.loss.policy_loss)
        self.optimizer = build_optimizer(policy.model, cfg.optim)
        self.on_step = on_step  # called after every optimizer step (counts policy versions)
        self.ranks = ONE_RANK  # this process's share of each mini-batch (a rank's: RankShare)
        self.checkpointed_layers = []
        if cfg.update.gradient_checkpointing:
            self.checkpointed_layers = enable_gradient_checkpointing(policy.model)

    # ------------------------------------------------------------------ the role's interface

    def update(self, lb: LearningBatch, kl_beta: float, seed_generator: torch.Generator) -> dict:
        self.policy.model.eval()  # dropout off (as TRL's disable_dropout): the ratio starts at exactly 1
        for layer in self.checkpointed_layers:  # transformers checkpoints a layer only in training mode;
            layer.training = True  # the flag of the layer alone: its attention and MLP (and their dropout) stay in eval
        if self.objective.learns_from == "pairs":  # DPO: whole-sequence margins of (chosen, rejected) pairs
            return self.pair_passes(lb, seed_generator)
        return self.token_passes(lb, kl_beta, seed_generator)

    def critic_update(self, batch, returns, old_values, seed_generator: torch.Generator) -> dict:
        return self.critic.update(batch, returns, old_values, seed_generator)

    def critic_state_dict(self) -> dict:
        return self.critic.state_dict()

    def load_critic_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state)

    def close(self) -> None:
        """Nothing to stop: the update runs in this process."""

    def set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights as named tensors (what a rollout engine's ``load_weights`` takes)."""
        return list(self.policy.model.state_dict().items())

    def save(self, directory: Path) -> None:
        """The learner's state in a checkpoint: ``model/`` (safetensors), ``optimizer.pt``, and ``critic.pt`` (the
        critic's model and optimizer) where there is a critic."""
        self.policy.save(directory / "model")
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        if self.critic is not None:
            torch.save(self.critic_state_dict(), directory / "critic.pt")

    def load(self, directory: Path) -> None:
        """Resume from ``save``'s files: the weights of ``model/`` (a LoRA run's: its adapter) and the
        optimizer's moments and step; or an fsdp2 run's ``sharded/`` (weights and moments, any world size)."""
        from veriloop.training.loop.sharded_checkpoint import SHARDED, load_sharded

        if (directory / SHARDED).is_dir():  # an fsdp2 run's shards, read whole into this one process
            load_sharded(self.policy.model, self.optimizer, directory / SHARDED, distributed=False)
            return
        load_weights(self.policy, directory / "model")
        state = torch.load(directory / "optimizer.pt", weights_only=True, map_location=self.device)
        self.optimizer.load_state_dict(state)

    # ------------------------------------------------------------------ passes

    def micro_batches(self, batch, rows: torch.Tensor):
        """``rows`` in order, cut into micro-batches of at most ``update.micro_batch_size`` sequences and, with
        ``update.max_tokens_per_micro_batch``, at most that many padded tokens (rows x longest prompt +
        completion); the aggregation weights keep gradient accumulation exact for any cut."""
        return token_budget_split(
            batch.attention_mask.sum(dim=1),
            rows,
            self.cfg.update.micro_batch_size,
            self.cfg.update.max_tokens_per_micro_batch,
        )

    @property
    def device(self) -> torch.device:
        return getattr(self.policy, "device", torch.device("cpu"))

    def sub_batch(self, lb: LearningBatch, rows: torch.Tensor):
        """Rows of the learning batch, trimmed (``select``) and on the policy's device."""
        return to_device(select(lb.batch, rows), self.device)

    def logprobs(self, sub, want_full: bool = False, entropy: bool = True) -> TokenLogprobs:
        return completion_logprobs(
            self.policy,
            sub,
            self.cfg.sampling,
            self.objective.distribution,
            want_full=want_full,
            chunk_tokens=self.cfg.update.logprob_chunk_tokens,
            entropy=entropy,
        )

    @torch.no_grad()
    def old_logprobs(self, lb: LearningBatch) -> torch.Tensor:
        """The learner's own log-probs of the batch before this step's updates (for TIS), on the device."""
        out = torch.zeros_like(lb.batch.completion_mask, device=self.device)
        for rows in self.micro_batches(lb.batch, torch.arange(lb.size)):
            lp = self.logprobs(self.sub_batch(lb, rows), entropy=False).sampled
            out[rows.to(self.device), : lp.shape[1]] = lp.to(out.dtype)
        return out

    def mini_batches(self, n: int, gen: torch.Generator):
        u = self.cfg.update
        order = torch.randperm(n, generator=gen) if u.mini_batches > 1 else torch.arange(n)
        return order.chunk(u.mini_batches)

    def optimizer_step(self, stats: UpdateStats) -> None:
        self.ranks.sync_grads(self.policy.model)  # ranks: the sum of every rank's gradients, before clipping
        norm = clip_grad_norm(self.policy.model, self.cfg.optim.grad_clip, self.optimizer)
        if math.isfinite(norm):
            stats.grad_norms.append(norm)
        elif getattr(self.optimizer, "loss_scale", 1.0) == 1.0:  # float16's loss scale overflows by design: skipped
            # before the step: the weights stay those of the last good update
            raise NonFiniteError(None, "grad_norm", norm, f"is {norm} (the gradient of the policy)")
        self.optimizer.step()
        self.on_step()

    def token_passes(self, lb: LearningBatch, kl_beta: float, gen) -> dict:
        objective, cfg, stats = self.objective, self.cfg, UpdateStats(keep_tokens=self.cfg.save_rollouts)
        old = self.old_logprobs(lb) if cfg.loss.tis_cap > 0 and objective.needs_behavior else None
        use_kl = cfg.kl.in_loss(kl_beta) and lb.ref_logprobs is not None
        for update_pass in range(cfg.update.inner_updates):
            for mb in self.mini_batches(lb.size, gen):
                self.optimizer.zero_grad(set_to_none=True)
                mb_mask, mb_loss = lb.batch.completion_mask[mb], 0.0
                for rows in self.ranks.micro_batches(self, lb.batch, mb):  # one process: all of mb's rows
                    loss, weight = self._micro_batch_loss(
                        objective, lb, rows, old, kl_beta if use_kl else 0.0, mb_mask, stats, first=update_pass == 0
                    )
                    backward_scaled(self.optimizer, loss * weight)
                    mb_loss += float(loss.detach() * weight)  # the weights make this the mini-batch's loss
                self.ranks.pad(self, lb, mb)
                if not math.isfinite(mb_loss):
                    raise NonFiniteError(None, "loss", mb_loss, f"is {mb_loss} (the policy loss of a mini-batch)")
                if update_pass == 0:
                    stats.acc("loss", mb_loss, 1.0)
                self.optimizer_step(stats)
        return self.ranks.summary(stats)

    def _micro_batch_loss(self, objective, lb, rows, old, kl_beta, mb_mask, stats, first: bool):
        c, sub, dev = self.cfg.loss, self.sub_batch(lb, rows), self.device
        T, mask = sub.completion_ids.shape[1], sub.completion_mask
        tl = self.logprobs(sub, want_full=bool(kl_beta) and self.cfg.kl.estimator == "exact")
        lp, adv = tl.sampled, lb.advantages[rows, :T].to(dev)
        # Tokens outside the support of the objective's distribution (top-k/top-p/min_new_tokens cut them under the
        # current policy): log-prob -inf, so ratio 0.  loss.off_support says which terms leave the loss; its
        # normaliser keeps counting them (``mask``), the objective reads ``kept``.
        off = off_support_tokens(lp, mask) if can_leave_support(self.cfg.sampling, objective.distribution) else None
        if off is not None and first:
            stats.acc("off_support_token_rate", float(off.sum()), float(mask.sum()))
            stats.acc("off_support_tokens", float(off.sum()), 0.0)  # counts (the summary divides by max(0, 1))
            stats.acc("off_support_rows", float(off.any(dim=1).sum()), 0.0)
        if off is not None and not bool(off.any()):
            off = None
        kept, dropped_rows = mask, None
        if off is not None:
            lp = lp.masked_fill(off, 0.0)  # finite arithmetic: every term these tokens touch is dropped below
            dropped_rows = off.any(dim=1) if c.off_support == "filter" else None
            kept = mask * ~dropped_rows[:, None] if dropped_rows is not None else mask * ~off
        objective_t = self._objective(objective, lp, lb, old, rows, T, adv, kept, stats, first, off)
        if off is not None:
            objective_t = objective_t.masked_fill(~kept.bool() & mask.bool(), 0.0)
        if kl_beta:
            kl = self._kl(tl, lb.ref_logprobs[rows, :T].to(dev), sub.completion_ids)
            if self.cfg.kl.importance_weighted:  # tokens of the behaviour policy, reweighted to the current one
                behavior = lb.behavior[rows, :T].to(dev, lp.dtype)
                kl = importance_weighted_kl(kl, lp, behavior)
                live = mask
                if off is not None:  # weight pi / pi_behaviour = 0 there
                    kl, live = kl.masked_fill(off, 0.0), mask * ~off
                # every pass (the later ones are where the policy has moved): the weights' mean distance from 1
                distance = ((torch.exp(lp.detach() - behavior) - 1).abs() * live).sum()
                stats.acc("kl_weight_deviation", float(distance), float(live.sum()))
            objective_t = objective_t - kl_beta * kl
            if first:
                kl_sum = float((kl.detach() * mask).sum())
                stats.acc("kl", kl_sum, float(mask.sum()))
                stats.acc("kl_per_completion", kl_sum, float(mask.shape[0]))  # the adaptive controller's
        if c.entropy_coef:
            objective_t = objective_t + c.entropy_coef * tl.entropy
        if dropped_rows is not None:  # filter: nothing of those completions is left (KL and entropy too)
            objective_t = objective_t.masked_fill(dropped_rows[:, None], 0.0)
        loss = -aggregate_loss(objective_t, mask, c.aggregation, max_len=self.cfg.sampling.max_new_tokens)
        if first:
            behavior = lb.behavior[rows, :T].to(dev) if lb.behavior is not None else None
            self._first_pass_stats(stats, lp, behavior, tl.entropy, mask if off is None else mask * ~off)
            stats.token_values("learner_logprob", rows, lp, mask)
        return loss, aggregation_weight(mask, mb_mask.to(dev), c.aggregation) * lb.kept_share

    def _objective(self, objective, lp, lb, old, rows, T, adv, mask, stats, first, off=None):
        c = self.cfg.loss
        if not objective.needs_behavior:  # likelihood: no ratio
            return objective.per_token(lp, None, adv, mask, c)
        dev = lp.device
        den = old[rows.to(dev), :T] if old is not None else lb.behavior[rows, :T].to(dev, lp.dtype)
        if off is not None and old is not None:  # the learner's own old log-prob is -inf there too (TIS)
            den = den.masked_fill(off, 0.0)
        out = objective.per_token(lp, den, adv, mask, c)
        ratio = torch.exp(lp.detach() - den)
        stats.ratios(ratio, adv.expand_as(ratio), mask, c)
        stats.token_values("ratio", rows, ratio, mask)
        if old is not None:  # truncated IS: pi_old(learner) / pi_behavior(rollout engine), capped
            w = torch.exp(den - lb.behavior[rows, :T].to(dev, lp.dtype)).clamp(max=c.tis_cap)
            out = out * w
            if first:
                stats.acc("tis_weight", float((w * mask).sum()), float(mask.sum()))
        return out

    def _kl(self, tl: TokenLogprobs, ref, ids) -> torch.Tensor:
        est = self.cfg.kl.estimator
        if est == "exact":  # the whole next-token distribution at each visited position
            return kl_exact(tl.full, ref.to(tl.full.dtype))
        return kl_estimate(tl.scaled, ref.to(tl.scaled.dtype), est)

    @torch.no_grad()
    def _first_pass_stats(self, stats: UpdateStats, lp, behavior, entropy, mask) -> None:
        valid, n = mask.bool(), float(mask.sum())
        stats.acc("entropy", float(entropy[valid].sum()), n)
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
                for chunk in self.ranks.split(mb, max(1, self.cfg.update.micro_batch_size // 2)):
                    self._pair_chunk(lb, pairs[chunk], ref_seq.to(self.device), mb.numel(), stats)
                self.ranks.pad(self, lb, mb)
                self.optimizer_step(stats)
        return self.ranks.summary(stats)

    def _pair_chunk(self, lb, p, ref_seq, n_pairs: int, stats: UpdateStats) -> None:
        rows = p.reshape(-1)
        sub = self.sub_batch(lb, rows)
        lp = self.logprobs(sub, entropy=False).sampled
        seq = (lp * sub.completion_mask).sum(dim=1).view(-1, 2)  # [P, (chosen, rejected)]
        ref = ref_seq[rows.to(self.device)].view(-1, 2).to(seq.dtype)
        losses = dpo_loss(seq[:, 0], seq[:, 1], ref[:, 0], ref[:, 1], self.cfg.loss.dpo_beta)
        backward_scaled(self.optimizer, losses.sum() / n_pairs)
        margin = ((seq[:, 0] - ref[:, 0]) - (seq[:, 1] - ref[:, 1])).detach()
        stats.acc("dpo_loss", float(losses.detach().sum()), float(len(p)))
        stats.acc("dpo_accuracy", float((margin > 0).sum()), float(len(p)))
        stats.acc("dpo_margin", float(margin.sum()), float(len(p)))
