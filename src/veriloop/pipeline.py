"""``veriloop pipeline``: the DeepSeek-R1 multi-stage recipe (seed 003, section 6), each stage a run directory.

``variant r1`` (five stages):

1. ``cold_start``: SFT from the base on a small set of readable, correct reasoning traces (the
   task's teacher; on the built-in task with its slips off).
2. ``rl``: GRPO from the cold start on the task's reward (the built-in ``arithmetic``: 0.8 x
   correctness + 0.2 x format).  A language-consistency reward needs a task with a language to be
   consistent in; the built-in task and GSM8K have none, so it is not part of this recipe.
3. ``rejection_sample``: ``rs_samples`` samples per problem on ``rs_problems`` training problems
   from the RL checkpoint; kept when the task's outcome verifier accepts the answer and its format
   verifier (the readability filter) the text, deduplicated per problem; ``mix_data`` (JSONL rows
   with ``prompt``, ``reference``, ``completion``) is mixed in as the non-reasoning share where a
   task has such data (the built-in task has none).  Written once to ``rejection_sample/data.jsonl``
   with every row's provenance.
4. ``sft_from_base``: SFT **from the base** (not the RL weights: the seed insists) on that dataset.
5. ``rl_again``: GRPO from that SFT model.

``variant r1-zero``: ``rl`` from the base, no cold start (``rl_steps``).  ``variant rl-long``: one
GRPO run from the base for ``max_minutes`` of wall time (the control of equal compute).

After every stage its final model is evaluated greedily on ``eval_problems`` held-out problems
(accuracy, right-answer-wrong-steps rate); ``pipeline.json`` records each stage's status, model and
numbers, and ``table.md`` the table.  Run the same command again and the pipeline resumes: finished
stages are skipped, a stage trained but not yet evaluated is only evaluated, an interrupted training
stage resumes from its last checkpoint (one killed before its first checkpoint is moved aside to
``<stage>.incomplete-N`` and started over).  A different configuration in the same directory is
refused, naming each option that differs.  SIGTERM or Ctrl-C at any stage stops it cleanly (a
training stage after writing its checkpoint) with one line saying where and how to continue, exit
status 143 / 130.  ``pipeline.json`` and ``pipeline.yaml`` (the config, for ``--config``) are checked
against the directory's ``manifest.json`` when read back.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from veriloop.config import build_config, check_typed, to_dict
from veriloop.demo import control_reach, set_options
from veriloop.errors import InputError
from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, read_checked, write_checked
from veriloop.models.loading import load_policy
from veriloop.models.solutions import sample_solutions
from veriloop.options import OptionScope, check_declared, declare
from veriloop.report.report import write_report
from veriloop.rollout.sampler import SamplingParams
from veriloop.seeding import derive_seed
from veriloop.tasks.base import draw_problems
from veriloop.tasks.jsonl import jsonl_objects
from veriloop.training.config import TrainConfig
from veriloop.training.run.checkpoint import config_bytes, find_latest_checkpoint
from veriloop.training.run.compute import pipeline_compute
from veriloop.training.run.run_dir import config_changes
from veriloop.training.trainer import Stopped, Trainer, stop_exit, stop_on_signals, train_or_stop
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct
from veriloop.verifiers.tools import tool_settings

log = logging.getLogger(__name__)

Variant = Literal["r1", "r1-zero", "rl-long"]
VARIANTS: dict[Variant, tuple[str, ...]] = {
    "r1": ("cold_start", "rl", "rejection_sample", "sft_from_base", "rl_again"),
    "r1-zero": ("rl",),
    "rl-long": ("rl",),
}
READABLE_TEACHER = {"multiplication_slip": 0.0, "subtraction_slip": 0.0}  # the built-in task's cold-start traces


@dataclass
class PipelineConfig:
    """``veriloop pipeline``: cold start -> RL -> rejection sampling -> SFT from the base -> RL (or R1-Zero)."""

    run_dir: str = field(default="runs/r1", metadata={"help": "pipeline directory: one run directory per stage"})
    variant: Variant = field(
        default="r1",
        metadata={
            "help": "r1 (cold start, RL, rejection sampling, SFT from the base, RL), r1-zero (RL from the base), "
            "or rl-long (one RL run: equal-time control)"
        },
    )
    base: str = field(default="builtin:base", metadata={"help": "the base model every SFT stage starts from"})
    seed: int = field(default=0, metadata={"help": "seed of every stage"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    cold_start_steps: int = field(default=60, metadata={"help": "cold_start: SFT steps on readable traces", "ge": 1})
    rl_steps: int = field(default=60, metadata={"help": "rl: GRPO steps", "ge": 1})
    rs_problems: int = field(default=1024, metadata={"help": "rejection_sample: training problems", "ge": 1})
    rs_samples: int = field(default=4, metadata={"help": "rejection_sample: samples per problem", "ge": 1})
    mix_data: str = field(default="", metadata={"help": "rejection_sample: non-reasoning JSONL rows to mix in"})
    sft_steps: int = field(
        default=60, metadata={"help": "sft_from_base: SFT steps on the rejection-sampled data", "ge": 1}
    )
    rl_again_steps: int = field(default=60, metadata={"help": "rl_again: GRPO steps", "ge": 1})
    max_minutes: float = field(default=0.0, metadata={"help": "rl-long: wall time of its one RL run (minutes)"})
    sft_lr: float = field(default=2e-4, metadata={"help": "learning rate of the SFT stages"})
    eval_problems: int = field(default=200, metadata={"help": "held-out problems evaluated after each stage", "ge": 1})
    rl: TrainConfig = field(default_factory=TrainConfig, metadata={"help": "GRPO settings of the RL stages"})
    rl_again: TrainConfig = field(
        default_factory=TrainConfig,
        metadata={
            "help": "rl_again's own settings over rl.*'s (all-scenario RL: its task and data mix, reward_sources, "
            "reward_model); an option set here replaces rl's for that stage alone"
        },
    )

    def __post_init__(self):
        check_typed(self)
        self.rl.task.refuse_tools("veriloop pipeline (its rejection sampling)")
        if self.variant == "rl-long" and self.max_minutes <= 0:
            raise InputError("variant rl-long needs --max_minutes (the wall time of the pipeline it is compared with)")
        for name, section in (("rl", self.rl), ("rl_again", self.rl_again)):
            if section.run_dir != TrainConfig().run_dir or section.policy != TrainConfig().policy:
                raise InputError(
                    f"{name}.run_dir and {name}.policy are set by the pipeline (--run_dir, --base); leave them"
                )
        if set_options(self.rl_again):
            if "rl_again" not in VARIANTS[self.variant]:
                changed = ", ".join(f"rl_again.{k}" for k in set_options(self.rl_again))
                raise InputError(f"{changed}: variant {self.variant} has no rl_again stage (variant r1 has)")
            final_rl_config(self, self.base, self.rl_again_steps)  # its errors now, not after four stages
        check_declared(self)


# What each variant reads of the pipeline's own options (rl.* is TrainConfig's and checks itself).
_R1_OPTIONS = (
    "cold_start_steps",
    "rl_steps",
    "rs_problems",
    "rs_samples",
    "mix_data",
    "sft_steps",
    "rl_again_steps",
    "sft_lr",
)
VARIANT_SCOPE = OptionScope(
    "pipeline variant",
    "variant",
    (*_R1_OPTIONS, "max_minutes"),
    {"r1": _R1_OPTIONS, "r1-zero": ("rl_steps",), "rl-long": ("max_minutes",)},
)
# rl_again.* is a TrainConfig of its own (checked in __post_init__: only variant r1 has that stage)
declare(
    PipelineConfig,
    [VARIANT_SCOPE],
    ("run_dir", "variant", "base", "seed", "threads", "eval_problems", "rl", "rl_again"),
)


def options_for(variant: str, options: dict) -> dict:
    """``options`` without the variant options ``variant`` does not read (one file of options for every variant:
    ``benchmarks/r1_pipeline.py``); the others are the variant's to refuse or take."""
    scope = VARIANT_SCOPE
    return {k: v for k, v in options.items() if k not in scope.options or scope.reads_option(variant, k)}


