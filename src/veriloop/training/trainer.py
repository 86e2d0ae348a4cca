"""The GRPO trainer: Task -> rollout -> verifiers -> algorithm -> learner, once per step.

Read ``GRPOTrainer.train_step`` top to bottom for the loop; the maths is called from
``veriloop.algorithms``.  Conventions (see the README for why):

* the ratio's denominator is the record's behaviour log-prob, never "the previous
  checkpoint"; the numerator is the current policy's log-prob under the same sampling
  transforms (temperature, top-k, top-p);
* the KL to the frozen reference uses the temperature-scaled full distributions of both
  models (a top-p cut could give the reference probability 0); with ``kl_beta == 0`` the
  reference model is never loaded or run;
* no forward pass recomputes what a record already holds (the behaviour log-probs);
* dropout is off in the learner, so the first pass's ratio is 1 up to float error
  (reported as ``logprob_mismatch``);
* every random draw of step s comes from generators seeded by (run seed, s), so a
  resumed run reproduces the uninterrupted one exactly on CPU.
"""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from veriloop.algorithms import (
    aggregate_loss,
    aggregation_weight,
    clip_fractions,
    clipped_surrogate,
    entropy_from_logprobs,
    group_advantages,
    kl_estimate,
    sampling_logprobs,
    zero_variance_groups,
)
from veriloop.io import atomic_write_json, atomic_write_yaml
from veriloop.models.loading import load_policy, save_policy
from veriloop.rollout.records import Record, RecordStore, check_reward
from veriloop.rollout.sampler import completion_text, generate
from veriloop.training.batch import PolicyBatch, build_policy_batch, completion_logits, select
from veriloop.training.checkpoint import (
    RunState,
    find_latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from veriloop.training.config import to_dict
from veriloop.training.metrics import MetricsLog, step_metrics
from veriloop.training.optim import build_optimizer, clip_grad_norm, lr_at, set_lr
from veriloop.training.run_config import TrainConfig
from veriloop.verifiers import get as get_verifier


def derive_seed(seed: int, step: int, purpose: str) -> int:
    """A 63-bit seed for one purpose at one step, independent of any other draw."""
    digest = hashlib.sha256(f"{seed}/{step}/{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class GRPOTrainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False, progress: bool = True):
        self.cfg = cfg
        self.progress = progress
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.run_dir = Path(cfg.run_dir)
        if not resume:
            self._start_run_dir()
        self.task = cfg.task.build()
        self.verifier = get_verifier(cfg.verifier)
        self.store = RecordStore(self.run_dir / "rollouts")
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        self.state = RunState()
        checkpoint = find_latest_checkpoint(self.run_dir) if resume else None
        if resume and checkpoint is None:
            raise FileNotFoundError(f"nothing to resume in {str(self.run_dir)!r}: no complete checkpoint")
        self.policy = load_policy(str(checkpoint / "model") if checkpoint else cfg.policy)
        self.reference = None
        if cfg.grpo.kl_beta > 0:  # no reference model, and no reference pass, when the KL weight is 0
            self.reference = load_policy(cfg.reference or cfg.policy).model.eval()
            self.reference.requires_grad_(False)
        self.optimizer = build_optimizer(self.policy.model, cfg.optim)
        if checkpoint:
            self.state = load_checkpoint(checkpoint, self.optimizer)
            self.metrics.truncate(self.state.step)
            self.store.remove_after(self.state.step)

    # ------------------------------------------------------------------ the loop

    def train(self) -> dict:
        cfg = self.cfg
        start_step = self.state.step + 1
        bar = tqdm(
            range(start_step, cfg.steps + 1),
            desc="grpo",
            unit="step",
            initial=start_step - 1,
            total=cfg.steps,
            disable=not self.progress,
            dynamic_ncols=True,
        )
        started = time.time()
        for step in bar:
            row = self.train_step(step)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", acc=f"{row['accuracy']:.3f}", kl=f"{row['kl']:.4f}")
            out_of_time = cfg.max_minutes and (time.time() - started) > cfg.max_minutes * 60
            if step % cfg.checkpoint_every == 0 or step == cfg.steps or out_of_time:
                self.checkpoint()
            if out_of_time:
                bar.write(f"stopping after step {step}: max_minutes={cfg.max_minutes} reached")
                break
        bar.close()
        self.save_final()
        return self.metrics.rows[-1] if self.metrics.rows else {}

    def train_step(self, step: int) -> dict:
        cfg, t0 = self.cfg, time.time()
        lr = lr_at(self.state.policy_version, self.total_optimizer_steps(), cfg.optim)
        set_lr(self.optimizer, lr)
        # 1. Task: B prompts for this step.
        problems = self.task.train_batch(
            cfg.grpo.prompts_per_step, random.Random(derive_seed(cfg.seed, step, "prompts"))
        )
        # 2. Rollout: G completions per prompt from the behaviour policy, as records.
        records = self.rollout(problems, step)
        t_gen = time.time()
        # 3. Verifiers: one verdict, one reward per record.
        self.score(records)
        rewards = torch.tensor([r.reward for r in records], dtype=torch.float32).view(
            len(problems), cfg.grpo.group_size
        )
        t_ver = time.time()
        # 4. Algorithm: group-relative advantages.
        advantages = group_advantages(rewards, std=cfg.grpo.adv_std, eps=cfg.grpo.adv_eps)
        flat = zero_variance_groups(rewards)
        # 5. Learner: mu passes of the clipped surrogate with KL to the reference.
        update = self.update(records, advantages.view(-1), flat)
        t_upd = time.time()
        self.store_records(step, records)
        row = step_metrics(
            step,
            records,
            rewards,
            advantages,
            flat,
            update,
            lr,
            times={"generate": t_gen - t0, "verify": t_ver - t_gen, "update": t_upd - t_ver},
        )
        row["policy_version"] = self.state.policy_version
        self.state.step = step
        self.metrics.append(row)
        return row

    # ------------------------------------------------------------------ stages

    def rollout(self, problems, step: int) -> list[Record]:
        cfg, tok = self.cfg, self.policy.tokenizer
        G = cfg.grpo.group_size
        seed = derive_seed(cfg.seed, step, "sampling")
        prompt_ids = [tok(p.prompt).input_ids for p in problems]
        created = time.time()
        gen = generate(
            self.policy.model,
            prompt_ids,
            cfg.sampling,
            eos_id=self.policy.eos_id,
            pad_id=self.policy.pad_id,
            generator=torch.Generator().manual_seed(seed),
            n=G,
        )
        sampling = {**cfg.sampling.as_dict(), "seed": seed}
        records = []
        for i, (ids, lps, finish) in enumerate(zip(gen.completion_ids, gen.logprobs, gen.finish_reasons)):
            b = i // G
            records.append(
                Record(
                    problem_id=problems[b].id,
                    group_id=f"{step}-{b}",
                    prompt=problems[b].prompt,
                    reference=problems[b].reference,
                    prompt_ids=prompt_ids[b],
                    completion_ids=ids,
                    completion=completion_text(tok, ids, finish),
                    behavior_logprobs=lps,
                    sampling=sampling,
                    policy_version=self.state.policy_version,
                    finish_reason=finish,
                    created_at=created,
                )
            )
        return records

    def score(self, records: list[Record]) -> None:
        verdicts = self.verifier.verify_batch([r.completion for r in records], [r.reference for r in records])
        now = time.time()
        for r, v in zip(records, verdicts):
            r.reward, r.reward_components, r.verifier = v.score, v.components, v.version
            r.verdict_details, r.verified_at = v.details, now
            check_reward(r)

    def update(self, records: list[Record], advantages: torch.Tensor, flat_groups: torch.Tensor) -> dict:
        """mu passes over the batch; returns statistics for the metrics row."""
        g = self.cfg.grpo
        keep = torch.ones(len(records), dtype=torch.bool)
        if g.skip_zero_variance_groups:
            keep &= ~flat_groups.repeat_interleave(g.group_size)
        if g.mask_truncated:  # a cut-off completion has no verdict on its ending: leave it out
            keep &= torch.tensor([not r.truncated for r in records])
        rows = keep.nonzero().squeeze(1)
        if rows.numel() == 0:
            return {"skipped": True}
        chosen = [records[i] for i in rows.tolist()]
        batch = build_policy_batch(
            [r.prompt_ids for r in chosen], [r.completion_ids for r in chosen], self.policy.pad_id
        )
        behavior = torch.zeros_like(batch.completion_mask)
        for i, r in enumerate(chosen):
            behavior[i, : len(r.behavior_logprobs)] = torch.tensor(r.behavior_logprobs)
        ref = self.reference_logprobs(batch) if self.reference is not None else None
        return self.learner_passes(batch, behavior, advantages[rows][:, None], ref)

    @torch.no_grad()
    def reference_logprobs(self, batch: PolicyBatch) -> torch.Tensor:
        out = torch.zeros_like(batch.completion_mask)
        for rows in self.micro_batches(torch.arange(batch.input_ids.shape[0])):
            sub = select(batch, rows)
            logits = completion_logits(self.reference, sub)
            lp = torch.log_softmax(logits / self.cfg.sampling.temperature, dim=-1)
            out[rows, : sub.completion_ids.shape[1]] = lp.gather(-1, sub.completion_ids[..., None]).squeeze(-1)
        return out

    def learner_passes(self, batch, behavior, adv, ref) -> dict:
        g, s = self.cfg.grpo, self.cfg.sampling
        model, N = self.policy.model, batch.input_ids.shape[0]
        model.eval()  # dropout off (as TRL's disable_dropout): the ratio must start at exactly 1
        stats = _UpdateStats()
        order_gen = torch.Generator().manual_seed(derive_seed(self.cfg.seed, self.state.step + 1, "minibatches"))
        for update_pass in range(g.inner_updates):
            order = torch.randperm(N, generator=order_gen) if g.mini_batches > 1 else torch.arange(N)
            for mb in order.chunk(g.mini_batches):
                self.optimizer.zero_grad(set_to_none=True)
                mb_mask = batch.completion_mask[mb]
                for rows in self.micro_batches(mb):
                    sub = select(batch, rows)
                    T = sub.completion_ids.shape[1]
                    logits = completion_logits(model, sub)
                    full = torch.log_softmax(logits / s.temperature, dim=-1)  # [n, T, V]
                    dist = (
                        full
                        if (s.top_k == 0 and s.top_p == 1.0)
                        else sampling_logprobs(logits, s.temperature, s.top_k, s.top_p)
                    )
                    lp = dist.gather(-1, sub.completion_ids[..., None]).squeeze(-1)  # [n, T]
                    ratio = torch.exp(lp - behavior[rows, :T])
                    objective = clipped_surrogate(ratio, adv[rows], g.clip_eps_low, g.clip_eps_high)
                    kl = None
                    if ref is not None:
                        lp_full = lp if dist is full else full.gather(-1, sub.completion_ids[..., None]).squeeze(-1)
                        kl = kl_estimate(lp_full, ref[rows, :T], g.kl_estimator)
                        objective = objective - g.kl_beta * kl
                    loss = -aggregate_loss(objective, sub.completion_mask, g.loss_agg, max_len=s.max_new_tokens)
                    loss = loss * aggregation_weight(sub.completion_mask, mb_mask, g.loss_agg)
                    loss.backward()
                    stats.add(
                        update_pass,
                        sub.completion_mask,
                        lp.detach(),
                        behavior[rows, :T],
                        ratio.detach(),
                        adv[rows],
                        kl,
                        full.detach(),
                        g,
                    )
                stats.grad_norms.append(clip_grad_norm(model, self.cfg.optim.grad_clip))
                self.optimizer.step()
                self.state.policy_version += 1
        return stats.summary(N)

    # ------------------------------------------------------------------ helpers

    def _start_run_dir(self) -> None:
        """Refuse to overwrite an earlier run; write config.yaml for this one."""
        if (self.run_dir / "metrics.jsonl").exists() or list_checkpoints(self.run_dir):
            raise ValueError(
                f"run directory {str(self.run_dir)!r} already holds a run; continue it with "
                f"`veriloop train --resume {self.run_dir}` or choose another --run_dir"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_yaml(self.run_dir / "config.yaml", to_dict(self.cfg))

    def micro_batches(self, rows: torch.Tensor):
        return rows.split(self.cfg.grpo.micro_batch_size)

    def total_optimizer_steps(self) -> int:
        return self.cfg.steps * self.cfg.grpo.inner_updates * self.cfg.grpo.mini_batches

    def store_records(self, step: int, records: list[Record]) -> None:
        if self.cfg.save_rollouts:
            self.store.write(step, records)

    def checkpoint(self) -> Path:
        return save_checkpoint(self.run_dir, self.state, self.policy, self.optimizer, self.cfg.keep_checkpoints)

    def save_final(self) -> None:
        final = self.run_dir / "final"
        save_policy(self.policy.model, self.policy.tokenizer, final)
        atomic_write_json(
            final / "veriloop_train.json", {"step": self.state.step, "policy_version": self.state.policy_version}
        )


class _UpdateStats:
    """Accumulates per-token statistics of the learner passes (no gradients)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.ratio_min, self.ratio_max = float("inf"), float("-inf")
        self.grad_norms: list[float] = []

    def _acc(self, key: str, total: float, count: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + total
        self.counts[key] = self.counts.get(key, 0.0) + count

    @torch.no_grad()
    def add(self, update_pass, mask, lp, behavior, ratio, adv, kl, full, g) -> None:
        valid = mask.bool()
        n = float(mask.sum())
        low, high = clip_fractions(ratio, adv, mask, g.clip_eps_low, g.clip_eps_high)
        self._acc("clip_frac_low", low * n, n)
        self._acc("clip_frac_high", high * n, n)
        self.ratio_min = min(self.ratio_min, float(ratio[valid].min()))
        self.ratio_max = max(self.ratio_max, float(ratio[valid].max()))
        if update_pass == 0:  # first pass: the policy that sampled the batch (exactly so when mini_batches == 1)
            self._acc("logprob_mismatch", float((lp - behavior).abs()[valid].sum()), n)
            self._acc("entropy", float(entropy_from_logprobs(full)[valid].sum()), n)
            if kl is not None:
                self._acc("kl", float(kl.detach()[valid].sum()), n)

    def summary(self, num_sequences: int) -> dict:
        out = {k: self.sums[k] / max(self.counts[k], 1.0) for k in self.sums}
        out.update(
            ratio_min=self.ratio_min,
            ratio_max=self.ratio_max,
            update_sequences=num_sequences,
            grad_norm=sum(self.grad_norms) / max(len(self.grad_norms), 1),
        )
        return out
