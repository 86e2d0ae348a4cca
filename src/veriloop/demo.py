"""``veriloop demo``: the whole loop on the built-in task, from one command.

1. evaluate the shipped base (greedy, sampled, pass@k, process, wrong steps) and the
   teacher it was fine-tuned on;
2. train it with GRPO (outcome reward by default, the recipe ``DEMO_TRAIN``);
3. continue SFT on the teacher's traces from the same base with the same compute as
   the GRPO run (the control: is it the extra compute or the reward that helps?);
4. train a third run from the same base with GRPO on the process reward (the seeds'
   lesson: does the reward see the steps?);
5. evaluate each, print a before/after table, write ``summary.json``.

Steps 2-4 run side by side by default, one spawned process each with an equal share of the
threads, the control until the GRPO run's training has ended (each run's CPU seconds go in
``summary.json``); ``side_by_side: false`` runs them one after the other, the control for the
GRPO run's wall time.

A demo stopped part way (SIGTERM, Ctrl-C) continues where it stopped when the same command runs
again: ``demo.json`` records each phase done with its results (``demo.yaml`` the config), both
checked against the directory's ``manifest.json``; a phase done is not redone, a training stopped
part way resumes from its checkpoint.  ``--run_dir D`` continues the latest unfinished demo of
this configuration among D, D-2, D-3, ...; when there is none (every one finished, or another
configuration) a new one is numbered as before.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from veriloop import logs
from veriloop.config import build_config, to_dict
from veriloop.demo_runs import train_side_by_side
from veriloop.evaluation.evaluate import EvalConfig, EvalResult, evaluate
from veriloop.evaluation.teacher import evaluate_teacher
from veriloop.io import atomic_write_json, atomic_write_text, read_checked, write_checked
from veriloop.models.loading import load_policy
from veriloop.options import check_declared, declare, toggled
from veriloop.report.report import write_report
from veriloop.training.config import TrainConfig
from veriloop.training.run.checkpoint import config_bytes, flatten
from veriloop.training.run.run_dir import config_changes
from veriloop.training.trainer import Stopped, Trainer, stop_exit, stop_on_signals, train_or_stop

log = logging.getLogger(__name__)

# What each train.* option is to the SFT control: the sft recipe of the same trainer, from the same base, for
# the GRPO run's wall time.  An option set to a value other than its recipe's default reaches the control
# (CONTROL_PASSES) where it means the same in SFT: the model, the task, the machine, how the update is split and
# the optimizer's shape.  The GRPO runs' own settings (what they sample and how, the reward, the policy loss and
# KL, their length and learning rate: the control has --sft_lr and a wall time) are named once when set
# (GRPO_ONLY).  REFUSED: options no run of the demo can honour.  The longest matching prefix decides; the test
# walks every option of TrainConfig, so a new one must be placed here.
CONTROL_PASSES = (
    "policy",
    "seed",
    "task",
    "device",
    "dtype",
    "threads",
    "report_to",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_every",
    "eval_problems",
    "eval_split",
    "update",
    "optim",
    "lora",
    "learner",
    "model",
    "alarms",
)
GRPO_ONLY = (
    "algo",
    "reference",
    "verifier",
    "reward_model",
    "judge",
    "reward_sources",
    "steps",
    "max_minutes",
    "max_samples",
    "max_sampled_tokens",
    "save_rollouts",
    "optim.lr",
    "optim.schedule",
    "sampling",
    "rollout",
    "advantage",
    "loss",
    "kl",
    "critic",
    "process",
    "selection",
    "ray",
    "vllm",
)
REFUSED = {
    "run_dir": "the demo's runs go under --run_dir (grpo/, grpo-process/, sft-control/); set --run_dir instead",
    "export": "each of the demo's runs would save its final model there, one over the other; each run's is in its "
    "own final/ under --run_dir",
}
# Options that may differ when a demo is continued: where it is and how many CPU threads it uses
CONTINUE_MAY_CHANGE = ("run_dir", "threads", "train.threads")


def control_reach(key: str) -> str:
    """``passes`` | ``grpo-only`` | ``refused``: what the train.* option ``key`` (dotted) is to the SFT control."""
    found = [
        (len(p), kind)
        for kind, prefixes in (("passes", CONTROL_PASSES), ("grpo-only", GRPO_ONLY), ("refused", tuple(REFUSED)))
        for p in prefixes
        if key == p or key.startswith(p + ".")
    ]
    if not found:
        raise KeyError(f"train.{key} is not placed in demo.py's CONTROL_PASSES, GRPO_ONLY or REFUSED")
    return max(found)[1]


# The demo's GRPO recipe, where it differs from `veriloop train`'s defaults: what fits the three trainings (side by
# side) and four evaluations in five minutes on 2 CPU cores; chosen on the validation split
# (docs/getting-started/demo.md).  kl.beta 0 (as DAPO and Dr. GRPO): no reference pass, and the groups whose
# completions all scored the same (advantage 0 for every one) carry no gradient, so the update skips them - it
# costs a quarter of the KL-anchored one's; one pass per batch at a higher, warmed-up and decaying learning rate.
DEMO_TRAIN = {
    "steps": 140,
    "kl.beta": 0.0,
    "update.inner_updates": 1,
    "optim.lr": 3e-4,
    "optim.warmup_steps": 10,
    "optim.schedule": "cosine",
}


def demo_train() -> TrainConfig:
    """``veriloop train``'s defaults with ``DEMO_TRAIN``: the demo's GRPO runs unless an option says otherwise."""
    return build_config(TrainConfig, {}, DEMO_TRAIN)


@dataclass
class DemoConfig:
    """``veriloop demo``: base -> GRPO -> evaluation, with optional process-reward run."""

    run_dir: str = field(
        default="runs/demo",
        metadata={
            "help": "demo directory: an unfinished demo of this configuration there (or at D-2, D-3, ...) is "
            "continued; else a new one is numbered if it exists"
        },
    )
    process_run: bool = field(default=True, metadata={"help": "also train from the same base with the process reward"})
    process_verifier: str = field(default="arithmetic-process", metadata={"help": "reward of the process run"})
    sft_control: bool = field(
        default=True, metadata={"help": "also continue SFT from the base for the GRPO run's wall time"}
    )
    sft_lr: float = field(default=2e-4, metadata={"help": "learning rate of the continued-SFT control"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    side_by_side: bool = field(
        default=True,
        metadata={
            "help": "train the GRPO run, the SFT control and the process run at once, one process each with "
            "an equal share of the threads (the control stops when the GRPO run has finished); false = one "
            "after the other, the control for the GRPO run's wall time"
        },
    )
    train: TrainConfig = field(default_factory=demo_train)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        default = TrainConfig()
        for key, why in REFUSED.items():
            if getattr(self.train, key) != getattr(default, key):
                raise ValueError(f"train.{key} ({getattr(self.train, key)!r}) is not used by the demo: {why}")
        check_declared(self)


declare(
    DemoConfig,
    [
        toggled(
            "process-reward run",
            "process_run",
            ("process_verifier",),
            lambda cfg: cfg.process_run,
            "process_run true",
            "process_run false",
            {"process_run": True},
            {"process_run": False},
        ),
        toggled(
            "SFT control",
            "sft_control",
            ("sft_lr",),
            lambda cfg: cfg.sft_control,
            "sft_control true",
            "sft_control false",
            {"sft_control": True},
            {"sft_control": False},
        ),
    ],
    ("run_dir", "process_run", "sft_control", "threads", "side_by_side", "train", "eval"),
)


def set_options(train: TrainConfig, defaults: dict | None = None) -> dict:
    """The train.* options (dotted) whose values differ from ``defaults`` (dotted; by default those of the recipe
    ``train.algo``)."""
    defaults = {
        **(TrainConfig.recipe_defaults(train.algo) if defaults is None else defaults),
        "verifier": train.task.reward_verifier(),
    }  # '' resolved
    return {k: v for k, v in flatten(to_dict(train)).items() if v != defaults.get(k) and k != "run_dir"}


def demo_set_options(train: TrainConfig) -> dict:
    """The train.* options a user set: those whose values differ from the demo's defaults (``DEMO_TRAIN`` over the
    recipe ``train.algo``'s)."""
    return set_options(train, flatten(to_dict(build_config(TrainConfig, {}, {**DEMO_TRAIN, "algo": train.algo}))))