STATE, CONFIG = "pipeline.json", "pipeline.yaml"


def run_pipeline(cfg: PipelineConfig, progress: bool = True) -> dict:
    """Run (or resume) the pipeline; stopped by SIGTERM or Ctrl-C it says where and how to continue, and raises
    SystemExit(143 / 130) with every stage done (and a stopped training's checkpoint) saved."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    root, stage = Path(cfg.run_dir), "its start"
    try:
        with stop_on_signals():
            state = _open(root, cfg)
            task = cfg.rl.task.build()
            for stage in VARIANTS[cfg.variant]:
                _run_stage(cfg, root, state, stage, task, progress)
            stages = {p.name: json.loads((p / "compute.json").read_text()) for p in sorted(root.iterdir())
                      if (p / "compute.json").is_file()}  # fmt: skip
            atomic_write_json(root / "compute.json", pipeline_compute(stages))  # the stages' ledgers and their sums
            write_report(root)  # the pipeline's page: its table and a link to each stage's run browser
    except (Stopped, KeyboardInterrupt) as e:
        again = f"veriloop pipeline --config {root / CONFIG}" if (root / CONFIG).is_file() else ""
        raise stop_exit("veriloop pipeline", stage, e, again) from None
    return state


def _run_stage(cfg: PipelineConfig, root: Path, state: dict, stage: str, task, progress: bool) -> None:
    """One stage: its work (training, or rejection sampling) recorded as ``trained`` with its model, then its
    evaluation as ``done``; a stage recorded as either is not redone.  A stopped stage's seconds are kept."""
    entry = state["stages"].setdefault(stage, {"status": "pending"})
    if entry["status"] == "done":
        return
    if entry["status"] != "trained":
        t0 = time.time()
        try:
            model = STAGES[stage](cfg, root, state, progress)
            entry.update(status="trained", model=None if model is None else str(model))
        finally:  # seconds: the stage's own work, every attempt's
            entry["seconds"] = round(entry.get("seconds", 0.0) + time.time() - t0, 1)
            _save(root, state)
    if entry.get("model") is not None:
        entry["heldout"] = _evaluate(cfg, task, Path(entry["model"]))
    entry["status"] = "done"
    _save(root, state)


