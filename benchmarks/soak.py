"""Soak: many GRPO steps in one process, watching for what grows (memory, file descriptors, processes, threads).

    python benchmarks/soak.py [--steps 1000] [--every 50] [--prompts 8] [--group 4] [--max_new_tokens 64]
                              [--threads 1] [--work DIR] [--json FILE] [--set key=value ...] [--quick]

Trains the shipped base (``builtin:base``) on the built-in task with ``Trainer.train`` in this process, as
``veriloop train`` does (checkpoints every ``--checkpoint_every`` steps, every record saved, metrics.jsonl), with
small steps (``--prompts`` x ``--group`` completions of up to ``--max_new_tokens`` tokens).  After step 1 and
every ``--every`` steps it samples: this process's resident memory (VmRSS) and Python objects (``gc``), its open
file descriptors (``/proc/self/fd``), its threads (the kernel's count, native ones included, and Python's), and
its descendant processes (verifier sandboxes, workers: how many and their resident memory together).  Prints a
row per sample as it goes (the progress), then the growth after warm-up: the sample at ``--warmup`` of the run
(10%) against the last, in MB and MB per 100 steps, and the difference in descriptors, processes and threads.
A leak shows as steady growth after warm-up; allocator noise as a few MB that do not keep climbing.
It also times every step's bookkeeping: the time from one step's end to the next one's (checkpoints, records and
metrics included) less the step's generate, verify and update phases; the medians of steps 6..15 and of the last
ten steps are compared (``bookkeeping``), so work that grows with the run's length (a file rewritten whole at every
step, a list scanned) shows as a difference that grows with ``--steps``.  ``--metrics-rewrite`` puts back, for
comparison, what metrics.jsonl did before it was appended to: the whole file rewritten at every step.
The result (``--json``) holds the settings, every sample and the summary.  The run directory is a temporary one,
removed at the end; with ``--work DIR`` it is ``DIR/soak-<date>-<time>``, kept.
Linux only (it reads ``/proc``).  ``--quick``: 3 steps of 2 prompts x 2, 8 new tokens, a sample and a checkpoint
every step.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_args, save, silence_hub_progress, stamp_line  # noqa: E402

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _status(pid: int | str = "self") -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _kb(field: str) -> int:
    return int(field.split()[0])


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, their children, ...), from each process's parent in /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        parent[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])  # after "(comm)": state, ppid
    below, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier]
        below += frontier
    return below


def descendants_rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_KB
        except OSError:
            pass
    return total / 1024


def sample(step: int, started: float, last: dict | None) -> dict:
    status = _status()
    below = descendants(os.getpid())
    now = time.time()
    row = {
        "step": step,
        "rss_mb": _kb(status["VmRSS"]) / 1024,
        "peak_rss_mb": _kb(status["VmHWM"]) / 1024,
        "fds": len(os.listdir("/proc/self/fd")),
        "children": len(below),
        "children_rss_mb": descendants_rss_mb(below),
        "threads": int(status["Threads"]),
        "py_threads": threading.active_count(),
        "py_objects": len(gc.get_objects()),
        "elapsed_s": now - started,
    }
    if last is not None and step > last["step"]:
        row["s_per_step"] = (row["elapsed_s"] - last["elapsed_s"]) / (step - last["step"])
    return row


HEADER = (
    "| step | RSS MB | peak MB | objects k | fds | children | children MB | threads | py threads | s/step "
    "| elapsed s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def table_row(r: dict) -> str:
    per_step = f"{r['s_per_step']:.2f}" if "s_per_step" in r else ""
    return (
        f"| {r['step']} | {r['rss_mb']:.1f} | {r['peak_rss_mb']:.1f} | {r['py_objects'] / 1000:.0f} | {r['fds']} "
        f"| {r['children']} | {r['children_rss_mb']:.1f} | {r['threads']} | {r['py_threads']} | {per_step} "
        f"| {r['elapsed_s']:.0f} |"
    )


def growth(samples: list[dict], warmup: float, steps: int) -> dict:
    """The last sample against the first one at or after ``warmup`` of the run (not the last one itself)."""
    end = samples[-1]
    after = [s for s in samples[:-1] if s["step"] >= warmup * steps] or samples[:-1] or samples
    start = after[0]
    span = max(end["step"] - start["step"], 1)
    rss = end["rss_mb"] - start["rss_mb"]
    return {
        "from_step": start["step"],
        "to_step": end["step"],
        "rss_mb": rss,
        "rss_mb_per_100_steps": rss / span * 100,
        "children_rss_mb": end["children_rss_mb"] - start["children_rss_mb"],
        "py_objects": end["py_objects"] - start["py_objects"],
        "fds": end["fds"] - start["fds"],
        "children": end["children"] - start["children"],
        "threads": end["threads"] - start["threads"],
        "s_per_step_warm": (end["elapsed_s"] - start["elapsed_s"]) / span,
    }


def bookkeeping(ends: list[float], phases: dict[int, float], steps: int) -> dict:
    """Median per-step time outside the phases, early in the run (steps 6..15) and at its end (the last ten).
    ``ends[k]`` is when step k's ``train_step`` returned; step k's bookkeeping is ``ends[k] - ends[k - 1]`` less its
    phases (what train() did after step k - 1, a checkpoint included, and step k's own records and metrics)."""
    other = {k: ends[k] - ends[k - 1] - phases[k] for k in range(2, len(ends) - 1) if k in phases}
    early = [k for k in range(6, 16) if k in other] or sorted(other)[:10]
    late = sorted(other)[-10:]
    ms = lambda ks: statistics.median(other[k] for k in ks) * 1000 if ks else float("nan")  # noqa: E731
    span = lambda ks: f"{ks[0]}..{ks[-1]}" if ks else "none"  # noqa: E731
    return {"early_steps": span(early), "late_steps": span(late), "early_ms": ms(early), "late_ms": ms(late)}


def options(a, run_dir: str) -> dict:
    out = {
        "run_dir": run_dir,
        "policy": "builtin:base",
        "steps": a.steps,
        "seed": a.seed,
        "threads": a.threads,
        "rollout.prompts_per_step": a.prompts,
        "rollout.group_size": a.group,
        "sampling.max_new_tokens": a.max_new_tokens,
        "checkpoint_every": a.checkpoint_every,
    }
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        out[key] = value
    return out


def rewrite_metrics_whole() -> None:
    """MetricsLog as it was before it appended: every row rewrites the whole file (atomically)."""
    from veriloop.training.run.metrics import MetricsLog

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self._write()

    MetricsLog.append = append


def run(a, run_dir: str) -> dict:
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    if a.metrics_rewrite:
        rewrite_metrics_whole()

    settings = options(a, run_dir)
    cfg = build_config(TrainConfig, {}, settings)
    started = time.time()
    trainer = Trainer(cfg, progress=False)
    print(
        f"# soak: {a.steps} steps of {cfg.algo} on {cfg.policy} ({a.prompts} prompts x {a.group}, up to "
        f"{a.max_new_tokens} new tokens, {a.threads or 'default'} torch threads), a sample every {a.every} steps; "
        f"run directory {run_dir}; set up in {time.time() - started:.1f} s",
        flush=True,
    )
    print(HEADER, flush=True)
    samples: list[dict] = []
    real_step = trainer.train_step
    ends, phases = [time.perf_counter()], {}  # step -> its generate + verify + update, s

    def step_and_sample(step: int) -> dict:
        row = real_step(step)
        ends.append(time.perf_counter())  # the interval to the next end holds this step's checkpoint, if any
        phases[step] = sum(row.get(k, 0.0) for k in ("time_generate_s", "time_verify_s", "time_update_s"))
        if step == 1 or step % a.every == 0 or step == a.steps:
            samples.append(sample(step, started, samples[-1] if samples else None))
            samples[-1]["reward_mean"] = row.get("reward_mean")
            print(table_row(samples[-1]), flush=True)
        return row

    trainer.train_step = step_and_sample  # train() calls it: checkpoints, records and metrics as in a real run
    trainer.train()
    ends.append(time.perf_counter())
    summary = growth(samples, a.warmup, a.steps)
    summary["bookkeeping"] = bookkeeping(ends, phases, a.steps)
    b = summary["bookkeeping"]
    print(
        f"\nbookkeeping per step (median; interval between step ends less generate, verify and update): steps "
        f"{b['early_steps']}: {b['early_ms']:.1f} ms; steps {b['late_steps']}: {b['late_ms']:.1f} ms "
        f"({b['late_ms'] - b['early_ms']:+.1f} ms)",
        flush=True,
    )
    print(
        f"\ngrowth after warm-up (step {summary['from_step']} -> {summary['to_step']}): RSS "
        f"{summary['rss_mb']:+.1f} MB ({summary['rss_mb_per_100_steps']:+.2f} MB per 100 steps), Python objects "
        f"{summary['py_objects']:+d}, fds {summary['fds']:+d}, child processes {summary['children']:+d} "
        f"({summary['children_rss_mb']:+.1f} MB), threads {summary['threads']:+d}; "
        f"{summary['s_per_step_warm']:.2f} s/step after warm-up",
        flush=True,
    )
    settings = {k: v for k, v in settings.items() if k != "run_dir"}
    metrics_writes = "rewritten whole at every step" if a.metrics_rewrite else "appended"
    return {"settings": settings, "metrics_jsonl": metrics_writes, "samples": samples, "summary": summary}


PAGE = "soak"


def render(results: list[dict]) -> str:
    """Bookkeeping per step early and late in a run, for each way of writing metrics.jsonl."""
    lines = [
        "# What grows with a run's length",
        "",
        "`benchmarks/soak.py` trains the shipped base with GRPO for many small steps in one process (records, "
        "metrics and checkpoints written as `veriloop train` writes them) and times each step's *bookkeeping*: the "
        "time from one step's end to the next one's, less the step's generate, verify and update phases. Work "
        "that grows with the run's length shows as a difference between the early steps and the last ones. "
        "`--metrics-rewrite` puts back what metrics.jsonl did before it was appended to: the whole file rewritten "
        "at every step.",
        "",
        "| metrics.jsonl | steps | bookkeeping, steps 6..15 (ms, median) | bookkeeping, last ten steps (ms, median) "
        "| difference (ms) | RSS growth after warm-up (MB per 100 steps) | s/step |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        b, g = r["summary"]["bookkeeping"], r["summary"]
        lines.append(
            f"| {r.get('metrics_jsonl', 'appended')} | {r['settings']['steps']:,} | {b['early_ms']:.1f} "
            f"| {b['late_ms']:.1f} | {b['late_ms'] - b['early_ms']:+.1f} | {g['rss_mb_per_100_steps']:+.2f} "
            f"| {g['s_per_step_warm']:.3f} |"
        )
    lines.append("")
    lines += [stamp_line(r) for r in results]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--every", type=int, default=50, help="sample every N steps (and after steps 1 and the last)")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=4, help="completions per prompt")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--checkpoint_every", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads; 0 = torch's default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=float, default=0.1, help="share of the run after which growth is measured")
    p.add_argument("--work", default="", help="keep the run directory, in this directory (default: a temporary one)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more veriloop options")
    p.add_argument(
        "--metrics-rewrite",
        action="store_true",
        help="for comparison: rewrite metrics.jsonl whole at every step, as before it was appended to",
    )
    result_args(p, "soak")
    a = p.parse_args()
    if a.quick:
        a.steps, a.every, a.prompts, a.group, a.max_new_tokens, a.checkpoint_every, a.threads = 3, 1, 2, 2, 8, 1, 1
    if a.steps < 2 or a.every < 1 or not 0 <= a.warmup < 1:
        p.error("--steps must be >= 2, --every >= 1 and --warmup in [0, 1)")
    silence_hub_progress()
    if a.work:  # kept, to look at
        run_dir = Path(a.work) / time.strftime("soak-%Y%m%d-%H%M%S")
        result = run(a, str(run_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            result = run(a, f"{tmp}/run")
    save(a, "soak", result)


if __name__ == "__main__":
    main()
