"""``veriloop demo``: the whole loop on the built-in task, from one command.

1. evaluate the shipped base (greedy, sampled, pass@k, process, wrong steps) and the
   teacher it was fine-tuned on;
2. train it with GRPO (outcome reward by default);
3. continue SFT on the teacher's traces from the same base for the same wall time as
   the GRPO run (the control: is it the extra compute or the reward that helps?);
4. train a third run from the same base with GRPO on the process reward (the seeds'
   lesson: does the reward see the steps?);
5. evaluate each, print a before/after table, write ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from veriloop.config import build_config, to_dict
from veriloop.evaluation.evaluate import EvalConfig, EvalResult, evaluate
from veriloop.evaluation.teacher import evaluate_teacher
from veriloop.io import atomic_write_json, atomic_write_yaml
from veriloop.models.loading import load_policy
from veriloop.report.report import write_report
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer


@dataclass
class DemoConfig:
    """``veriloop demo``: base -> GRPO -> evaluation, with optional process-reward run."""

    run_dir: str = field(default="runs/demo", metadata={"help": "demo directory (a new one is numbered if it exists)"})
    process_run: bool = field(default=True, metadata={"help": "also train from the same base with the process reward"})
    process_verifier: str = field(default="arithmetic-process", metadata={"help": "reward of the process run"})
    sft_control: bool = field(
        default=True, metadata={"help": "also continue SFT from the base for the GRPO run's wall time"}
    )
    sft_lr: float = field(default=2e-4, metadata={"help": "learning rate of the continued-SFT control"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        if self.train.run_dir != TrainConfig().run_dir:
            raise ValueError(
                f"train.run_dir ({self.train.run_dir!r}) is not used by the demo: its runs go under --run_dir "
                "(grpo/, grpo-process/, sft-control/); set --run_dir instead"
            )


def demo_defaults() -> DemoConfig:
    return DemoConfig()


def _fresh_dir(path: str) -> Path:
    p = Path(path)
    if not p.exists() or not any(p.iterdir()):
        return p
    for i in range(2, 10_000):
        candidate = p.with_name(f"{p.name}-{i}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"no free run directory next to {path!r}")


def _row(r: EvalResult) -> dict:
    return {
        "greedy_accuracy": r.greedy_accuracy,
        "pass@8": r.pass_at.get("8"),
        "sampled_accuracy": r.sampled_accuracy,
        "process_rate": r.process_rate,
        "wrong_steps_rate": r.wrong_steps_rate,
        "format_rate": r.format_rate,
    }


def _print_table(columns: dict[str, dict], teacher: dict) -> str:
    keys = ["greedy_accuracy", "pass@8", "sampled_accuracy", "process_rate", "wrong_steps_rate", "format_rate"]
    names = list(columns)
    lines = [f"{'held-out':<22}" + "".join(f"{n:>16}" for n in names) + f"{'teacher':>12}"]
    for k in keys:
        cells = "".join(f"{'' if columns[n].get(k) is None else format(columns[n][k], '.3f'):>16}" for n in names)
        t = {
            "greedy_accuracy": teacher.get("accuracy"),
            "process_rate": teacher.get("process_rate"),
            "wrong_steps_rate": teacher.get("wrong_steps_rate"),
        }.get(k)
        lines.append(f"{k:<22}{cells}{'' if t is None else format(t, '.3f'):>12}")
    table = "\n".join(lines)
    print(table)
    return table


def _train(cfg: TrainConfig, run_dir: Path, verifier: str, progress: bool) -> tuple[Path, float]:
    run_cfg = dataclasses.replace(cfg, run_dir=str(run_dir), verifier=verifier)
    t0 = time.time()
    Trainer(run_cfg, progress=progress).train()
    write_report(run_dir)
    return run_dir / "final", time.time() - t0


def _continue_sft(cfg: DemoConfig, run_dir: Path, seconds: float, progress: bool) -> Path:
    """The sft recipe of the same trainer, from the same base, for ``seconds`` of wall time."""
    sft = build_config(TrainConfig, {"algo": "sft", "policy": cfg.train.policy, "run_dir": str(run_dir),
                                     "seed": cfg.train.seed, "steps": 10**7, "max_minutes": seconds / 60,
                                     "save_rollouts": False, "checkpoint_every": 10**7, "task": to_dict(cfg.train.task),
                                     "optim": {"lr": cfg.sft_lr, "weight_decay": 0.01}})  # fmt: skip
    Trainer(sft, progress=progress).train()
    return run_dir / "final"


class Phases:
    """Wall seconds of each phase of the demo, in the order they ran."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        started = time.time()
        try:
            yield
        finally:
            self.seconds[name] = round(time.time() - started, 1)

    def line(self) -> str:
        return "; ".join(f"{name} {s:.0f} s" for name, s in self.seconds.items())


