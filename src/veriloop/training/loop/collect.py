"""Stages 1-3 of the loop and the data-source policy: which scored records a step learns from.

A sampling round draws prompts from the task (seeded by run seed, step, round), cuts them
into rollout requests of fixed composition (``rollout/engine.py``), has the engine serve
them and the verifier score every record (plus DAPO's overlong ramp).  On top of rounds:

* dynamic sampling (DAPO): keep groups whose rewards differ, sample more rounds to fill B;
* groups holding a verdict with outcome ``error`` are dropped (no advantage from a failed check);
* ``rollout.lag``: learn from the batch sampled ``lag`` steps earlier (the queue is checkpointed);
* ``rollout.max_staleness``: drop groups sampled more than that many policy versions ago;
* ``rollout.teacher_set fixed`` (a frozen sampler): step 1 samples and scores as usual and the records are
  kept (``teacher_set.jsonl.gz`` in the run directory, read back on resume); every later step learns from
  copies of the same records, so step k is the k-th pass over one fixed, verified set.

Every call returns its statistics; nothing is left on the object for someone to pop.
"""

from __future__ import annotations

import random
import time
from collections import deque
from pathlib import Path

import torch

from veriloop.algorithms import length_cost, overlong_penalty
from veriloop.errors import InputError
from veriloop.io import atomic_write_jsonl, read_jsonl
from veriloop.rollout.engine import FROZEN, build_requests
from veriloop.rollout.records import Record, check_reward
from veriloop.rollout.thinking import with_thinking_end
from veriloop.seeding import derive_seed
from veriloop.verifiers.tools import tool_settings


def _groups(records: list[Record], G: int) -> list[list[Record]]:
    return [records[i : i + G] for i in range(0, len(records), G)]


def verify_records(verifier, records: list[Record]) -> list:
    """The verdicts of ``records``; a verifier that declares ``reads_prompts`` (a reward model: r(x, y)) is given
    each record's prompt too, one that declares ``reads_data_sources`` (mixed rewards) each record's data source."""
    extra = {}
    if getattr(verifier, "reads_prompts", False):
        extra["prompts"] = [r.prompt for r in records]
    if getattr(verifier, "reads_data_sources", False):
        extra["data_sources"] = [r.data_source for r in records]
    return verifier.verify_batch([r.completion for r in records], [r.reference for r in records], **extra)