def control_config(cfg: DemoConfig, run_dir: Path, seconds: float) -> TrainConfig:
    """The SFT control: the sft recipe from the same base for ``seconds`` of wall time (0: until the demo stops it),
    with every train.* option set that means the same in SFT (``control_reach``)."""
    own = {
        "algo": "sft",
        "policy": cfg.train.policy,
        "run_dir": str(run_dir),
        "seed": cfg.train.seed,
        "steps": 10**7,
        "max_minutes": seconds / 60,
        "save_rollouts": False,
        "checkpoint_every": 10**7,
        "optim.lr": cfg.sft_lr,
        "optim.weight_decay": 0.01,
    }
    passed = {k: v for k, v in demo_set_options(cfg.train).items() if control_reach(k) == "passes"}
    return build_config(TrainConfig, {"task": to_dict(cfg.train.task)}, {**own, **passed})


def _control_note(cfg: DemoConfig) -> str:
    unused = [k for k in demo_set_options(cfg.train) if control_reach(k) == "grpo-only"]
    if not cfg.sft_control or not unused:
        return ""
    return (
        f"the SFT control does not use {', '.join('train.' + k for k in unused)}: settings of the GRPO runs "
        "(the control trains on the task's traces with --sft_lr for the GRPO run's wall time)"
    )


