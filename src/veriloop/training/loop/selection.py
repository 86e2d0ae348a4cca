"""Problem selection by difficulty (seed 002 s.7): which training problems a step's prompts come from.

A group whose completions all pass, or all fail, has advantage 0 under every group-relative estimator: its
samples cost a step's compute and teach nothing.  ``DifficultySelector`` draws a pool of ``selection.pool``
training problems once (seeded by the run seed; duplicates dropped), measures each one's pass rate with
``selection.samples`` samples of the policy itself (a sample passes when its reward is at least
``advantage.accept_threshold``), and keeps the problems with ``keep_above < pass rate < keep_below``; every
``selection.refresh_every`` steps it measures the pool again with the current weights.  Each step's prompts
are drawn from the kept problems: uniformly (seeded by run seed and step, as without selection), or in the
order of ``selection.curriculum`` (easy-first: highest pass rate first), B a step, from the start again
when all were given.

Every measurement is kept in the run directory: ``selection/step-000000.jsonl.gz`` holds the records sampled
to measure the pool before step 1 (``step-000010`` before step 11, ...) with their verdicts, and
``selection/step-000000.json`` the pool's pass rates and what was kept; a resumed run reads the latest one
at or before its checkpoint back instead of sampling again.  ``coverage`` counts how often each problem
was drawn (replayed from the seeds, so a resumed run counts its past too); ``selection/coverage.json`` is
written at the end of a run.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from veriloop.errors import InputError
from veriloop.io import atomic_write_bytes, step_name, steps_in
from veriloop.rollout.engine import build_requests
from veriloop.rollout.records import RecordStore
from veriloop.seeding import derive_seed
from veriloop.tasks.base import Problem
from veriloop.training.loop.collect import verify_records


def pass_rates(records, threshold: float) -> dict[str, float]:
    """Share of each problem's records whose reward is at least ``threshold``, by problem id."""
    passed: dict[str, list[int]] = {}
    for r in records:
        passed.setdefault(r.problem_id, []).append(int(r.reward >= threshold))
    return {pid: sum(v) / len(v) for pid, v in passed.items()}


def kept_problems(pool: list[Problem], rates: dict[str, float], above: float, below: float, curriculum: str):
    """The pool's problems with ``above < rate < below``, in the curriculum's order (pool order for none)."""
    kept = [p for p in pool if above < rates[p.id] < below]
    if curriculum == "easy-first":
        kept.sort(key=lambda p: -rates[p.id])  # a stable sort: ties keep the pool's (seeded) order
    elif curriculum == "hard-first":
        kept.sort(key=lambda p: rates[p.id])
    return kept


