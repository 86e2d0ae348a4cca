"""The demo's trainings side by side: one spawned process each, the demo watching them (``veriloop.demo``)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import torch

from veriloop import logs
from veriloop.config import build_config, to_dict
from veriloop.errors import InputError
from veriloop.report.report import write_report
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Stopped, Trainer

log = logging.getLogger("veriloop.demo")

STOPPED_EXIT = 3  # a side-by-side run's exit status when a stop signal ended it (its checkpoint written, no final/)


def _train_in_child(name: str, cfg_dict: dict, resume: bool, threads: int, stop, reports) -> None:
    """One of the demo's trainings in a process of its own (spawned): ``threads`` torch threads, no progress
    display (the demo shows one for all), its full log in its run directory's train.log.  ``stop`` (an Event, the
    SFT control's): set by the demo when the GRPO run has finished, it ends this run after its step in progress,
    with final/.  Puts what it did on ``reports``; exits 0 once final/ is written, STOPPED_EXIT when a stop signal
    ended it first."""
    # the demo forwards a stop (SIGTERM, Ctrl-C) to its runs as SIGTERM; a terminal's Ctrl-C would reach each
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(STOPPED_EXIT))  # until the run starts: nothing to save yet
    torch.set_num_threads(threads)
    logs.setup_cli_logging(logging.WARNING)  # warnings and errors on stderr, beside the demo's own
    cfg = build_config(TrainConfig, cfg_dict)
    started, cpu = time.time(), time.process_time()
    with logs.attach_run_log(cfg.run_dir, "train", marker="config.yaml"):
        try:
            trainer = Trainer(cfg, resume=resume, progress=False)
        except InputError as e:  # the input's fault (a verifier, a context too short): said by the demo, exit 2
            reports.put({"name": name, "error": str(e)})
            sys.exit(2)
        trainer.continue_with = None
        if stop is not None:
            trainer.stop_when = lambda: "the GRPO run beside it has finished" if stop.is_set() else ""
        trainer.train()
        # said as soon as the training ends (the GRPO run's report stops the control), the run's report after
        reports.put(
            {
                "name": name,
                "done": not trainer.stop_signal,
                "steps": trainer.state.step,
                "seconds": time.time() - started,
                "cpu_seconds": time.process_time() - cpu,
                "model": str(Path(cfg.run_dir) / "final"),
            }
        )
        if not trainer.stop_signal:
            write_report(cfg.run_dir)
    sys.exit(STOPPED_EXIT if trainer.stop_signal else 0)


def _steps_done(run_dir: str) -> int:
    """Steps a run has recorded (lines of its metrics.jsonl): what the demo's progress display shows."""
    try:
        return sum(1 for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line.strip())
    except OSError:
        return 0


def train_side_by_side(runs: dict, configs: dict[str, TrainConfig], threads: int, steps: int, progress: bool) -> dict:
    """Train ``configs`` (by name: grpo, sft-control, grpo-process) at once, one spawned process each with
    ``threads`` threads; the SFT control until the GRPO run's training has ended.  ``runs`` (the demo's record,
    updated in place and saved with its state if it stops): each run's model, steps, wall and CPU seconds; a run
    already done is not started again.  A stop signal or Ctrl-C ends every run after its step, each with its
    checkpoint, and raises ``Stopped``."""
    names = list(configs)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each: torch's threads are per process
    stop, reports = ctx.Event(), ctx.Queue()
    procs = _start_runs(ctx, runs, configs, threads, stop, reports)
    done = _steps_done(configs["grpo"].run_dir)  # a continued demo: the steps its GRPO run had done
    bar = logs.progress(desc="grpo", unit="step", total=steps, initial=done, enabled=progress, logger=log)
    try:
        _watch_runs(runs, procs, configs, stop, reports, bar)
    except BaseException as e:  # a stop signal, Ctrl-C or a run that failed: the others checkpoint and end
        _end_runs(procs)
        _collect(reports, runs)
        bar.close()
        if isinstance(e, (Stopped, KeyboardInterrupt)):
            where = ", ".join(
                f"{n} step {_steps_done(configs[n].run_dir)}" for n in names if not runs.get(n, {}).get("done")
            )
            raise Stopped(getattr(e, "signum", signal.SIGINT), f"checkpoints written: {where}") from None
        raise
    bar.close()
    _collect(reports, runs)
    stopped = [n for n in names if not runs.get(n, {}).get("done")]
    if stopped:  # a run ended by a signal sent to it alone: the demo stops as if it had received it
        raise Stopped(signal.SIGTERM, f"{', '.join(stopped)} stopped by a signal; checkpoints written")
    return runs