# ---------------------------------------------------------------------------------------------------- directory

STATE, CONFIG = "demo.json", "demo.yaml"


def _family(requested: Path) -> list[Path]:
    """``requested`` and its numbered siblings ``NAME-2``, ``NAME-3``, ... up to the first that does not exist."""
    found, i = [requested], 2
    while found[-1].exists():
        found.append(requested.with_name(f"{requested.name}-{i}"))
        i += 1
    return found


def _read(out: Path, name: str):
    remedy = f"it records the demo's progress; remove {out} (or choose another --run_dir) to start a new demo"
    data, _ = read_checked(out, name, remedy)
    return json.loads(data) if name.endswith(".json") else data


def _unfinished(out: Path, config: dict) -> dict | None:
    """The state of an unfinished demo of ``config`` in ``out`` (options in CONTINUE_MAY_CHANGE aside)."""
    if not (out / STATE).is_file() or not (out / CONFIG).is_file():
        return None
    state = _read(out, STATE)
    if state.get("finished"):
        return None
    changed = config_changes(yaml.safe_load(_read(out, CONFIG)), config)
    return state if all(k in CONTINUE_MAY_CHANGE for k in changed) else None


def open_demo_dir(cfg: DemoConfig) -> tuple[Path, dict]:
    """Where this demo runs, and its state: the latest unfinished demo of this configuration in ``run_dir``'s
    family, continued; else ``run_dir`` if it is missing or empty, else the first free ``run_dir-N``."""
    family = _family(Path(cfg.run_dir))
    for out in reversed(family[:-1]):
        state = _unfinished(out, to_dict(cfg))
        if state is not None:
            break
    else:
        first = family[0]
        out = first if not first.exists() or not any(first.iterdir()) else family[-1]
        out.mkdir(parents=True, exist_ok=True)
        state = {"finished": False, "seconds": 0.0, "phases": {}}
    write_checked(out, CONFIG, config_bytes(to_dict(dataclasses.replace(cfg, run_dir=str(out)))))
    write_checked(out, STATE, json.dumps(state, indent=2).encode("utf-8"))
    return out, state


# ---------------------------------------------------------------------------------------------------- the phases


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