class DifficultySelector:
    def __init__(self, cfg, task, engine, verifier, run_dir: str | Path, sampling, tools=None):
        self.cfg, self.sc, self.task, self.engine, self.verifier = cfg, cfg.selection, task, engine, verifier
        self.sampling, self.tools = sampling, tools
        self.where = Path(run_dir) / "selection"
        self.store = RecordStore(self.where)
        rng = random.Random(derive_seed(cfg.seed, 0, "selection-pool"))
        seen, self.pool = set(), []
        for p in task.train_batch(self.sc.pool, rng):
            if p.id not in seen:
                seen.add(p.id)
                self.pool.append(p)
        self.measured_at: int | None = None  # the step the current measurement was made before (0: before step 1)
        self.rates: dict[str, float] = {}
        self.kept: list[Problem] = []
        self.history: list[tuple[int, list[Problem]]] = []  # (measured at, kept) of every measurement read or made
        self.counts: dict[str, int] = {}  # problem id -> steps that drew it (coverage)

    def due(self, step: int) -> int:
        """The measurement step ``step`` draws from: 0, or the last multiple of refresh_every before it."""
        every = self.sc.refresh_every
        return 0 if not every else (step - 1) // every * every

    def before_step(self, step: int, version: int) -> dict:
        """Measure (or read back) what ``step`` draws from; statistics of the measurement on the step that made it."""
        at, stats = self.due(step), {}
        if at != self.measured_at and not self._read(at):
            stats = self.measure(at, version)
        self.count_step(step)
        return {**stats, **self.step_coverage()}

    def _read(self, at: int) -> bool:
        path = self.where / step_name(at, suffix=".json")
        if not path.is_file():
            return False
        saved = json.loads(path.read_text())
        self._use(at, saved["pass_rates"])
        return True

    def _use(self, at: int, rates: dict[str, float]) -> None:
        missing = [p.id for p in self.pool if p.id not in rates]
        if missing:
            raise InputError(
                f"{self.where / step_name(at, suffix='.json')} has no pass rate for {len(missing)} pool problems "
                f"(e.g. {missing[0]}): it was measured for another pool (task or selection.pool changed)"
            )
        s = self.sc
        self.measured_at, self.rates = at, rates
        self.kept = kept_problems(self.pool, rates, s.keep_above, s.keep_below, s.curriculum)
        if not self.kept:
            solved = sum(rates[p.id] >= s.keep_below for p in self.pool)
            raise InputError(
                f"selection: no problem of the pool of {len(self.pool)} has a pass rate strictly between "
                f"selection.keep_above {s.keep_above} and selection.keep_below {s.keep_below} (measured before step "
                f"{at + 1}: {solved} at or above, {len(self.pool) - solved} at or below): nothing left to learn "
                "from; widen the bounds, enlarge selection.pool, or stop here"
            )
        self.history.append((at, self.kept))

    def measure(self, at: int, version: int) -> dict:
        """Sample the pool with the current weights, score it, keep what lies between the bounds; save both."""
        t0 = time.time()
        requests = build_requests(
            derive_seed(self.cfg.seed, at, "selection"),
            at,
            0,
            self.pool,
            self.sc.samples,
            self.sampling,
            version,
            "policy",
            self.cfg.rollout.groups_per_request(len(self.pool)),
            self.tools,
        )
        records = [rec for served in self.engine.run(requests, None) for rec in served]
        verdicts = verify_records(self.verifier, records)
        now = time.time()
        for r, v in zip(records, verdicts):
            r.reward, r.reward_components, r.verifier = v.score, dict(v.components), v.version
            r.verdict_details, r.verdict_outcome, r.verified_at = v.details, v.outcome, now
        rates = pass_rates(records, self.cfg.advantage.accept_threshold)
        self.store.write(at, records)
        self._use(at, rates)
        kept_ids = {p.id for p in self.kept}
        s = self.sc
        summary = {
            "measured_before_step": at + 1,
            "policy_version": version,
            "pool": len(self.pool),
            "samples": s.samples,
            "keep_above": s.keep_above,
            "keep_below": s.keep_below,
            "kept": len(self.kept),
            "pass_rates": rates,
            "kept_ids": sorted(kept_ids),
        }
        atomic_write_bytes(self.where / step_name(at, suffix=".json"), json.dumps(summary, indent=1).encode())
        return {
            "selection_pool": len(self.pool),
            "selection_kept": len(self.kept),
            "selection_always_solved": sum(rates[p.id] >= s.keep_below for p in self.pool),
            "selection_never_solved": sum(rates[p.id] <= s.keep_above for p in self.pool),
            "selection_pass_rate_mean": sum(rates.values()) / len(rates),
            "selection_sampled_records": len(records),
            "selection_sampled_tokens": sum(r.model_tokens for r in records),
            "selection_prefill_tokens": sum({r.group_id: len(r.prompt_ids) for r in records}.values()),
            "time_select_s": time.time() - t0,
        }

    def batch(self, step: int, n: int, rng: random.Random) -> list[Problem]:
        """``n`` kept problems for ``step``: uniform draws (``rng``), or the curriculum's next ``n``."""
        return self._draw(self.kept, self.measured_at, step, n, rng)

    def _draw(self, kept, at: int, step: int, n: int, rng: random.Random) -> list[Problem]:
        if self.sc.curriculum == "none":
            return [kept[rng.randrange(len(kept))] for _ in range(n)]
        start = (step - at - 1) * n  # the steps since the measurement, B problems each, in order, cycling
        return [kept[(start + i) % len(kept)] for i in range(n)]

    def count_step(self, step: int) -> None:
        """Add ``step``'s prompts (its first sampling round: what the step asked for) to ``counts``; the draw is
        the one ``batch`` makes for that step, from the same seed."""
        at = self.due(step)
        kept = next(k for a, k in reversed(self.history) if a == at)
        rng = random.Random(derive_seed(self.cfg.seed, step, "prompts/0"))
        for p in self._draw(kept, at, step, self.cfg.rollout.prompts_per_step, rng):
            self.counts[p.id] = self.counts.get(p.id, 0) + 1

    def step_coverage(self) -> dict:
        """Coverage so far: distinct problems drawn, and the share of the currently kept ones drawn at least once."""
        return {
            "coverage_problems": len(self.counts),
            "coverage_kept_share": sum(1 for p in self.kept if p.id in self.counts) / len(self.kept),
        }

    def write_coverage(self) -> None:
        """``selection/coverage.json``: per pool problem, how often it was drawn, its last pass rate, kept or not."""
        kept = {p.id for p in self.kept}
        rows = {
            p.id: {"drawn": self.counts.get(p.id, 0), "pass_rate": self.rates.get(p.id), "kept": p.id in kept}
            for p in self.pool
        }
        atomic_write_bytes(self.where / "coverage.json", json.dumps(rows, indent=1).encode())

    def resume(self, step: int) -> None:
        """A run resumed after ``step``: the measurements saved up to then (a later one is discarded, as the
        metrics after the checkpoint are), and the coverage of steps 1..``step`` replayed."""
        for at, path in steps_in(self.where, suffix=".json"):
            if at >= step:  # measured before step at + 1, which the resumed run will run again
                for stale in (path, self.store.path(at)):
                    stale.unlink(missing_ok=True)
            else:
                self._read(at)
        for s in range(1, step + 1):
            self.count_step(s)