class Collector:
    def __init__(self, cfg, task, engine, verifier, pending: deque, ledger=None, teacher_set: Path | None = None):
        self.cfg, self.task, self.engine, self.verifier = cfg, task, engine, verifier
        # rollout.teacher_set fixed: where the set is kept, and the set once sampled (or read back on resume)
        self.teacher_set_path = teacher_set if cfg.rollout.teacher_set == "fixed" else None
        self.teacher_set: list[Record] | None = None
        self.selector = None  # selection.filter: a DifficultySelector (training/loop/selection.py), set by the trainer
        self.pending = pending  # batches sampled ahead (rollout.lag), saved with each checkpoint
        self.ledger = ledger  # every request's records, once (rollout/ledger.py)
        # task.reasoning tool: the policy's requests run code blocks (the task's demonstrations carry their own)
        self.tools = tool_settings(
            task, cfg.rollout.max_tool_calls, cfg.rollout.tool_timeout_s, cfg.rollout.tool_interpreter
        )
        self.sampling = with_thinking_end(cfg.sampling, task)  # sampling.max_thinking_tokens: the task's marker

    def collect(self, step: int, version: int) -> tuple[list[Record], list[Record], dict]:
        """(records to learn from this step, every record sampled this step, statistics incl. ``times``)."""
        learn, sampled, stats = self.sample_step(step, version)
        if self.cfg.rollout.lag:
            self.pending.append(learn)
            if len(self.pending) <= self.cfg.rollout.lag:
                return [], sampled, stats  # warming up: the first batches are still in flight
            learn = self.pending.popleft()
        return self.fresh_enough(learn, version, stats), sampled, stats

    def take_ready(self, version: int, stats: dict) -> list[Record]:
        """The pipeline's half of ``collect``: the batch sampled ``rollout.lag`` steps ago (before this step's
        sampling starts; ``[]`` while warming up).  ``take_ready`` + ``sample_step`` + ``pending.append``
        is ``collect``, with the sampling free to run while the learner updates on what this returns."""
        if len(self.pending) < self.cfg.rollout.lag:
            return []
        return self.fresh_enough(self.pending.popleft(), version, stats)

    def sample_step(self, step: int, version: int) -> tuple[list[Record], list[Record], dict]:
        """This step's sampling: (records fit to learn from, every record sampled, statistics incl. ``times``)."""
        stats = {"times": {"generate": 0.0, "verify": 0.0}}
        if self.teacher_set_path is not None:
            return self.fixed_set_step(step, version, stats)
        if self.selector is not None:  # the pool measured (or read back) for this step, and the coverage so far
            stats.update(self.selector.before_step(step, version))
        sampled = learn = self.sample_round(step, 0, version, stats["times"])
        if self.cfg.rollout.dynamic_sampling:
            learn, sampled = self.fill_with_variance(step, sampled, version, stats)
        return self.without_verifier_errors(learn, stats), sampled, stats

    def fixed_set_step(self, step: int, version: int, stats: dict) -> tuple[list[Record], list[Record], dict]:
        """``rollout.teacher_set fixed``: the set sampled (step 1) or read back (a resumed run), then a copy of it
        for this step; ``sampled`` holds the records only on the step that sampled them."""
        path, sampled = self.teacher_set_path, []
        if self.teacher_set is None and path.is_file():
            self.teacher_set = [Record.from_json(row, f"{path}:{i}") for i, row in enumerate(read_jsonl(path), 1)]
        if self.teacher_set is None and step > 1:  # a resumed run whose set is gone: a new one would be another run
            raise InputError(
                f"{path} is missing: rollout.teacher_set fixed passes over the set sampled at step 1, and this run "
                f"resumes at step {step}; put the file back or start a new run"
            )
        if self.teacher_set is None:
            sampled = self.sample_round(step, 0, version, stats["times"])
            atomic_write_jsonl(path, (r.to_json() for r in sampled), compress=True)
            self.teacher_set = sampled
        records = [Record.from_json(r.to_json()) for r in self.teacher_set]  # a pass mutates nothing of the set
        threshold = self.cfg.advantage.accept_threshold
        stats["teacher_set_records"] = len(records)
        stats["teacher_set_accepted"] = sum(r.reward >= threshold for r in records)
        return self.without_verifier_errors(records, stats), sampled, stats

    def requests(self, step: int, round_: int, version: int):
        """A sampling round's prompts (seeded by run seed, step, round) cut into requests of fixed composition."""
        cfg = self.cfg
        rng = random.Random(derive_seed(cfg.seed, step, f"prompts/{round_}"))
        problems = (
            self.selector.batch(step, cfg.rollout.prompts_per_step, rng)
            if self.selector is not None
            else self.task.train_batch(cfg.rollout.prompts_per_step, rng)
        )
        source = cfg.rollout.source
        version = version if source == "policy" else FROZEN
        return build_requests(
            cfg.seed,
            step,
            round_,
            problems,
            cfg.rollout.group_size,
            self.sampling,
            version,
            source,
            cfg.rollout.groups_per_request(len(problems)),
            self.tools if source == "policy" else None,
        )

    def sample_round(self, step: int, round_: int, version: int, times: dict) -> list[Record]:
        t0 = time.time()
        requests = self.requests(step, round_, version)
        records = [rec for served in self.engine.run(requests, self.ledger) for rec in served]
        t1 = time.time()
        self.score(records)
        times["generate"] += t1 - t0
        times["verify"] += time.time() - t1
        return records

    def score(self, records: list[Record]) -> None:
        """Verdicts (and the length shaping: the overlong ramp, the length cost) onto the records; a non-finite
        reward is refused."""
        verdicts = verify_records(self.verifier, records)
        now, shaping = time.time(), self.length_shaping(records)
        for i, (r, v) in enumerate(zip(records, verdicts)):
            r.reward_components, r.verifier = dict(v.components), v.version
            r.reward = v.score + sum(values[i] for values in shaping.values())
            r.reward_components.update({name: values[i] for name, values in shaping.items()})
            r.verdict_details, r.verdict_outcome, r.verified_at = v.details, v.outcome, now
            check_reward(r)

    def length_shaping(self, records: list[Record]) -> dict[str, list[float]]:
        """Reward components that depend on the completion's token count alone, by name (only those switched on)."""
        r, lengths = self.cfg.rollout, torch.tensor([len(rec.completion_ids) for rec in records])
        out = {}
        if r.overlong_buffer:  # the ramp is about the completion limit, which a tool's output counts towards
            out["overlong"] = overlong_penalty(lengths, self.cfg.sampling.max_new_tokens, r.overlong_buffer).tolist()
        if r.length_cost:  # T: the tokens the model wrote (a tool's output or a forced marker is not its cost)
            written = torch.tensor([rec.model_tokens for rec in records])
            out["length_cost"] = length_cost(written, r.length_cost).tolist()
        return out

    def fill_with_variance(self, step: int, records: list[Record], version: int, stats: dict):
        """Dynamic sampling (DAPO): (the kept groups, at most B of them; every record sampled, dropped ones too)."""
        r, G = self.cfg.rollout, self.cfg.rollout.group_size
        sampled, kept = list(records), self._varied_groups(records)
        stats["groups_sampled"] = len(records) // G
        stats["zero_variance_fraction_before"] = 1 - len(kept) / (len(records) // G)
        for round_ in range(1, r.max_resample_rounds + 1):
            if len(kept) >= r.prompts_per_step:
                break
            more = self.sample_round(step, round_, version, stats["times"])
            sampled += more
            stats["groups_sampled"] += len(more) // G
            kept += self._varied_groups(more)
        return [rec for group in kept[: r.prompts_per_step] for rec in group], sampled

    def _varied_groups(self, records: list[Record]) -> list[list[Record]]:
        return [g for g in _groups(records, self.cfg.rollout.group_size) if len({rec.reward for rec in g}) > 1]

    def without_verifier_errors(self, records: list[Record], stats: dict) -> list[Record]:
        """Drop whole groups holding a verdict with the outcome ``error`` (the verifier failed, e.g. a
        maths worker crashed): its score says nothing about the completion, so no advantage may come from it."""
        groups = _groups(records, self.cfg.rollout.group_size)
        kept = [g for g in groups if all(rec.verdict_outcome != "error" for rec in g)]
        if len(kept) < len(groups):
            stats["error_groups_dropped"] = len(groups) - len(kept)
        return [rec for g in kept for rec in g]

    def fresh_enough(self, records: list[Record], version: int, stats: dict) -> list[Record]:
        """Drop whole groups sampled more than ``max_staleness`` policy versions ago."""
        limit = self.cfg.rollout.max_staleness
        if not limit or self.cfg.rollout.source != "policy":
            return records
        groups = _groups(records, self.cfg.rollout.group_size)
        kept = [g for g in groups if g[0].policy_version >= version - limit]
        stats["stale_groups_dropped"] = len(groups) - len(kept)
        return [rec for g in kept for rec in g]


class AsyncCollector(Collector):
    """``rollout.mode=async``: requests of later steps run ahead of the learner, under an admission bound.

    Before step ``s`` waits for its own records, the requests of steps ``u > s`` go out with the weights
    the engine holds now, as long as ``(u - s) * versions_per_step <= rollout.max_staleness``: step ``u``
    is consumed after at most ``u - s`` more updates of ``versions_per_step`` optimizer steps each, so no
    record can be older than the bound when it is learned from.  Every consumed record's age is checked
    anyway (a violation stops the run: it would be a bug, and nothing is dropped to hide it).  A slow
    request makes the learner wait, never skips its problems.  Requests go out at step boundaries, so
    timing changes the wall time, not which weights serve which request: runs are reproducible.
    """

    def __init__(self, cfg, task, engine, verifier, pending: deque, ledger, first_step: int, versions_per_step: int):
        super().__init__(cfg, task, engine, verifier, pending, ledger)
        self.versions_per_step = versions_per_step
        self.enforce_bound = True  # the tests switch it off to see what the bound prevents
        self.window_without_bound = 4  # steps ahead when the bound is off
        self.inflight: dict[int, list] = {}  # step -> tickets of its requests
        # a checkpoint holds the records of steps sampled ahead (drained): step first_step + i is pending[i]
        self.ready = {first_step + i: batch for i, batch in enumerate(pending)}
        pending.clear()

    def admitted(self, ahead: int) -> bool:
        if not self.enforce_bound:
            return ahead <= self.window_without_bound
        return ahead * self.versions_per_step <= self.cfg.rollout.max_staleness

    def dispatch(self, step: int, version: int) -> None:
        u = step
        while u <= self.cfg.steps and self.admitted(u - step):
            if u not in self.inflight and u not in self.ready:
                requests = self.requests(u, 0, version)
                workers = self.cfg.rollout.workers
                self.inflight[u] = [self.engine.submit(r, i % workers, self.ledger) for i, r in enumerate(requests)]
            u += 1

    def collect(self, step: int, version: int) -> tuple[list[Record], list[Record], dict]:
        stats = {"times": {"generate": 0.0, "verify": 0.0}}
        self.dispatch(step, version)
        t0 = time.time()
        records = self.ready.pop(step) if step in self.ready else self._served(step)
        t1 = time.time()
        self.score(records)
        stats["times"].update(generate=t1 - t0, verify=time.time() - t1)  # generate: the wait for this step's records
        self.check_ages(records, version)
        return self.without_verifier_errors(records, stats), records, stats

    def _served(self, step: int) -> list[Record]:
        return [rec for served in self.engine.wait(self.inflight.pop(step), self.ledger) for rec in served]

    def check_ages(self, records: list[Record], version: int) -> None:
        limit = self.cfg.rollout.max_staleness
        for r in records:  # a frozen source's records (version -1) have no age
            if self.enforce_bound and r.policy_version != FROZEN and version - r.policy_version > limit:
                age = version - r.policy_version
                raise RuntimeError(
                    f"record {r.group_id} (problem {r.problem_id}) is {age} versions old, over "
                    f"rollout.max_staleness={limit}: admission control failed"
                )

    def drain(self) -> list[list[Record]]:
        """Wait for every request in flight (a checkpoint holds their records); the batches of the steps after
        the current one, in order."""
        for u in sorted(self.inflight):
            self.ready[u] = self._served(u)
        return [self.ready[u] for u in sorted(self.ready)]