def _save(root: Path, state: dict) -> None:
    write_checked(root, STATE, json.dumps(state, indent=2).encode("utf-8"))
    atomic_write_text(root / "table.md", pipeline_table(state))


def _open(root: Path, cfg: PipelineConfig) -> dict:
    """The pipeline's state: a new one, or the one in ``root`` if it was started with this configuration."""
    config = to_dict(cfg)
    if (root / STATE).is_file():
        data, _ = read_checked(
            root,
            STATE,
            "it records which stages are done; restore it, or start the pipeline again with another --run_dir",
        )
        state = json.loads(data)
        changed = config_changes(state["config"], config)
        if changed:
            differ = "; ".join(f"{k} {o!r} -> {n!r}" for k, (o, n) in changed.items())
            raise InputError(
                f"{str(root)!r} holds a pipeline with another configuration ({differ}); run it with "
                "its own configuration to resume, or choose another --run_dir"
            )
        if not (root / CONFIG).is_file():  # started by a veriloop before pipeline.yaml
            write_checked(root, CONFIG, config_bytes(config))
        return state
    if root.exists() and any(root.iterdir()):
        raise InputError(f"{str(root)!r} is not empty and holds no {STATE}; choose another --run_dir")
    root.mkdir(parents=True, exist_ok=True)
    state = {"config": config, "stages": {}}
    write_checked(root, CONFIG, config_bytes(config))  # `veriloop pipeline --config` it to continue
    write_checked(root, STATE, json.dumps(state, indent=2).encode("utf-8"))
    return state


