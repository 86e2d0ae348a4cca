"""One trainer for every method: Task -> rollout -> verifiers -> learning signal -> learner.

Read ``Trainer.train_step`` top to bottom for the loop.  What differs between SFT, RFT, DPO,
REINFORCE, RLOO, PPO and GRPO is configuration (``training/recipes.py``): the data source,
the reward, and the coefficient of each token's log-prob gradient.  Conventions:

* the ratio's denominator is the record's behaviour log-prob (the distribution that sampled
  it, possibly several policy versions ago), never "the previous checkpoint";
* no forward pass recomputes what a record holds; with ``kl.beta == 0`` (and no DPO) the
  reference model is never loaded or run;
* every random draw of step s comes from generators seeded by (run seed, s), so a resumed
  run reproduces the uninterrupted one exactly on CPU.
"""

from __future__ import annotations

import random
import time
from collections import deque
from pathlib import Path

import torch
from tqdm import tqdm

from veriloop.algorithms import AdaptiveKLController, FixedKLController, overlong_penalty
from veriloop.io import atomic_write_json, atomic_write_jsonl, atomic_write_yaml, read_jsonl
from veriloop.models.batch import PolicyBatch, select
from veriloop.models.loading import load_policy
from veriloop.prm.label import label_solutions
from veriloop.prm.model import load_prm
from veriloop.prm.steps import positions_in_ids, split_steps
from veriloop.prm.train import fit_prm, load_labels
from veriloop.rollout.records import Record, RecordStore, check_reward
from veriloop.seeding import derive_seed
from veriloop.tasks.base import Problem
from veriloop.training.checkpoint import (
    RunState,
    find_latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from veriloop.training.config import to_dict
from veriloop.training.critic import Critic
from veriloop.training.learner import Learner
from veriloop.training.metrics import MetricsLog, step_metrics
from veriloop.training.optim import build_optimizer, lr_at, set_lr
from veriloop.training.run_config import TrainConfig
from veriloop.training.signals import (
    ESTIMATORS,
    EstimatorInput,
    LearningBatch,
    dpo_pairs,
    kept_share,
    kl_penalty,
    records_batch,
    terminal_rewards,
    zero_advantage_means_zero_gradient,
)
from veriloop.verifiers import get as get_verifier


class Trainer:
    """``policy``, ``task`` and ``verifier`` may be given as objects (exact mode, notebooks)."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, progress: bool = True, *, policy=None, task=None,
                 verifier=None):  # fmt: skip
        self.cfg, self.progress = cfg, progress
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.run_dir = Path(cfg.run_dir)
        # Everything that can be wrong with the input fails here, before the run directory exists.
        self.task = task or cfg.task.build()
        self.verifier = verifier or get_verifier(cfg.verifier)
        if cfg.rollout.source == "task-teacher" and not hasattr(self.task, "teacher_completion"):
            raise ValueError(f"task {cfg.task.name!r} has no demonstrations for rollout.source=task-teacher (sft)")
        if not resume:
            self._start_run_dir()
        self.store = RecordStore(self.run_dir / "rollouts")
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        self.state = RunState(kl_beta=cfg.kl.beta)
        checkpoint = find_latest_checkpoint(self.run_dir) if resume else None
        if resume and checkpoint is None:
            raise FileNotFoundError(f"nothing to resume in {str(self.run_dir)!r}: no complete checkpoint")
        start = policy if policy is not None else load_policy(cfg.policy)
        self.policy = load_policy(str(checkpoint / "model")) if checkpoint else start
        self.reference = self._reference(start)
        self.source = self._source_policy(start)
        self.critic = Critic(self.policy, cfg) if cfg.advantage.estimator == "gae" else None
        self.optimizer = build_optimizer(self.policy.model, cfg.optim)
        self.learner = Learner(self.policy, self.optimizer, cfg, on_step=self._count_version)
        adaptive = cfg.kl.controller == "adaptive" and cfg.kl.beta > 0
        self.kl_control = (AdaptiveKLController(cfg.kl.beta, cfg.kl.target, cfg.kl.horizon) if adaptive
                           else FixedKLController(cfg.kl.beta))  # fmt: skip
        self.pending: deque[list[Record]] = deque()  # batches sampled ahead (rollout.lag)
        if checkpoint:
            self.state = load_checkpoint(checkpoint, self.optimizer, self.critic, self.reference, self.pending)
            self.kl_control.beta = self.state.kl_beta
            self.metrics.truncate(self.state.step)
            self.store.remove_after(self.state.step)
        self.prm, self._recent, self._label_pool = None, [], []
        if cfg.advantage.estimator == "process":
            self._load_prm()

    # ------------------------------------------------------------------ the loop

    def train(self) -> dict:
        cfg, start = self.cfg, self.state.step + 1
        bar = tqdm(range(start, cfg.steps + 1), desc=cfg.algo, unit="step", initial=start - 1, total=cfg.steps,
                   disable=not self.progress, dynamic_ncols=True)  # fmt: skip
        started = time.time()
        sampled = sum(r.get("sampled_records", 0) for r in self.metrics.rows)  # a resumed run counts its past
        for step in bar:
            row = self.train_step(step)
            if "reward_mean" in row:  # a step that learned from nothing (rollout.lag warm-up) has no reward
                bar.set_postfix(reward=f"{row['reward_mean']:.3f}", acc=f"{row['accuracy']:.3f}")
            sampled += row["sampled_records"]
            stop = ""  # why the run ends before cfg.steps
            if step == cfg.steps:
                pass
            elif cfg.max_minutes and (time.time() - started) > cfg.max_minutes * 60:
                stop = f"max_minutes={cfg.max_minutes} reached"
            elif cfg.max_samples and sampled >= cfg.max_samples:
                stop = f"max_samples={cfg.max_samples} reached ({sampled} completions sampled)"
            if step % cfg.checkpoint_every == 0 or step == cfg.steps or stop:
                self.checkpoint()
            if stop:
                bar.write(f"stopping after step {step}: {stop}")
                break
        bar.close()
        self.save_final()
        return self.metrics.rows[-1] if self.metrics.rows else {}

    def train_step(self, step: int) -> dict:
        cfg, times = self.cfg, {"generate": 0.0, "verify": 0.0}
        lr = lr_at(self.state.policy_version, self.total_optimizer_steps(), cfg.optim)
        set_lr(self.optimizer, lr)
        # 1-3. Task, rollout, verifiers: scored records for this step's update.
        records, collected = self.collect(step, times)
        t0 = time.time()
        # 4. Learning signal: the gradient coefficient of every token (advantages, 0/1, pairs).
        signal, rewards, advantages, mask = self.learning_signal(records) if records else (None, None, None, None)
        # 5. Learner: passes of the policy objective (and of the critic).
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, step, "minibatches"))
        critic_warmup = self.critic is not None and step <= cfg.critic.warmup_steps  # only the critic learns
        update = {}
        if signal is not None and not critic_warmup:
            update = self.learner.update(signal, self.kl_control.beta, gen)
        if signal is not None and self.critic is not None:
            update.update(self.critic.update(signal.batch, signal.returns, signal.old_values, gen))
        times["update"] = time.time() - t0
        self.after_update(step, update)
        if self.prm is not None and cfg.process.refresh_every:
            self._recent.append(collected)
            if step % cfg.process.refresh_every == 0:
                update.update(self.refresh_prm(step))
        self.store_records(step, collected)
        row = step_metrics(step, records, rewards, advantages, mask, update, lr, times, sampled=collected)
        row.update(policy_version=self.state.policy_version, kl_beta=self.kl_control.beta,
                   sampled_records=len(collected), sampled_tokens=sum(len(r.completion_ids) for r in collected),
                   update_records=signal.size if signal is not None else 0)  # fmt: skip
        self.state.step = step
        self.metrics.append(row)
        return row

    # ------------------------------------------------------------------ 1-3: data

    def collect(self, step: int, times: dict) -> tuple[list[Record], list[Record]]:
        """(records to learn from this step, records sampled this step)."""
        r = self.cfg.rollout
        sampled = learn = self.sample_round(step, 0, r.prompts_per_step, times)
        if r.dynamic_sampling:
            learn, sampled = self.fill_with_variance(step, sampled, times)
        learn = self.without_verifier_errors(learn)
        if r.lag == 0:
            return self.fresh_enough(learn), sampled
        self.pending.append(learn)
        if len(self.pending) <= r.lag:
            return [], sampled  # warming up: the first batches are still in flight
        return self.fresh_enough(self.pending.popleft()), sampled

    def sample_round(self, step: int, round_: int, n_prompts: int, times: dict) -> list[Record]:
        t0 = time.time()
        rng = random.Random(derive_seed(self.cfg.seed, step, f"prompts/{round_}"))
        problems = self.task.train_batch(n_prompts, rng)
        if self.cfg.rollout.source == "task-teacher":
            records = self.teacher_records(problems, step, round_, rng)
        else:
            records = self.rollout(problems, step, round_)
        t1 = time.time()
        self.score(records)
        times["generate"] += t1 - t0
        times["verify"] += time.time() - t1
        return records

    def rollout(self, problems, step: int, round_: int) -> list[Record]:
        """G completions per prompt from the source policy, each a record with its provenance."""
        cfg, policy, G = self.cfg, self.source, self.cfg.rollout.group_size
        seed = derive_seed(cfg.seed, step, f"sampling/{round_}")
        prompt_ids = [policy.encode_prompt(p.prompt) for p in problems]
        created = time.time()
        gen = policy.sample(prompt_ids, cfg.sampling, generator=torch.Generator().manual_seed(seed), n=G)
        sampling = {**cfg.sampling.as_dict(), "seed": seed, "source": cfg.rollout.source}
        version = self.state.policy_version if cfg.rollout.source == "policy" else -1
        records = []
        for i, (ids, lps, finish) in enumerate(zip(gen.completion_ids, gen.logprobs, gen.finish_reasons)):
            p = problems[i // G]
            records.append(Record(
                problem_id=p.id, group_id=f"{step}-{round_}-{i // G}", prompt=p.prompt, reference=p.reference,
                prompt_ids=prompt_ids[i // G], completion_ids=ids, completion=policy.completion_text(ids, finish),
                behavior_logprobs=lps, sampling=sampling, policy_version=version, finish_reason=finish,
                created_at=created))  # fmt: skip
        return records

    def teacher_records(self, problems, step: int, round_: int, rng: random.Random) -> list[Record]:
        """The task's own traces (SFT data): no model sampled them, so no behaviour log-probs."""
        tok, G, records = self.policy.tokenizer, self.cfg.rollout.group_size, []
        for b, p in enumerate(problems):
            for _ in range(G):
                text = self.task.teacher_completion(p, rng)
                ids = tok(text, add_special_tokens=False).input_ids + [self.policy.eos_id]
                records.append(Record(
                    problem_id=p.id, group_id=f"{step}-{round_}-{b}", prompt=p.prompt, reference=p.reference,
                    prompt_ids=self.policy.encode_prompt(p.prompt), completion_ids=ids, completion=text,
                    behavior_logprobs=None, sampling={"source": "task-teacher"}, policy_version=-1,
                    finish_reason="eos", created_at=time.time()))  # fmt: skip
        return records

    def score(self, records: list[Record]) -> None:
        verdicts = self.verifier.verify_batch([r.completion for r in records], [r.reference for r in records])
        now, buffer = time.time(), self.cfg.rollout.overlong_buffer
        penalties = [0.0] * len(records)
        if buffer:
            lengths = torch.tensor([len(r.completion_ids) for r in records])
            penalties = overlong_penalty(lengths, self.cfg.sampling.max_new_tokens, buffer).tolist()
        for r, v, pen in zip(records, verdicts, penalties):
            r.reward, r.reward_components, r.verifier = v.score + pen, dict(v.components), v.version
            if buffer:
                r.reward_components["overlong"] = pen
            r.verdict_details, r.verdict_outcome, r.verified_at = v.details, v.outcome, now
            check_reward(r)

    def fill_with_variance(self, step: int, records: list[Record], times: dict) -> tuple[list[Record], list[Record]]:
        """Dynamic sampling (DAPO): keep groups whose rewards differ, sample more prompts to fill B.

        Returns (the kept groups, at most B of them; every record sampled, dropped ones included).
        """
        sampled = list(records)
        r, G = self.cfg.rollout, self.cfg.rollout.group_size
        kept = self._varied_groups(records)
        self._dyn = {
            "groups_sampled": len(records) // G,
            "zero_variance_fraction_before": 1 - len(kept) / (len(records) // G),
        }
        for round_ in range(1, r.max_resample_rounds + 1):
            if len(kept) >= r.prompts_per_step:
                break
            more = self.sample_round(step, round_, r.prompts_per_step, times)
            sampled += more
            self._dyn["groups_sampled"] += len(more) // G
            kept += self._varied_groups(more)
        return [rec for group in kept[: r.prompts_per_step] for rec in group], sampled

    def _varied_groups(self, records: list[Record]) -> list[list[Record]]:
        G = self.cfg.rollout.group_size
        groups = [records[i : i + G] for i in range(0, len(records), G)]
        return [g for g in groups if len({rec.reward for rec in g}) > 1]

    def without_verifier_errors(self, records: list[Record]) -> list[Record]:
        """Drop whole groups holding a verdict with the outcome ``error`` (the verifier failed, e.g. a
        maths worker crashed): its score says nothing about the completion, so no advantage may come from it."""
        G = self.cfg.rollout.group_size
        groups = [records[i : i + G] for i in range(0, len(records), G)]
        kept = [g for g in groups if all(rec.verdict_outcome != "error" for rec in g)]
        if len(kept) < len(groups):
            self._verifier_errors = len(groups) - len(kept)
        return [rec for g in kept for rec in g]

    def fresh_enough(self, records: list[Record]) -> list[Record]:
        """Drop whole groups sampled more than ``max_staleness`` policy versions ago."""
        limit, G = self.cfg.rollout.max_staleness, self.cfg.rollout.group_size
        if not limit or self.cfg.rollout.source != "policy":
            return records
        oldest_allowed = self.state.policy_version - limit
        groups = [records[i : i + G] for i in range(0, len(records), G)]
        kept = [g for g in groups if g[0].policy_version >= oldest_allowed]
        self._stale = len(groups) - len(kept)
        return [rec for g in kept for rec in g]

    # ------------------------------------------------------------------ 4: learning signal

    def learning_signal(self, records: list[Record]):
        """(LearningBatch or None, rewards [B, G], advantages [N, T], completion mask [N, T])."""
        cfg, G = self.cfg, self.cfg.rollout.group_size
        rewards = torch.tensor([r.reward for r in records], dtype=torch.float64).view(-1, G)
        batch, behavior = records_batch(records, self.policy.pad_id)
        mask = batch.completion_mask
        shaped, token_rewards, ref_all = rewards, None, None
        beta = self.kl_control.beta
        if beta > 0 and cfg.kl.placement == "reward":  # KL in the reward: per token for gae, summed otherwise
            ref_all = self.reference_logprobs(batch, full=False)
            penalty = kl_penalty(behavior, ref_all, mask, cfg.kl.estimator)
            self._kl_reward = float(penalty.sum(dim=1).mean())  # per completion: what the controller tracks
            self._kl_token = float(penalty.sum() / mask.sum().clamp(min=1))  # per token: the "kl" metric
            shaped = rewards - beta * penalty.sum(dim=1).view(-1, G)
            token_rewards = terminal_rewards(rewards, mask) - beta * penalty
        values = self.critic.values(batch) if self.critic is not None else None
        if cfg.advantage.estimator == "gae" and token_rewards is None:
            token_rewards = terminal_rewards(rewards, mask)
        step_rewards, step_ends = self.process_rewards(records, mask) if self.prm is not None else (None, None)
        x = EstimatorInput(shaped, mask, token_rewards, values, step_rewards, step_ends)
        advantages = ESTIMATORS[cfg.advantage.estimator](x, cfg)
        rows, pairs = self.select_rows(records, rewards, advantages)
        if rows.numel() == 0:
            return None, rewards, advantages, mask
        sub = select(batch, rows)
        T = sub.completion_ids.shape[1]
        ref = None
        if ref_all is not None and cfg.kl.placement == "loss":
            ref = ref_all[rows, :T]
        elif (beta > 0 and cfg.kl.placement == "loss") or cfg.loss.policy_loss == "dpo":
            ref = self.reference_logprobs(sub, full=cfg.kl.estimator == "exact" and cfg.loss.policy_loss != "dpo")
        returns = (advantages + values.double())[rows, :T] if values is not None else None
        # SFT/RFT/distillation (estimator one or filter): the verifier's filter chooses the data, and the loss is
        # the mean over what it kept, as fine-tuning on the filtered set would be.  Elsewhere rows left
        # out for a zero advantage keep their place in the normaliser, so skipping changes nothing.
        filtered = pairs is not None or cfg.advantage.estimator in ("filter", "one")
        share = 1.0 if filtered else kept_share(mask, rows, cfg.loss.aggregation)
        lb = LearningBatch(
            records=[records[i] for i in rows.tolist()], batch=sub,
            behavior=behavior[rows, :T] if behavior is not None else None, advantages=advantages[rows, :T],
            ref_logprobs=ref, returns=returns, old_values=values[rows, :T] if values is not None else None,
            pairs=pairs, kept_share=share)  # fmt: skip
        return lb, rewards, advantages, mask

    def select_rows(self, records, rewards, advantages) -> tuple[torch.Tensor, torch.Tensor | None]:
        cfg = self.cfg
        if cfg.loss.policy_loss == "dpo":
            flat_pairs = dpo_pairs(rewards, cfg.advantage.accept_threshold)
            members = sorted({i for p in flat_pairs for i in p})
            where = {row: k for k, row in enumerate(members)}
            pairs = torch.tensor([[where[a], where[b]] for a, b in flat_pairs], dtype=torch.long).view(-1, 2)
            return torch.tensor(members, dtype=torch.long), pairs
        keep = torch.ones(len(records), dtype=torch.bool)
        skip = cfg.update.skip_zero_advantage and zero_advantage_means_zero_gradient(cfg, self.kl_control.beta)
        if skip or cfg.advantage.estimator in ("filter", "one"):
            keep &= (advantages != 0).any(dim=1)
        if cfg.update.mask_truncated:  # a cut-off completion has no verdict on its ending: leave it out
            keep &= torch.tensor([not r.truncated for r in records])
        return keep.nonzero().squeeze(1), None

    # ------------------------------------------------------------------ process supervision

    def process_rewards(self, records: list[Record], mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """PRM score of each step, placed on the completion token that closes it: ``[N, T]`` and ends ``[N, T]``."""
        N, T = mask.shape
        scores = self.prm.score([r.prompt for r in records], [r.completion for r in records])
        rewards = torch.zeros((N, T), dtype=torch.float64)
        ends = torch.zeros((N, T), dtype=torch.bool)
        for i, (r, sc) in enumerate(zip(records, scores)):
            steps = split_steps(r.completion, self.prm.splitter)
            for pos, value in zip(positions_in_ids(self.policy.tokenizer, r.completion_ids, r.completion, steps), sc):
                if pos < T:
                    rewards[i, pos], ends[i, pos] = value, True
            r.reward_components["prm_min"] = min(sc, default=0.0)
            r.reward_components["prm_steps"] = float(len(sc))
        return rewards, ends

    def refresh_prm(self, step: int) -> dict:
        """Iterative PRM: label the current policy's recent solutions (it completes the prefixes too),
        refit on them plus a replayed share of older labels, save the PRM under prm/step-N."""
        cfg, pc = self.cfg, self.cfg.process
        recent = [r for batch in self._recent for r in batch if r.finish_reason == "eos"][-pc.refresh_solutions :]
        self._recent = []
        if not recent:
            return {"prm_refresh_solutions": 0}
        solutions = [(Problem(r.problem_id, r.prompt, r.reference), r.completion) for r in recent]
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, step, "prm-refresh"))
        provenance = {"policy": f"{cfg.run_dir}@version{self.state.policy_version}", "completer": "same policy",
                      "task": self.task.name, "step": step, "prompt_template": self.prm.prompt_template}  # fmt: skip
        rows = label_solutions(solutions, self.policy, get_verifier(self.task.default_verifier),
                               pc.refresh_completions, cfg.sampling, gen, self.prm.splitter, provenance)  # fmt: skip
        n_replay = round(len(rows) * pc.refresh_replay / (1 - pc.refresh_replay))  # replay = this share of the mix
        rng = random.Random(derive_seed(cfg.seed, step, "prm-replay"))
        replay = rng.sample(self._label_pool, min(n_replay, len(self._label_pool)))
        meta = self.prm.meta  # refit the way the PRM was trained
        losses = fit_prm(self.prm, rows + replay, meta.get("labels", "hard"), meta.get("loss", "bce"),
                         pc.refresh_epochs, 32, pc.refresh_lr, derive_seed(cfg.seed, step, "prm-order"),
                         cumulative=meta.get("cumulative", False))  # fmt: skip
        self._label_pool += rows
        where = self.run_dir / "prm"
        atomic_write_jsonl(where / f"labels-step-{step:06d}.jsonl", rows)
        self.prm.save(where / f"step-{step:06d}", {"refreshed_at_step": step, "refresh_rows": len(rows),
                                                  "replayed_rows": len(replay)})  # fmt: skip
        return {"prm_refresh_solutions": len(rows), "prm_refresh_replayed": len(replay),
                "prm_refresh_loss": sum(losses) / max(len(losses), 1)}  # fmt: skip

    def _load_prm(self) -> None:
        """The configured PRM, or on resume the latest refreshed one saved at or before the checkpoint."""
        pc, step = self.cfg.process, self.state.step
        where = self.run_dir / "prm"
        saved = sorted(p for p in where.glob("step-*") if p.is_dir() and int(p.name[5:]) <= step) if step else []
        self.prm = load_prm(saved[-1] if saved else pc.prm)
        if pc.replay_data:
            self._label_pool = load_labels(pc.replay_data)
        for f in sorted(where.glob("labels-step-*.jsonl")) if step else []:
            if int(f.name[12:18]) <= step:
                self._label_pool += list(read_jsonl(f))
        if step and pc.refresh_every:  # the samples since the last refresh wait for the next one
            last = step - step % pc.refresh_every
            self._recent = [self.store.read(s) for s in self.store.steps() if last < s <= step]

    @torch.no_grad()
    def reference_logprobs(self, batch: PolicyBatch, full: bool) -> torch.Tensor:
        """Reference log-probs of the completion tokens ``[N, T]`` (or whole distributions ``[N, T, V]``)."""
        temperature = 1.0 if self.cfg.loss.policy_loss == "dpo" else (self.cfg.sampling.temperature or 1.0)
        out = None
        for rows in torch.arange(batch.input_ids.shape[0]).split(self.cfg.update.micro_batch_size):
            sub = select(batch, rows)
            lp = torch.log_softmax(self.reference.completion_logits(sub) / temperature, dim=-1)
            if not full:
                lp = lp.gather(-1, sub.completion_ids[..., None]).squeeze(-1)
            if out is None:
                shape = (batch.input_ids.shape[0], batch.completion_ids.shape[1], *lp.shape[2:])
                out = torch.zeros(shape, dtype=lp.dtype)
            out[rows, : lp.shape[1]] = lp
        return out

    # ------------------------------------------------------------------ bookkeeping

    def after_update(self, step: int, update: dict) -> None:
        cfg = self.cfg
        kl_seq, kl_token = self.__dict__.pop("_kl_reward", None), self.__dict__.pop("_kl_token", None)
        if kl_seq is not None:  # KL in the reward: measured on this step's records
            update["kl"], update["kl_per_completion"] = kl_token, kl_seq
        # KL in the loss: the learner measured it per completion on its first pass
        if cfg.kl.controller == "adaptive" and "kl_per_completion" in update:
            self.kl_control.update(update["kl_per_completion"], cfg.rollout.prompts_per_step * cfg.rollout.group_size)
        self.state.kl_beta = self.kl_control.beta
        if cfg.kl.reset_every and step % cfg.kl.reset_every == 0 and self.reference is not None:
            # Iterative RL (DeepSeekMath, Algorithm 1): the reference becomes the current policy.
            self.reference.model.load_state_dict(self.policy.model.state_dict())
            self.state.reference_step = step
        for key, name in (("_dyn", ""), ("_stale", "stale_groups_dropped"), ("_verifier_errors", "error_groups_dropped")):
            value = self.__dict__.pop(key, None)
            if isinstance(value, dict):
                update.update(value)
            elif value is not None:
                update[name] = value

    def _count_version(self) -> None:
        self.state.policy_version += 1

    def _reference(self, start):
        cfg = self.cfg
        if cfg.kl.beta <= 0 and cfg.loss.policy_loss != "dpo":
            return None  # no reference model, and no reference pass, when nothing uses it
        return load_policy(cfg.reference).frozen_copy() if cfg.reference else start.frozen_copy()

    def _source_policy(self, start):
        src = self.cfg.rollout.source
        if src == "teacher":
            return load_policy(self.cfg.rollout.teacher).frozen_copy()
        if src == "initial":
            return self.reference if (self.reference is not None and not self.cfg.reference) else start.frozen_copy()
        return self.policy

    def _start_run_dir(self) -> None:
        """Refuse to overwrite an earlier run; write config.yaml for this one."""
        if (self.run_dir / "metrics.jsonl").exists() or list_checkpoints(self.run_dir):
            raise ValueError(
                f"run directory {str(self.run_dir)!r} already holds a run; continue it with "
                f"`veriloop train --resume {self.run_dir}` or choose another --run_dir"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_yaml(self.run_dir / "config.yaml", to_dict(self.cfg))

    def total_optimizer_steps(self) -> int:
        return self.cfg.steps * self.cfg.update.inner_updates * self.cfg.update.mini_batches

    def store_records(self, step: int, records: list[Record]) -> None:
        if self.cfg.save_rollouts:
            self.store.write(step, records)

    def checkpoint(self) -> Path:
        reference = self.reference if self.state.reference_step else None
        return save_checkpoint(self.run_dir, self.state, self.policy, self.optimizer, self.cfg.keep_checkpoints,
                               critic=self.critic, reference=reference, pending=list(self.pending))  # fmt: skip

    def save_final(self) -> None:
        final = self.run_dir / "final"
        self.policy.save(final)
        atomic_write_json(final / "veriloop_train.json", {"algo": self.cfg.algo, "step": self.state.step,
                                                          "policy_version": self.state.policy_version})  # fmt: skip
