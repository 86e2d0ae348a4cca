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
from dataclasses import dataclass, field
from pathlib import Path

import torch

from veriloop.evaluation.evaluate import EvalConfig, EvalResult, evaluate
from veriloop.evaluation.teacher import evaluate_teacher
from veriloop.io import atomic_write_json, atomic_write_yaml
from veriloop.models.loading import load_policy
from veriloop.report.report import write_report
from veriloop.training.config import to_dict
from veriloop.training.run_config import OptimConfig, SFTConfig, TrainConfig
from veriloop.training.sft import run_sft
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
    sft = SFTConfig(
        policy=cfg.train.policy,
        run_dir=str(run_dir),
        seed=cfg.train.seed,
        steps=10**7,
        max_minutes=seconds / 60,
        eval_every=0,
        task=cfg.train.task,
        optim=OptimConfig(lr=cfg.sft_lr, weight_decay=0.01),
    )
    run_sft(sft, progress=progress)
    return run_dir / "model"


def run_demo(cfg: DemoConfig, progress: bool = True) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started = time.time()
    out = _fresh_dir(cfg.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_yaml(out / "demo.yaml", to_dict(cfg))
    task = cfg.train.task.build()
    problems = task.heldout()
    verifiers = cfg.train.task.eval_verifiers()
    print(f"demo directory: {out}\nevaluating the base ({cfg.train.policy}) on {len(problems)} held-out problems ...")
    base = evaluate(load_policy(cfg.train.policy), problems, verifiers, cfg.eval)
    teacher = evaluate_teacher(task, problems, verifiers)
    columns = {"base": _row(base)}
    results = {"base": base.as_dict()}
    print(f"base greedy accuracy {base.greedy_accuracy:.3f}; training with GRPO ({cfg.train.verifier} reward) ...")
    final_dir, train_s = _train(cfg.train, out / "grpo", cfg.train.verifier, progress)
    final = evaluate(load_policy(str(final_dir)), problems, verifiers, cfg.eval)
    columns["grpo"] = _row(final)
    results["grpo"] = final.as_dict()
    process = control = None
    if cfg.sft_control:
        print(f"continuing SFT from the same base for {train_s / 60:.1f} minutes (the control) ...")
        control_dir = _continue_sft(cfg, out / "sft-control", train_s, progress)
        control = evaluate(load_policy(str(control_dir)), problems, verifiers, cfg.eval)
        columns["sft-control"] = _row(control)
        results["sft-control"] = control.as_dict()
    if cfg.process_run:
        print(f"training from the same base with the {cfg.process_verifier} reward ...")
        process_dir, _ = _train(cfg.train, out / "grpo-process", cfg.process_verifier, progress)
        process = evaluate(load_policy(str(process_dir)), problems, verifiers, cfg.eval)
        columns["grpo-process"] = _row(process)
        results["grpo-process"] = process.as_dict()
    print()
    table = _print_table(columns, teacher)
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
        "total_seconds": round(time.time() - started, 1),
        "heldout_problems": len(problems),
        "seed": cfg.train.seed,
        "run_dir": str(out),
    }
    if process is not None:
        summary.update(
            process_final_accuracy=process.greedy_accuracy, process_final_wrong_steps_rate=process.wrong_steps_rate
        )
    if control is not None:
        summary.update(
            sft_control_accuracy=control.greedy_accuracy, sft_control_wrong_steps_rate=control.wrong_steps_rate
        )
    atomic_write_json(out / "summary.json", summary)
    atomic_write_json(out / "eval.json", {"teacher": teacher, **results})
    (out / "table.txt").write_text(table + "\n")
    write_report(out)
    print(f"\nsummary: {out / 'summary.json'}; report: {out / 'report.html'}")
    return summary