def _train(root: Path, stage: str, cfg: TrainConfig, progress: bool) -> Path:
    """One training stage in ``root/stage``: resumed from its last checkpoint if it has one."""
    run_dir = root / stage
    if run_dir.exists() and find_latest_checkpoint(run_dir) is None:
        n = 1
        while (root / f"{stage}.incomplete-{n}").exists():
            n += 1
        run_dir.rename(root / f"{stage}.incomplete-{n}")  # nothing to resume from: kept aside, started over
        log.warning(f"{stage}: no checkpoint to resume from; its directory is kept as {stage}.incomplete-{n}")
    resume = run_dir.exists()
    # preempted: the stage's checkpoint is written, and Stopped raised: it has no final model to go on from
    train_or_stop(Trainer(dataclasses.replace(cfg, run_dir=str(run_dir)), resume=resume, progress=progress))
    write_report(run_dir)
    return run_dir / "final"


def _sft(cfg: PipelineConfig, steps: int, task: dict) -> TrainConfig:
    """An SFT stage from the base, with the rl.* options that mean the same in SFT (the model's dtype and device,
    adapters, how the update is split: ``demo.control_reach``) but those the stage sets itself."""
    data = {
        "algo": "sft",
        "policy": cfg.base,
        "seed": cfg.seed,
        "steps": steps,
        "task": task,
        "checkpoint_every": max(1, steps // 4),
        "save_rollouts": False,
        "optim": {"lr": cfg.sft_lr, "weight_decay": 0.01},
    }
    own = ("policy", "seed", "task", "checkpoint_every", "optim.lr", "optim.weight_decay")
    carried = {
        k: v
        for k, v in set_options(cfg.rl).items()
        if control_reach(k) == "passes" and not any(k == o or k.startswith(o + ".") for o in own)
    }
    return build_config(TrainConfig, data, carried)


def _rl(cfg: PipelineConfig, policy: str, steps: int, max_minutes: float = 0.0) -> TrainConfig:
    return dataclasses.replace(
        cfg.rl,
        policy=policy,
        seed=cfg.seed,
        steps=steps,
        max_minutes=max_minutes,
        checkpoint_every=max(1, min(cfg.rl.checkpoint_every, steps // 4)),
    )


def _cold_start(cfg: PipelineConfig, root: Path, state: dict, progress: bool) -> Path:
    task = to_dict(cfg.rl.task)
    if task["name"] == "arithmetic":
        task["teacher"] = {**task["teacher"], **READABLE_TEACHER}
    return _train(root, "cold_start", _sft(cfg, cfg.cold_start_steps, task), progress)


def _first_rl(cfg: PipelineConfig, root: Path, state: dict, progress: bool) -> Path:
    if cfg.variant == "r1":
        return _train(root, "rl", _rl(cfg, state["stages"]["cold_start"]["model"], cfg.rl_steps), progress)
    if cfg.variant == "rl-long":
        return _train(root, "rl", _rl(cfg, cfg.base, 10**9, cfg.max_minutes), progress)
    return _train(root, "rl", _rl(cfg, cfg.base, cfg.rl_steps), progress)


def _rejection_sample(cfg: PipelineConfig, root: Path, state: dict, progress: bool) -> None:
    """Sample from the RL model, keep verified and readable solutions once per problem, write the dataset."""
    source = state["stages"]["rl"]["model"]
    policy, task = load_policy(source), cfg.rl.task.build()
    roles = task_verifiers(cfg)
    problems = draw_problems(task, "train", cfg.rs_problems, derive_seed(cfg.seed, "rejection_sample"))
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "rejection_sample", "samples"))
    params = SamplingParams(temperature=cfg.rl.sampling.temperature, max_new_tokens=cfg.rl.sampling.max_new_tokens)
    rows, counts = [], {"sampled": 0, "correct": 0, "readable": 0, "kept": 0}
    for chunk, texts, finishes in sample_solutions(policy, problems, params, gen, cfg.rs_samples, batch=64):
        refs = [chunk[j // cfg.rs_samples].reference for j in range(len(texts))]
        verdicts = {role: v.verify_batch(texts, refs) for role, v in roles.items()}
        seen: set[tuple[str, str]] = set()
        for j, text in enumerate(texts):
            p = chunk[j // cfg.rs_samples]
            ok = is_correct(verdicts["outcome"][j]) and finishes[j] == "eos"
            readable = "format" not in verdicts or is_correct(verdicts["format"][j])
            counts["sampled"] += 1
            counts["correct"] += ok
            counts["readable"] += ok and readable
            if ok and readable and (p.id, text) not in seen:
                seen.add((p.id, text))
                rows.append(
                    {
                        "prompt": p.prompt,
                        "reference": p.reference,
                        "completion": text,
                        "id": f"{p.id}-{j}",
                        "provenance": {
                            "source": "rejection_sample",
                            "policy": source,
                            "problem_id": p.id,
                            "seed": cfg.seed,
                            "sampling": params.as_dict(),
                            "verifiers": {r: v.tag for r, v in roles.items()},
                        },
                    }
                )
    counts["kept"] = len(rows)
    mixed = _mix_rows(cfg.mix_data)
    if not rows:
        raise InputError("rejection sampling kept nothing: the RL model solved none of the problems readably")
    out = root / "rejection_sample"
    atomic_write_jsonl(out / "data.jsonl", rows + mixed)
    atomic_write_jsonl(
        out / "heldout.jsonl", [{"prompt": p.prompt, "reference": p.reference} for p in task.heldout()[:64]]
    )
    state["stages"]["rejection_sample"].update(counts=counts, mixed=len(mixed), data=str(out / "data.jsonl"))
    return None


def task_verifiers(cfg: PipelineConfig) -> dict:
    """The filters of rejection sampling: the task's outcome verifier and, where it has one, its format one."""
    names = cfg.rl.task.eval_verifiers()
    return {role: get_verifier(names[role]) for role in ("outcome", "format") if names.get(role)}


def _mix_rows(path: str) -> list[dict]:
    if not path:
        return []
    rows = []
    for where, _, row in jsonl_objects(path, "mix_data file"):
        for key in ("prompt", "reference", "completion"):
            if not isinstance(row.get(key), str):
                raise InputError(f"{where}: mix_data rows need a string {key!r}")
        rows.append({**row, "provenance": {"source": "mix_data", "file": path}})
    return rows


def _sft_from_base(cfg: PipelineConfig, root: Path, state: dict, progress: bool) -> Path:
    data = state["stages"]["rejection_sample"]["data"]
    task = {
        "name": "jsonl",
        "data": data,
        "heldout_data": str(Path(data).with_name("heldout.jsonl")),
        "verifier": cfg.rl.task.build().default_verifier,
    }
    return _train(root, "sft_from_base", _sft(cfg, cfg.sft_steps, task), progress)


def final_rl_config(cfg: PipelineConfig, policy: str, steps: int) -> TrainConfig:
    """The last RL stage's settings: rl.*'s, with every option set under rl_again.* in their place (seed 003 s.6
    stage 4: the final RL stage over all scenarios, with its own data mix and reward configuration)."""
    base = _rl(cfg, policy, steps)
    own = set_options(cfg.rl_again)
    if not own:
        return base
    data = to_dict(base)
    if data["verifier"] == cfg.rl.task.reward_verifier():  # rl's was its task's: resolve again for this stage's task
        data["verifier"] = ""
    try:
        return build_config(TrainConfig, data, own)
    except (InputError, ValueError) as e:
        raise InputError(f"rl_again.*: {e}") from None


def _rl_again(cfg: PipelineConfig, root: Path, state: dict, progress: bool) -> Path:
    policy = state["stages"]["sft_from_base"]["model"]
    return _train(root, "rl_again", final_rl_config(cfg, policy, cfg.rl_again_steps), progress)


def dry_run(cfg: PipelineConfig) -> str:
    """``veriloop pipeline --dry-run``: each stage of the variant with what it would do (``training.dry_run``), the
    base standing in for the models earlier stages would make (the same shapes) and the task's own data for the
    rejection-sampled set that does not exist yet; nothing runs and no directory is made."""
    from veriloop.training.dry_run import plan

    task = to_dict(cfg.rl.task)
    rl_steps, minutes = (10**9, cfg.max_minutes) if cfg.variant == "rl-long" else (cfg.rl_steps, 0.0)
    trainings = {
        "cold_start": _sft(cfg, cfg.cold_start_steps, task),
        "rl": _rl(cfg, cfg.base, rl_steps, minutes),
        "sft_from_base": _sft(cfg, cfg.sft_steps, task),
        "rl_again": final_rl_config(cfg, cfg.base, cfg.rl_again_steps),
    }
    lines = [f"veriloop pipeline --dry-run, variant {cfg.variant}: nothing is sampled or trained, no directory is made"]
    for stage in VARIANTS[cfg.variant]:
        if stage == "rejection_sample":
            n, new = cfg.rs_problems * cfg.rs_samples, cfg.rl.sampling.max_new_tokens
            lines += [
                "",
                f"{stage}: {cfg.rs_problems} training problems x {cfg.rs_samples} samples = {n} "
                f"completions of up to {new} new tokens from the rl stage's model, verified; kept once per "
                "problem",
            ]
            continue
        train = trainings[stage]
        budget = f"{minutes} minutes" if stage == "rl" and minutes else f"{train.steps} steps"
        rows = plan(train)
        width = max(len(k) for k, _ in rows)
        lines += ["", f"{stage}: {train.algo}, {budget}"] + [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


STAGES = {
    "cold_start": _cold_start,
    "rl": _first_rl,
    "rejection_sample": _rejection_sample,
    "sft_from_base": _sft_from_base,
    "rl_again": _rl_again,
}


def _evaluate(cfg: PipelineConfig, task, model: Path) -> dict:
    problems = task.heldout()[: cfg.eval_problems]
    r = evaluate(
        load_policy(str(model)),
        problems,
        cfg.rl.task.eval_verifiers(),
        EvalConfig(n_samples=0),
        tools=tool_settings(
            task,
            cfg.rl.rollout.max_tool_calls,
            cfg.rl.rollout.tool_timeout_s,
            cfg.rl.rollout.tool_interpreter,
        ),
    )
    return {
        "greedy_accuracy": r.greedy_accuracy,
        "wrong_steps_rate": r.wrong_steps_rate,
        "format_rate": r.format_rate,
        "problems": r.num_problems,
    }  # format_rate None: no format check


def pipeline_table(state: dict) -> str:
    lines = [
        "| stage | held-out greedy accuracy | right answer, wrong steps | seconds | notes |",
        "|---|---:|---:|---:|---|",
    ]
    for stage, e in state["stages"].items():
        h = e.get("heldout") or {}
        acc = "" if h.get("greedy_accuracy") is None else f"{h['greedy_accuracy']:.3f}"
        wrong = "" if h.get("wrong_steps_rate") is None else f"{h['wrong_steps_rate']:.3f}"
        c = e.get("counts")
        note = f"{c['kept']} kept of {c['sampled']} sampled ({c['correct']} correct)" if c else ""
        lines.append(f"| {stage} | {acc} | {wrong} | {e.get('seconds', '')} | {note} |")
    return "\n".join(lines) + "\n"