def run_demo(cfg: DemoConfig, progress: bool = True) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started, phase = time.time(), Phases()
    out = _fresh_dir(cfg.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_yaml(out / "demo.yaml", to_dict(cfg))
    task = cfg.train.task.build()
    problems, verifiers = task.heldout(), cfg.train.task.eval_verifiers()
    print(f"demo directory: {out}\nevaluating the base ({cfg.train.policy}) on {len(problems)} held-out problems ...")
    with phase("evaluate base and teacher"):
        results = {"base": evaluate(load_policy(cfg.train.policy), problems, verifiers, cfg.eval)}
        teacher = evaluate_teacher(task, problems, verifiers)

    def evaluated(name: str, model_dir: Path) -> None:
        with phase(f"evaluate {name}"):
            results[name] = evaluate(load_policy(str(model_dir)), problems, verifiers, cfg.eval)

    print(f"base greedy accuracy {results['base'].greedy_accuracy:.3f}; training with GRPO "
          f"({cfg.train.verifier} reward) ...")  # fmt: skip
    with phase("train grpo"):
        final_dir, train_s = _train(cfg.train, out / "grpo", cfg.train.verifier, progress)
    evaluated("grpo", final_dir)
    if cfg.sft_control:
        print(f"continuing SFT from the same base for {train_s / 60:.1f} minutes (the control) ...")
        with phase("train sft-control"):
            control = _continue_sft(cfg, out / "sft-control", train_s, progress)
        evaluated("sft-control", control)
    if cfg.process_run:
        print(f"training from the same base with the {cfg.process_verifier} reward ...")
        with phase("train grpo-process"):
            process = _train(cfg.train, out / "grpo-process", cfg.process_verifier, progress)[0]
        evaluated("grpo-process", process)
    print()
    table = _print_table({name: _row(r) for name, r in results.items()}, teacher)
    summary = _summary(cfg, results, teacher, train_s, time.time() - started, len(problems), out)
    summary["phase_seconds"] = phase.seconds
    atomic_write_json(out / "summary.json", summary)
    atomic_write_json(out / "eval.json", {"teacher": teacher, **{k: r.as_dict() for k, r in results.items()}})
    (out / "table.txt").write_text(table + "\n")
    write_report(out)
    print(f"\nwall time {summary['total_seconds'] / 60:.1f} min: {phase.line()}")
    print(f"summary: {out / 'summary.json'}; report: {out / 'report.html'}")
    return summary


def _summary(cfg: DemoConfig, results: dict, teacher: dict, train_s: float, total_s: float, n: int, out: Path):
    base, final = results["base"], results["grpo"]
    summary = {
        "base_accuracy": base.greedy_accuracy,
        "final_accuracy": final.greedy_accuracy,
        "base_wrong_steps_rate": base.wrong_steps_rate,
        "final_wrong_steps_rate": final.wrong_steps_rate,
        "base_pass@8": base.pass_at.get("8"),
        "final_pass@8": final.pass_at.get("8"),
        "teacher_accuracy": teacher.get("accuracy"),
        "teacher_wrong_steps_rate": teacher.get("wrong_steps_rate"),
        "reward": cfg.train.verifier,
        "train_seconds": round(train_s, 1),
        "total_seconds": round(total_s, 1),
        "heldout_problems": n,
        "seed": cfg.train.seed,
        "run_dir": str(out),
    }
    if "grpo-process" in results:
        process = results["grpo-process"]
        summary.update(
            process_final_accuracy=process.greedy_accuracy, process_final_wrong_steps_rate=process.wrong_steps_rate
        )
    if "sft-control" in results:
        control = results["sft-control"]
        summary.update(
            sft_control_accuracy=control.greedy_accuracy, sft_control_wrong_steps_rate=control.wrong_steps_rate
        )
    return summary
