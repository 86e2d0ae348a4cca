"""The controller: one loop for every method, from SFT to GRPO.

Read ``Trainer.train_step`` top to bottom: data order and rollout requests, verification,
the learning signal, the learner's update, versions and weights back to the rollout engine,
checkpoints and metrics.  Each stage returns its statistics.  The roles it drives each live
in a file of their own: the rollout engine (``rollout/engine.py``), the data-source policy
(``training/loop/collect.py``), the learning signal (``training/loop/signals.py``), the learner
(``training/loop/learner.py``), the reference policy (``training/loop/reference.py``), the critic
(``training/loop/critic.py``) and process supervision (``prm/process.py``).  What differs between
methods is configuration (``training/recipes.py``).  Conventions:

* the ratio's denominator is the record's behaviour log-prob (the distribution that sampled
  it, possibly several policy versions ago), never "the previous checkpoint";
* no forward pass recomputes what a record holds; with ``kl.beta == 0`` (and no DPO) the
  reference model is never loaded or run;
* every random draw of step s comes from streams seeded by (run seed, s, ...), and each
  completion from its own (run seed, step, round, group, sample) stream, so a resumed run
  reproduces the uninterrupted one exactly on CPU and records never depend on how rollout
  work is split between engines.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import shutil
import signal as os_signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch

from veriloop import logs
from veriloop.algorithms import AdaptiveKLController, FixedKLController
from veriloop.config import to_dict
from veriloop.evaluation.evaluate import validation_metrics
from veriloop.io import atomic_write_json, replace_dir
from veriloop.models.loading import load_policy
from veriloop.prm.process import ProcessSupervisor
from veriloop.registry import ENGINES, ESTIMATORS, LEARNERS
from veriloop.rollout.engine import FROZEN, EngineSections, TaskTeacherEngine
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.records import RecordStore
from veriloop.seeding import derive_seed
from veriloop.training.capabilities import samples_while_updating
from veriloop.training.config import TrainConfig
from veriloop.training.loop.collect import AsyncCollector, Collector
from veriloop.training.loop.critic import Critic
from veriloop.training.loop.optim import lr_at
from veriloop.training.loop.reference import ReferencePolicy
from veriloop.training.loop.reward_sources import build_reward_sources
from veriloop.training.loop.selection import DifficultySelector
from veriloop.training.loop.sharded_checkpoint import export_full
from veriloop.training.loop.signals import Signal, SignalMaker
from veriloop.training.loop.token_values import TokenValueStore, token_value_rows
from veriloop.training.recipes import RECIPES
from veriloop.training.run.alarms import NonFiniteError, RunAlarms, alarms_not_for, check_finite
from veriloop.training.run.checkpoint import RunState, load_checkpoint, save_checkpoint
from veriloop.training.run.compute import parameter_counts, training_compute
from veriloop.training.run.metrics import MetricsLog, staleness, step_metrics
from veriloop.training.run.preflight import (
    check_context_fits,
    check_verifier_reads_references,
    resolve_micro_batch_size,
    sample_problems,
)
from veriloop.training.run.run_dir import open_run_dir
from veriloop.training.run.tracking import build_tracker, check_installed
from veriloop.verifiers import get as get_verifier

log = logging.getLogger(__name__)


class Trainer:
    """``policy``, ``task`` and ``verifier`` may be given as objects (exact mode, notebooks)."""

    # a caller's reason to end the run after the step in progress ('' = none yet), with final/ written as at the
    # end of a budget: the demo ends its SFT control when the GRPO run beside it has finished
    stop_when: Callable[[], str] | None = None

    def __init__(
        self,
        cfg: TrainConfig,
        resume: bool = False,
        progress: bool = True,
        *,
        policy=None,
        task=None,
        verifier=None,
        engine_options: dict | None = None,
    ):
        self.cfg, self.progress, self.run_dir = cfg, progress, Path(cfg.run_dir)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        start = self._check_inputs(policy, task, verifier)  # everything wrong with the input fails before the run dir
        cfg = self.cfg  # with the micro-batch size the memory budget gives
        checkpoint = open_run_dir(self.run_dir, to_dict(cfg), resume)
        rollouts = self.run_dir / "rollouts"  # the records (indexed for the run browser) and what updates made of them
        self.store, self.token_values = RecordStore(rollouts, index=True), TokenValueStore(rollouts)
        self.metrics, self.ledger = MetricsLog(self.run_dir / "metrics.jsonl"), Ledger(self.run_dir)
        # resuming: a copy of the start whose weights and optimizer the learner reads from the checkpoint (once)
        self.policy = copy.deepcopy(start) if checkpoint else start
        self.state, self.pending = RunState(kl_beta=cfg.kl.beta), deque()
        estimator = ESTIMATORS.get(cfg.advantage.estimator)
        # seed 003's debugging list, watched every step (less the alarms whose pattern the run has by design)
        self.alarms = RunAlarms(self.run_dir, cfg.alarms, alarms_not_for(cfg, estimator), log)
        self._build_learner(start, estimator)
        if checkpoint:
            self._restore(checkpoint)
        self.engine = self._engine(start, engine_options or {})
        self.param_counts = parameter_counts(self.policy.model)  # (before a copy the controller does not keep goes)
        if cfg.learner.controller_weights == "none":
            self._hand_weights_to_ranks(resumed=bool(checkpoint))
        # rollout.lag with an engine of its own weights: this step is sampled while the learner updates
        self.pipelined = samples_while_updating(cfg)
        self.sampling_thread = ThreadPoolExecutor(1, "veriloop-sampling") if self.pipelined else None
        # a stop signal's name and number; continue_with: the command printed to continue (None: the caller says)
        self.stop_signal, self.stop_signum, self.continue_with = "", 0, f"veriloop train --resume {self.run_dir}"
        self.process = self._process_supervisor() if estimator.needs_prm else None
        self.collector = self._collector()
        self.signal = SignalMaker(
            cfg, self.learner.objective, self.policy.pad_id, self.reference, self.learner.critic, self.process
        )
        self.tracker = build_tracker(cfg.report_to, self.run_dir, to_dict(cfg), self.run_dir.name)

    def _check_inputs(self, policy, task, verifier):
        """The task, the verifier and the start policy, each checked against the others; raises before anything
        is written.  Returns the start policy."""
        cfg = self.cfg
        self.task = task or cfg.task.build()
        self.verifier = verifier or self._reward_source(cfg)
        if cfg.rollout.source == "task-teacher":
            TaskTeacherEngine.require_demonstrations(self.task)
        start = policy if policy is not None else self._load_start(cfg)
        problems = sample_problems(self.task, cfg.seed)
        check_verifier_reads_references(self.verifier, cfg.verifier, self.task, cfg.task.reward_verifier(), problems)
        check_context_fits(start, cfg.policy, self.task, problems, cfg.sampling.max_new_tokens)
        self.cfg = resolve_micro_batch_size(cfg, start, problems)  # before the run directory records the config
        check_installed(cfg.report_to)
        ENGINES.get(cfg.rollout.engine).require(EngineSections.of(cfg))  # an install message before the run dir
        return start

    @staticmethod
    def _reward_source(cfg):
        """The verifier; with ``reward_model`` (or ``judge``) alone it scoring and the verifier recorded beside it;
        with ``reward_sources`` each data source's own (``training/loop/reward_sources.py``), the verifier for the
        others."""
        if cfg.reward_sources:
            return build_reward_sources(cfg, get_verifier(cfg.verifier))
        if cfg.reward_model:
            from veriloop.preference.verifier import PreferenceVerifier

            return PreferenceVerifier(path=cfg.reward_model, audit=cfg.verifier)
        if cfg.judge:
            from veriloop.judge.verifier import JudgeVerifier

            return JudgeVerifier(path=cfg.judge, audit=cfg.verifier)
        return get_verifier(cfg.verifier)

    def _build_learner(self, start, estimator) -> None:
        """The registered learner strategy (it owns the critic, and the critic's optimizer: on the ranks, if any),
        the KL reference and the KL coefficient's controller."""
        cfg = self.cfg
        critic = Critic(self.policy, cfg) if estimator.needs_critic else None
        self.learner = LEARNERS.get(cfg.learner.strategy)(self.policy, cfg, self._count_version, critic)
        # LoRA: the reference is the trained model's own base (adapters off), so it must be that model
        self.reference = ReferencePolicy.build(cfg, self.policy if cfg.lora.enabled else start, self.learner.objective)
        adaptive = cfg.kl.controller == "adaptive" and cfg.kl.beta > 0
        self.kl_control = (
            AdaptiveKLController(cfg.kl.beta, cfg.kl.target, cfg.kl.horizon)
            if adaptive
            else FixedKLController(cfg.kl.beta)
        )

    def _process_supervisor(self) -> ProcessSupervisor:
        cfg = self.cfg
        return ProcessSupervisor(
            cfg.process,
            seed=cfg.seed,
            run_dir=self.run_dir,
            task=self.task,
            policy=self.policy,
            sampling=cfg.sampling,
            store=self.store,
            step=self.state.step,
        )

    def _collector(self) -> Collector | AsyncCollector:
        cfg = self.cfg
        if cfg.rollout.mode == "async":
            per_step = cfg.update.inner_updates * cfg.update.mini_batches  # optimizer steps (versions) per step
            return AsyncCollector(
                cfg, self.task, self.engine, self.verifier, self.pending, self.ledger, self.state.step + 1, per_step
            )
        teacher_set = Path(self.run_dir) / "teacher_set.jsonl.gz"
        collector = Collector(cfg, self.task, self.engine, self.verifier, self.pending, self.ledger, teacher_set)
        if cfg.selection.filter:
            collector.selector = DifficultySelector(
                cfg, self.task, self.engine, self.verifier, self.run_dir, collector.sampling, collector.tools
            )
            collector.selector.resume(self.state.step)  # a new run: clears what an aborted start left
        return collector

    @staticmethod
    def _load_start(cfg: TrainConfig):
        start = load_policy(
            cfg.policy, seed=cfg.seed, init_config=cfg.model, placement=cfg.placement(), prompts=cfg.prompt_format()
        )
        return start.with_adapters(cfg.lora, derive_seed(cfg.seed, 0, "lora")) if cfg.lora.enabled else start

    # ------------------------------------------------------------------ the loop

    def train(self) -> dict:
        cfg, first = self.cfg, self.state.step + 1
        # With a time or sample budget the step count is only a cap: show rate and elapsed time, not a fake
        # ETA (inf is "unknown": a tqdm bar, or plain lines off a terminal, without a total).
        budget = cfg.max_minutes or cfg.max_samples or cfg.max_sampled_tokens or self.stop_when is not None
        bar = logs.progress(
            desc=cfg.algo,
            unit="step",
            initial=first - 1,
            total=float("inf") if budget else cfg.steps,
            enabled=self.progress,
            logger=log,
        )
        self.started = time.time()
        sampled = sum(r.get("sampled_records", 0) for r in self.metrics.rows)  # a resumed run counts its past
        self.sampled_tokens = sum(r.get("sampled_tokens", 0) for r in self.metrics.rows)
        previous = self._catch_stop_signals()
        try:
            for step in range(first, cfg.steps + 1):
                row = self.train_step(step)
                # a step that learned from nothing (rollout.lag warm-up) has no reward: the metrics it has
                bar.set_postfix(logs.training_postfix(row))
                bar.update(1)
                sampled += row["sampled_records"]
                self.sampled_tokens += row["sampled_tokens"]
                stop = self.stop_signal or self._why_stop(step, sampled)
                if step % cfg.checkpoint_every == 0 or step == cfg.steps or stop:
                    self.checkpoint()
                    if self.collector.selector is not None:  # what was trained on so far, for a person to read
                        self.collector.selector.write_coverage()
                if stop:
                    log.info(f"stopping after step {step}: {stop}")
                    break
            bar.close()
            if not self.stop_signal:
                self.save_final()
            elif self.continue_with:  # preempted: the checkpoint is written, the run is not finished
                said = (
                    f"{self.stop_signal}: checkpoint of step {self.state.step} written; continue with "
                    f"`{self.continue_with}`"
                )
                print(said)  # the run's outcome, on stdout; its log keeps a copy
                log.info(said, extra=logs.FILE_ONLY)
        finally:
            for signum, handler in previous.items():
                os_signal.signal(signum, handler)
            self.tracker.close()
            self.close()
        return self.metrics.rows[-1] if self.metrics.rows else {}

    def _catch_stop_signals(self) -> dict:
        """SIGTERM (a preemptible cluster taking the machine back) or a first SIGINT (Ctrl-C): finish the step,
        checkpoint, exit cleanly.  A second SIGINT raises KeyboardInterrupt at once (quit without waiting).
        Only in the main thread (where Python runs handlers); returns the handlers it replaced, to put back."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_sigterm(signum, frame):
            self.stop_signal, self.stop_signum = "SIGTERM received", signum

        def on_sigint(signum, frame):
            if self.stop_signal:  # asked to stop already: this one means now
                raise KeyboardInterrupt
            self.stop_signal, self.stop_signum = "SIGINT received", signum
            # os.write, not print: a handler may run while the main thread is inside a print to the same stream
            os.write(
                2, b"\nSIGINT received: finishing this step, then writing a checkpoint (Ctrl-C again to quit at once)\n"
            )

        previous = {os_signal.SIGTERM: os_signal.signal(os_signal.SIGTERM, on_sigterm)}
        if os_signal.getsignal(os_signal.SIGINT) is not os_signal.SIG_IGN:  # started with SIGINT ignored: keep it so
            previous[os_signal.SIGINT] = os_signal.signal(os_signal.SIGINT, on_sigint)
        # a handler installed from outside Python reads as None and cannot be put back
        return {signum: handler for signum, handler in previous.items() if handler is not None}

    def close(self) -> None:
        """Stop what the run started (rollout actors, learner ranks, the sampling thread); idempotent."""
        if self.sampling_thread is not None:
            self.sampling_thread.shutdown(wait=False, cancel_futures=True)
        for role in (self.engine, self.learner):
            role.close()

    def train_step(self, step: int) -> dict:
        cfg = self.cfg
        lr = lr_at(self.state.policy_version, self.total_optimizer_steps(), cfg.optim)
        self.learner.set_lr(lr)
        wall, version = time.time(), self.state.policy_version
        if self.pipelined:  # the same computation as below, with this step's sampling overlapping the update
            ready_stats: dict = {}
            records = self.collector.take_ready(version, ready_stats)
            sampling = self.sampling_thread.submit(self.collector.sample_step, step, version)
            signal, update = self.learn(step, records)
            learned, sampled, data_stats = sampling.result(timeout=self._sampling_timeout())
            self.pending.append(learned)
            data_stats.update(ready_stats)
        else:
            # 1-3. Task, rollout requests, verifiers: scored records for this step's update.
            records, sampled, data_stats = self.collector.collect(step, version)
            signal, update = self.learn(step, records)
        times = data_stats.pop("times")
        times["update"] = update["update_ended_at"] - update["update_started_at"]
        self.after_update(step, update)
        if self.process is not None:
            update.update(self.process.observe(step, sampled, self.state.policy_version))
        if cfg.save_rollouts:
            self.store.write(step, sampled)
        update.update(data_stats)
        rewards, advantages, mask = (signal.rewards, signal.advantages, signal.mask) if signal else (None,) * 3
        times["wall"] = time.time() - wall
        row = step_metrics(step, records, rewards, advantages, mask, update, lr, times, sampled=sampled)
        row.update(staleness(records, version))
        row.update(
            policy_version=self.state.policy_version,
            kl_beta=self.kl_control.beta,
            sampled_records=len(sampled),
            sampled_tokens=sum(r.model_tokens for r in sampled),
            prefill_tokens=sum({r.group_id: len(r.prompt_ids) for r in sampled}.values()),  # one prefill a group
            update_records=signal.batch.size if signal is not None and signal.batch is not None else 0,
            update_tokens=int(signal.batch.batch.attention_mask.sum()) if signal is not None and signal.batch else 0,
            **self.validate(step),
        )
        self.alarms.check(row)  # a NaN or an infinity stops the run here, before the row is kept
        self.state.step = step
        self.metrics.append(row)
        self.tracker.log(step, row)
        return row

    def learn(self, step: int, records) -> tuple[Signal | None, dict]:
        """Stages 4-5 on ``records``: (the signal, the update's statistics with its start and end times)."""
        started = time.time()
        # 4. Learning signal: the gradient coefficient of every token (advantages, 0/1, pairs).
        signal = self.signal(records, self.kl_control.beta) if records else None
        # 5. Learner (and critic): passes of the objective; the engine gets the new weights in after_update.
        try:
            if signal is not None:
                check_finite("advantages", signal.advantages, step)
            update = self.update(step, signal)
        except NonFiniteError as e:  # the learner's loss or gradient norm: stopped before any optimizer step
            e = NonFiniteError(step, e.name, e.value, e.detail)
            self.alarms.stopped(e)
            raise e from None
        token_values = update.pop("token_values", {})
        if signal is not None and self.cfg.save_rollouts:  # what the browser colours each token by
            learned = signal.batch.records if signal.batch is not None else []
            prm = self.process.step_scores if self.process is not None else None
            self.token_values.write(
                step, token_value_rows(records, signal.advantages, signal.mask, learned, token_values, prm)
            )
        update.update(signal.stats if signal is not None else {})
        update.update(update_started_at=started, update_ended_at=time.time())
        return signal, update

    def _sampling_timeout(self) -> float:
        """A bound on one step's sampling (each request is bounded on its own; verification comes on top)."""
        r = self.cfg.rollout
        return 2 * r.request_timeout_s * (r.max_resample_rounds + 1) * (r.max_request_retries + 1)

    def update(self, step: int, signal: Signal | None) -> dict:
        """Stage 5: the learner's passes (not during the critic's warm-up) and the critic's."""
        if signal is None or signal.batch is None:
            return {}
        lb, gen = signal.batch, torch.Generator().manual_seed(derive_seed(self.cfg.seed, step, "minibatches"))
        has_critic = self.learner.critic is not None
        critic_warmup = has_critic and step <= self.cfg.critic.warmup_steps  # only the critic learns
        if self.cfg.ray.layout == "colocated" and not critic_warmup:
            self.engine.release()  # the engines hand their memory to the learner; the sync after refills it
        stats = {} if critic_warmup else self.learner.update(lb, self.kl_control.beta, gen)
        if has_critic:
            stats.update(self.learner.critic_update(lb.batch, lb.returns, lb.old_values, gen))
        return stats

    def after_update(self, step: int, update: dict) -> None:
        """KL control, the iterative reference reset, and the new weights to the rollout engine."""
        cfg = self.cfg
        # KL in the loss: the learner measured it per completion on its first pass; in the reward: the signal did
        if cfg.kl.controller == "adaptive" and "kl_per_completion" in update:
            self.kl_control.update(update["kl_per_completion"], cfg.rollout.prompts_per_step * cfg.rollout.group_size)
        self.state.kl_beta = self.kl_control.beta
        if cfg.kl.reset_every and step % cfg.kl.reset_every == 0 and self.reference is not None:
            self.reference.reset_to(self.policy)  # iterative RL (DeepSeekMath, Algorithm 1)
            self.state.reference_step = step
        if self.engine.version not in (FROZEN, self.state.policy_version):
            # The local engine samples from the learner's own tensors: the update already put the new weights in
            # place, so there is nothing to copy or hash; Ray actors get the trainable tensors and answer digests.
            handles = getattr(self.learner, "shard_handles", lambda: None)()
            if handles is not None and getattr(self.engine, "takes_shards", False):
                # Ray-placed learner ranks -> Ray rollout actors: each actor reads the ranks' buckets itself
                self.engine.publish_shards(handles, self.state.policy_version)
            else:
                self.engine.publish(self.policy.model, self.state.policy_version)

    def validate(self, step: int) -> dict:
        """Greedy accuracy on ``eval_split`` (validation unless asked otherwise) every ``eval_every`` steps."""
        if not self.cfg.eval_every or (step % self.cfg.eval_every and step != self.cfg.steps):
            return {}
        measure = functools.partial(
            validation_metrics,
            task=self.task,
            verifiers=self.cfg.task.eval_verifiers(),
            max_problems=self.cfg.eval_problems,
            split=self.cfg.eval_split,
            tools=self.collector.tools,
        )
        if self.cfg.learner.controller_weights == "none":  # the weights are on the actors: measure there
            return self.engine.apply(measure, self.cfg.learner.timeout_s)
        return measure(self.policy)

    # ------------------------------------------------------------------ the parts a test may call alone

    def score(self, records) -> None:
        self.collector.score(records)

    def learning_signal(self, records) -> Signal:
        return self.signal(records, self.kl_control.beta)

    # ------------------------------------------------------------------ setup and bookkeeping

    def _engine(self, start, options: dict):
        cfg, src = self.cfg, self.cfg.rollout.source
        if src == "task-teacher":
            return TaskTeacherEngine(self.task, self.policy)
        if src == "teacher":
            teacher = load_policy(cfg.rollout.teacher, placement=cfg.placement(), prompts=cfg.prompt_format())
            policy, version = teacher.frozen_copy(), FROZEN
        elif src == "initial":  # the reference is already a frozen copy of the start when it is one
            shared = self.reference is not None and not cfg.reference
            policy, version = (self.reference.policy if shared else start.frozen_copy()), FROZEN
        else:
            policy, version = self.policy, self.state.policy_version
        if cfg.ray.layout == "colocated":  # the rollout actors go into the learner ranks' bundles
            options = {**options, "placement": self.learner.ranks.placement()}
        # the registered engine rollout.engine names (options: the tests' fault and delay schedules)
        return ENGINES.get(cfg.rollout.engine).build(policy, version, EngineSections.of(cfg), **options)

    def _hand_weights_to_ranks(self, resumed: bool) -> None:
        """learner.controller_weights none: the rollout actors hold the weights the ranks hold (a resumed run's come
        from the checkpoint's shards, not the start the actors were built from), then the controller frees its copy."""
        if resumed:
            self.engine.publish_shards(self.learner.current_handles(), self.state.policy_version)
        self.learner.release_copy()

    def _restore(self, checkpoint: Path) -> None:
        reference = self.reference.policy if self.reference is not None else None
        self.state = load_checkpoint(checkpoint, self.learner, reference, self.pending)
        self.ledger.restore(checkpoint)
        self.kl_control.beta = self.state.kl_beta
        if (self.metrics.rows[-1]["step"] if self.metrics.rows else 0) < self.state.step:
            log.warning(
                f"{self.metrics.path} has rows up to step "
                f"{self.metrics.rows[-1]['step'] if self.metrics.rows else 0} only, the checkpoint is of step "
                f"{self.state.step}: the missing rows are not redone"
            )
        self.metrics.truncate(self.state.step)
        self.alarms.resume(self.metrics.rows, self.state.step)
        self.store.remove_after(self.state.step)
        self.token_values.remove_after(self.state.step)

    def _why_stop(self, step: int, sampled: int) -> str:
        """Why the run ends before ``steps`` ('' = it does not)."""
        cfg = self.cfg
        if step == cfg.steps:
            return ""
        if cfg.max_minutes and (time.time() - self.started) > cfg.max_minutes * 60:
            return f"max_minutes={cfg.max_minutes} reached"
        if self.stop_when is not None and (why := self.stop_when()):
            return why
        if cfg.max_samples and sampled >= cfg.max_samples:
            return f"max_samples={cfg.max_samples} reached ({sampled} completions sampled)"
        if cfg.max_sampled_tokens and self.sampled_tokens >= cfg.max_sampled_tokens:
            return f"max_sampled_tokens={cfg.max_sampled_tokens} reached ({self.sampled_tokens} tokens sampled)"
        return ""

    def _count_version(self) -> None:
        self.state.policy_version += 1

    def total_optimizer_steps(self) -> int:
        return self.cfg.steps * self.cfg.update.inner_updates * self.cfg.update.mini_batches

    def compute_ledger(self) -> dict:
        """This run's training compute so far (``training/run/compute.py``)."""
        params, trainable = self.param_counts
        critic = self.learner.critic
        return training_compute(
            self.metrics.rows,
            params=params,
            trainable=trainable,
            passes=self.cfg.update.inner_updates,
            reference=self.reference is not None,
            old_logprobs=self.cfg.loss.tis_cap > 0 and self.learner.objective.needs_behavior,
            critic_params=parameter_counts(critic.model)[0] if critic is not None else 0,
        )

    def checkpoint(self) -> Path:
        atomic_write_json(self.run_dir / "compute.json", self.compute_ledger())
        if isinstance(self.collector, AsyncCollector):  # requests in flight finish first: their records are saved
            self.pending.clear()
            self.pending.extend(self.collector.drain())
        reference = self.reference.policy if self.reference is not None and self.state.reference_step else None
        return save_checkpoint(
            self.run_dir,
            self.state,
            self.learner,
            self.cfg.keep_checkpoints,
            reference=reference,
            pending=list(self.pending),
            ledger=self.ledger,
            config=to_dict(self.cfg),
        )

    def _save_model(self, target: Path) -> None:
        """The model a user deploys (LoRA: merged, with the adapter in adapter/); with no controller copy, exported
        from shards the ranks write for it (the controller holds the full weights only while it writes them)."""
        if self.cfg.learner.controller_weights == "full":
            return self.policy.save_merged(target)
        shards = self.run_dir / ".final.shards"
        shutil.rmtree(shards, ignore_errors=True)
        shards.mkdir()
        try:
            self.learner.save(shards)
            if target.exists():
                shutil.rmtree(target)
            export_full(shards, target)
        finally:
            shutil.rmtree(shards, ignore_errors=True)

    def save_final(self) -> None:
        """``final/`` (and ``export`` if set): the model, with how it was made beside it."""
        made_by = RECIPES[self.cfg.algo].made_by
        made = {
            "made_by": made_by,
            "algo": self.cfg.algo,
            "steps_done": self.state.step,
            "policy_version": self.state.policy_version,
            "wall_time_s": round(time.time() - getattr(self, "started", time.time()), 1),
            "config": to_dict(self.cfg),
            "final": self.metrics.rows[-1] if self.metrics.rows else {},
            "compute": self.compute_ledger(),
        }
        atomic_write_json(self.run_dir / "compute.json", made["compute"])
        # final/ is built as .final.tmp and renamed into place: a kill leaves no half-written final/ (the resumed
        # run, which starts from the last step's checkpoint, writes it again)
        building = self.run_dir / ".final.tmp"
        for target in [building] + ([Path(self.cfg.export)] if self.cfg.export else []):
            if target == building and building.exists():
                shutil.rmtree(building)
            self._save_model(target)
            atomic_write_json(target / f"{made_by.replace(' ', '_')}.json", made)
            if target == building:
                replace_dir(building, self.run_dir / "final")


# ---------------------------------------------------------------------- commands of several stages (demo, pipeline)


class Stopped(BaseException):
    """A stop signal ended a command of several stages (``veriloop demo``, ``veriloop pipeline``) cleanly, with
    what was done saved.  A BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int, detail: str = ""):
        super().__init__(signum, detail)
        self.signum, self.detail = signum, detail

    @property
    def exit_status(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 130 for SIGINT


@contextmanager
def stop_on_signals():
    """SIGTERM raises ``Stopped`` at once in the main thread, and Ctrl-C KeyboardInterrupt as always; inside it,
    ``Trainer.train`` puts its own handlers in place for the length of a run (finish the step, checkpoint, return
    with ``stop_signal`` set).  The handler replaced is put back on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        raise Stopped(signum)

    previous = os_signal.signal(os_signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        os_signal.signal(os_signal.SIGTERM, previous if previous is not None else os_signal.SIG_DFL)


def train_or_stop(trainer: Trainer) -> None:
    """``trainer.train()`` as one stage of several: a run a stop signal ended (its checkpoint written, no final/)
    raises ``Stopped``, so that no later stage goes on from a model that was not written."""
    trainer.continue_with = None  # the command says how to continue it, not `veriloop train --resume`
    trainer.train()
    if trainer.stop_signal:
        raise Stopped(trainer.stop_signum, f"checkpoint of step {trainer.state.step} written")


def stop_exit(command: str, during: str, error: BaseException, again: str = "") -> SystemExit:
    """Say on one line where ``command`` stopped (``error``: Stopped, or KeyboardInterrupt for Ctrl-C) and how to
    continue it (the same command, or ``again``); the SystemExit to raise, with the signal's exit status."""
    stopped = error if isinstance(error, Stopped) else Stopped(os_signal.SIGINT)
    detail = f" ({stopped.detail})" if stopped.detail else ""
    said = (
        f"{command}: stopped by {os_signal.Signals(stopped.signum).name} during {during}{detail}; continue "
        f"with the same command{f', or: {again}' if again else ''}"
    )
    print(said, file=sys.stderr, flush=True)  # the command's last line (as its errors are), not a library message
    log.info(said, extra=logs.FILE_ONLY)  # the run's log keeps a copy
    return SystemExit(stopped.exit_status)