class _Demo:
    """The phases of one demo directory: each runs once, its result and wall seconds recorded in demo.json."""

    def __init__(self, cfg: DemoConfig, out: Path, state: dict, progress: bool):
        self.cfg, self.out, self.state, self.progress = cfg, out, state, progress
        self.current, self.started = "its start", time.time()
        self.task = cfg.train.task.build()
        self.problems, self.verifiers = self.task.heldout(), cfg.train.task.eval_verifiers()

    def save(self) -> None:
        write_checked(self.out, STATE, json.dumps(self.state, indent=2).encode("utf-8"))

    def stopped(self) -> None:
        """Add this attempt's wall time to the demo's, so that a continued demo's totals count every attempt."""
        self.state["seconds"] = round(self.state["seconds"] + time.time() - self.started, 1)
        self.save()

    def phase(self, name: str, work) -> dict:
        """The phase's recorded result if it is done; else ``work()``'s, recorded with its seconds (those of an
        attempt that was stopped included)."""
        entry = self.state["phases"].setdefault(name, {"done": False, "seconds": 0.0})
        if entry["done"]:
            return entry
        self.current, t0 = name, time.time()
        try:
            result = work(entry["seconds"])
        except BaseException:
            entry["seconds"] = round(entry["seconds"] + time.time() - t0, 1)
            raise
        entry.update(result, done=True, seconds=round(entry["seconds"] + time.time() - t0, 1))
        self.save()
        return entry

    def evaluate(self, model: str) -> dict:
        return evaluate(load_policy(model), self.problems, self.verifiers, self.cfg.eval).as_dict()

    def train(self, run_cfg: TrainConfig) -> dict:
        run_dir = Path(run_cfg.run_dir)
        train_or_stop(Trainer(run_cfg, resume=(run_dir / "config.yaml").is_file(), progress=self.progress))
        write_report(run_dir)
        return {"model": str(run_dir / "final")}

    def grpo(self, name: str, verifier: str) -> dict:
        run_cfg = dataclasses.replace(self.cfg.train, run_dir=str(self.out / name), verifier=verifier)
        return self.phase(f"train {name}", lambda _: self.train(run_cfg))

    def run_config(self, name: str, threads: int) -> TrainConfig:
        """The training ``name`` (grpo, grpo-process, sft-control) of the side-by-side phase."""
        if name == "sft-control":
            return dataclasses.replace(control_config(self.cfg, self.out / name, 0.0), threads=threads)
        verifier = self.cfg.process_verifier if name == "grpo-process" else self.cfg.train.verifier
        return dataclasses.replace(self.cfg.train, run_dir=str(self.out / name), verifier=verifier, threads=threads)

    def side_by_side(self, names: list[str]) -> dict:
        """Train ``names`` at once, one spawned process each with an equal share of the threads; the SFT control
        trains until the GRPO run has finished (the same wall time on the same share of the machine: the control
        of equal compute).  Each run's model, steps, wall and CPU seconds, by name."""
        phase = "train " + ", ".join(names)
        threads = max(1, (self.cfg.threads or torch.get_num_threads()) // len(names))
        control = "; the SFT control stops when the GRPO run has finished" if "sft-control" in names else ""
        self.say(
            phase,
            f"training {', '.join(names)} side by side (a process each, {threads} thread"
            f"{'s' if threads > 1 else ''}){control} ...",
        )
        return self.phase(phase, lambda _: {"runs": self._side_by_side(phase, names, threads)})["runs"]

    def _side_by_side(self, phase: str, names: list[str], threads: int) -> dict:
        runs = self.state["phases"][phase].setdefault("runs", {})  # saved with the demo's state if it stops
        configs = {name: self.run_config(name, threads) for name in names}
        return train_side_by_side(runs, configs, threads, self.cfg.train.steps, self.progress)

    def evaluated(self, name: str, model: str) -> EvalResult:
        return EvalResult(**self.phase(f"evaluate {name}", lambda _: {"result": self.evaluate(model)})["result"])

    def say(self, phase: str, line: str) -> None:
        """``line``, unless ``phase`` was done by an earlier attempt."""
        if not self.state["phases"].get(phase, {}).get("done"):
            print(line, flush=True)  # the demo's story, on stdout; its log (demo.log) keeps a copy
            log.info(line, extra=logs.FILE_ONLY)

    def run(self) -> dict:
        cfg, phases = self.cfg, self.state["phases"]
        again = " (continued: the phases done are not redone)" if any(e["done"] for e in phases.values()) else ""
        print(f"demo directory: {self.out}{again}")
        log.info(f"demo directory: {self.out}{again}", extra={**logs.FILE_ONLY, **logs.run_dir_extra(self.out)})
        note = _control_note(cfg)
        if note:
            log.warning(note)
        self.say(
            "evaluate base and teacher",
            f"evaluating the base ({cfg.train.policy}) on {len(self.problems)} held-out problems ...",
        )
        first = self.phase(
            "evaluate base and teacher",
            lambda _: {
                "result": self.evaluate(cfg.train.policy),
                "teacher": evaluate_teacher(self.task, self.problems, self.verifiers),
            },
        )
        results, teacher = {"base": EvalResult(**first["result"])}, first["teacher"]
        names = ["grpo"] + ["sft-control"] * cfg.sft_control + ["grpo-process"] * cfg.process_run
        if cfg.side_by_side and len(names) > 1:
            self.say("train " + ", ".join(names), f"base greedy accuracy {results['base'].greedy_accuracy:.3f}")
            runs = self.side_by_side(names)
            for name in names:
                results[name] = self.evaluated(name, runs[name]["model"])
            summary_extra = {
                "side_by_side": True,
                **{f"{n.replace('-', '_')}_cpu_seconds": runs[n]["cpu_seconds"] for n in names},
            }
            return self.finish(results, teacher, runs["grpo"]["seconds"], summary_extra)
        self.say(
            "train grpo",
            f"base greedy accuracy {results['base'].greedy_accuracy:.3f}; training with GRPO "
            f"({cfg.train.verifier} reward) ...",
        )
        grpo = self.grpo("grpo", cfg.train.verifier)
        results["grpo"] = self.evaluated("grpo", grpo["model"])
        if cfg.sft_control:
            self.say(
                "train sft-control",
                f"continuing SFT from the same base for {grpo['seconds'] / 60:.1f} minutes (the control) ...",
            )
            # a control stopped part way trains for what is left of that time (a step at least) when continued
            control = self.phase(
                "train sft-control",
                lambda spent: self.train(
                    control_config(cfg, self.out / "sft-control", max(grpo["seconds"] - spent, 1.0))
                ),
            )
            results["sft-control"] = self.evaluated("sft-control", control["model"])
        if cfg.process_run:
            self.say("train grpo-process", f"training from the same base with the {cfg.process_verifier} reward ...")
            process = self.grpo("grpo-process", cfg.process_verifier)
            results["grpo-process"] = self.evaluated("grpo-process", process["model"])
        return self.finish(results, teacher, grpo["seconds"], {"side_by_side": False})

    def finish(self, results: dict, teacher: dict, train_seconds: float, extra: dict) -> dict:
        """The table, summary.json, eval.json, the report; the demo marked finished."""
        cfg, phases = self.cfg, self.state["phases"]
        self.current = "the summary"
        print()
        table = _print_table({name: _row(r) for name, r in results.items()}, teacher)
        total = self.state["seconds"] + time.time() - self.started
        summary = _summary(cfg, results, teacher, train_seconds, total, len(self.problems), self.out)
        summary.update(extra)
        summary["phase_seconds"] = {name: e["seconds"] for name, e in phases.items()}
        atomic_write_json(self.out / "summary.json", summary)
        atomic_write_json(self.out / "eval.json", {"teacher": teacher, **{k: r.as_dict() for k, r in results.items()}})
        atomic_write_text(self.out / "table.txt", table + "\n")
        write_report(self.out)
        self.state.update(finished=True, seconds=summary["total_seconds"])
        self.save()
        line = "; ".join(f"{name} {s:.0f} s" for name, s in summary["phase_seconds"].items())
        print(f"\nwall time {summary['total_seconds'] / 60:.1f} min: {line}")
        log.info(f"wall time {summary['total_seconds'] / 60:.1f} min: {line}", extra=logs.FILE_ONLY)
        print(f"summary: {self.out / 'summary.json'}; report: {self.out / 'report.html'}")
        return summary


def run_demo(cfg: DemoConfig, progress: bool = True) -> dict:
    """Run (or continue) the demo; stopped by SIGTERM or Ctrl-C it says where and how to continue, exits 143 / 130."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    demo = None
    try:
        with stop_on_signals():
            demo = _Demo(cfg, *open_demo_dir(cfg), progress)
            return demo.run()
    except (Stopped, KeyboardInterrupt) as e:
        if demo is None:  # stopped while it started: nothing was done
            raise stop_exit("veriloop demo", "its start", e) from None
        demo.stopped()
        raise stop_exit("veriloop demo", demo.current, e, f"veriloop demo --config {demo.out / CONFIG}") from None


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