def _start_runs(ctx, runs: dict, configs: dict[str, TrainConfig], threads: int, stop, reports) -> dict:
    """One spawned process per run not yet done (a continued demo does not train a finished run again), each
    resuming its run directory when it holds a run; only the SFT control is given ``stop``, the GRPO run's end."""
    procs = {}
    for name in configs:
        if runs.get(name, {}).get("done"):
            continue
        run_dir = Path(configs[name].run_dir)
        procs[name] = ctx.Process(
            target=_train_in_child,
            name=f"veriloop-demo-{name}",
            args=(
                name,
                to_dict(configs[name]),
                (run_dir / "config.yaml").is_file(),
                threads,
                stop if name == "sft-control" else None,
                reports,
            ),
        )
        procs[name].start()
    return procs


def _watch_runs(runs: dict, procs: dict, configs: dict[str, TrainConfig], stop, reports, bar) -> None:
    """Until every process has ended: collect their reports, show the GRPO run's steps on the bar (the others'
    beside it), end the SFT control once the GRPO run has ended, and raise as soon as a run fails."""
    names = list(configs)
    while True:
        _collect(reports, runs)
        others = {n: _steps_done(configs[n].run_dir) for n in names if n != "grpo"}
        if others != bar.postfix:
            bar.set_postfix(others)
        if _steps_done(configs["grpo"].run_dir) > bar.n:
            bar.update(_steps_done(configs["grpo"].run_dir) - bar.n)
        if runs.get("grpo", {}).get("done") or ("grpo" in procs and procs["grpo"].exitcode is not None):
            stop.set()  # the GRPO run's training has ended: so does the control's, after its step
        _raise_failure(runs, procs, configs)
        if not any(p.is_alive() for p in procs.values()):
            return
        time.sleep(0.25)


def _end_runs(procs: dict) -> None:
    """SIGTERM to every run still going, then wait for each: a run ends after its step in progress, with its
    checkpoint written (so a stopped demo continues where its runs were)."""
    for p in procs.values():
        if p.is_alive():
            os.kill(p.pid, signal.SIGTERM)
    for p in procs.values():
        p.join(timeout=600)


def _collect(reports, runs: dict) -> None:
    """What the side-by-side runs reported, added up over the attempts of a continued demo."""
    while True:
        try:
            got = reports.get_nowait()
        except Exception:  # noqa: BLE001 - queue.Empty (multiprocessing's queue raises the queue module's)
            return
        entry = runs.setdefault(got["name"], {"seconds": 0.0, "cpu_seconds": 0.0})
        if "error" in got:
            entry["error"] = got["error"]
            continue
        entry.update(
            done=got["done"],
            steps=got["steps"],
            model=got["model"],
            seconds=round(entry["seconds"] + got["seconds"], 1),
            cpu_seconds=round(entry["cpu_seconds"] + got["cpu_seconds"], 1),
        )


def _raise_failure(runs: dict, procs: dict, configs: dict) -> None:
    """A run that refused its input (said as the input's error), or one that ended otherwise than by finishing or
    a stop signal (a bug: its exit status and log named)."""
    wrong = [n for n in configs if runs.get(n, {}).get("error")]
    if wrong:
        raise InputError(f"the demo's {wrong[0]} run: {runs[wrong[0]]['error']}")
    failed = [n for n, p in procs.items() if p.exitcode not in (None, 0, 2, STOPPED_EXIT)]
    if failed:
        raise RuntimeError(
            f"the demo's {failed[0]} run failed (exit status {procs[failed[0]].exitcode}); "
            f"its log: {Path(configs[failed[0]].run_dir) / 'train.log'}"
        )
