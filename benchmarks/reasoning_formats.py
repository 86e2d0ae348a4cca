"""Chain of thought, program of thought and tool-integrated reasoning on the built-in task, at equal sampled tokens.

    python benchmarks/reasoning_formats.py [--formats cot,tool] [--seeds 0,1] [--tokens 300000]
                                           [--sft_steps 800] [--sft_every 200] [--work DIR] [--json FILE] [--quick]

Each format starts from a base that writes it:

* ``cot``: the shipped base (``builtin:base``, SFT'd on the teacher's traces);
* ``pot`` / ``tool``: the shipped base SFT'd further on the teacher's programs / tool traces
  (``rollout.source task-teacher``, the shipped base's optimiser settings, ``--sft_steps`` steps; a checkpoint
  every ``--sft_every`` steps).  The checkpoint with the best greedy *validation* accuracy is the base; the
  held-out set is not read to choose it.  The SFT run is kept in ``--work`` and reused when it is there.

Then GRPO (the trainer's defaults, 16 prompts x 8 per step) runs from each base until ``--tokens`` tokens were
sampled (``max_sampled_tokens``: the model's tokens; a tool's output does not count), once per seed, and the
base and the trained policy are evaluated greedily on the held-out set, once each: accuracy, right answer with
wrong steps (``arithmetic-process`` for traces, ``arithmetic-tool-process`` for tool traces; a program has no
step checker), completion tokens, and for ``tool`` the calls per problem and the share that failed.  Rows show
``mean ± sd`` over seeds.  ``--quick``: ``tool`` alone (its SFT base chosen on validation, GRPO, the held-out reads
with tool calls), 2 SFT steps, GRPO steps of 2 prompts x 2 until 100 tokens, 4 validation and 4 held-out problems,
in a scratch ``--work``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.evaluation.evaluate import EvalConfig, evaluate  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402
from veriloop.verifiers.tools import tool_settings  # noqa: E402

VERIFIER = {"cot": "arithmetic-outcome", "pot": "arithmetic-pot", "tool": "arithmetic-tool"}
SFT = {
    "policy": "builtin:base",
    "rollout.prompts_per_step": 128,
    "optim.lr": 2e-3,
    "optim.weight_decay": 0.01,
    "optim.warmup_steps": 50,
    "optim.schedule": "cosine",
}
GRPO = {
    "rollout.prompts_per_step": 16,
    "rollout.group_size": 8,
    "steps": 100_000,
    "checkpoint_every": 100_000,
    "save_rollouts": False,
}
QUICK = {
    "task.arithmetic.validation_size": 4,
    "task.arithmetic.heldout_size": 4,
    "rollout.prompts_per_step": 2,
    "rollout.group_size": 2,
}


def base_of(fmt_name: str, args) -> tuple[str, dict]:
    """(model directory, how it was chosen) of a format's base."""
    if fmt_name == "cot":
        return "builtin:base", {"base": "builtin:base"}
    run_dir = Path(args.work) / f"sft-{fmt_name}"
    cfg = build_config(
        TrainConfig,
        {},
        {
            **SFT,
            "algo": "sft",
            "run_dir": str(run_dir),
            "steps": args.sft_steps,
            "eval_every": args.sft_every,
            "checkpoint_every": args.sft_every,
            "keep_checkpoints": args.sft_steps // args.sft_every + 1,
            "task.reasoning": fmt_name,
            "verifier": VERIFIER[fmt_name],
            "threads": args.threads,
            **args.extra,
        },
    )
    if not (run_dir / "final").is_dir():
        Trainer(cfg, progress=True).train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = {r["step"]: r["validation_greedy_accuracy"] for r in rows if "validation_greedy_accuracy" in r}
    best = max(curve, key=lambda s: (curve[s], s))
    model = run_dir / "final" if best == args.sft_steps else run_dir / "checkpoints" / f"step-{best:06d}" / "model"
    if not model.is_dir():
        raise SystemExit(
            f"{run_dir}: validation chose step {best}, and its checkpoint {model} is not there (an SFT "
            f"run made with checkpoint_every {args.sft_every} keeps it)"
        )
    return str(model), {"base": str(model), "validation_curve": curve, "chosen_step": best}


def heldout(model: str, fmt_name: str, extra: dict) -> dict:
    cfg = build_config(TrainConfig, {}, {"task.reasoning": fmt_name, "verifier": VERIFIER[fmt_name], **extra})
    task = cfg.task.build()
    r = evaluate(
        load_policy(model),
        task.heldout(),
        cfg.task.eval_verifiers(),
        EvalConfig(n_samples=0),
        tools=tool_settings(task),
    )
    return {
        "accuracy": r.greedy_accuracy,
        "wrong_steps": r.wrong_steps_rate,
        "tokens": r.mean_completion_tokens,
        "calls": r.tool_stats.get("calls_per_problem"),
        "failures": r.tool_stats.get("failure_rate"),
    }


def grpo(base: str, fmt_name: str, seed: int, args) -> dict:
    run_dir = Path(args.work) / f"grpo-{fmt_name}-seed{seed}"
    cfg = build_config(
        TrainConfig,
        {},
        {
            **GRPO,
            "run_dir": str(run_dir),
            "policy": base,
            "seed": seed,
            "task.reasoning": fmt_name,
            "verifier": VERIFIER[fmt_name],
            "max_sampled_tokens": args.tokens,
            "threads": args.threads,
            **args.extra,
        },
    )
    t0 = time.time()
    trainer = Trainer(cfg, progress=True)
    trainer.train()
    rows = trainer.metrics.rows
    return {
        "seed": seed,
        "steps": len(rows),
        "sampled_tokens": sum(r["sampled_tokens"] for r in rows),
        "train_seconds": time.time() - t0,
        **heldout(str(run_dir / "final"), fmt_name, args.extra),
    }


def main() -> None:
    silence_hub_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--formats", default="cot,pot,tool")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--tokens", type=int, default=300_000, help="sampled tokens per GRPO run")
    p.add_argument("--sft_steps", type=int, default=800)
    p.add_argument("--sft_every", type=int, default=200)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--work", default="runs/reasoning-formats")
    result_args(p, "reasoning_formats")
    args = p.parse_args()
    args.extra = QUICK if args.quick else {}
    if args.quick:
        args.formats, args.seeds, args.tokens, args.sft_steps, args.sft_every, args.threads = "tool", "0", 100, 2, 1, 1
        args.work = tempfile.mkdtemp(prefix="reasoning-formats-quick-")
    seeds, formats = parse_seeds(args.seeds), [f.strip() for f in args.formats.split(",") if f.strip()]
    if any(f not in VERIFIER for f in formats):
        raise SystemExit(f"--formats: each of {tuple(VERIFIER)}, got {args.formats!r}")
    out = {}
    print(
        f"| format | policy | held-out greedy | right answer, wrong steps | tokens | tool calls / problem | tool "
        f"failures | GRPO steps ({args.tokens:,} sampled tokens) | train s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for f in formats:
        base, chosen = base_of(f, args)
        b = heldout(base, f, args.extra)
        runs = [grpo(base, f, s, args) for s in seeds]
        out[f] = {"base": {**chosen, **b}, "grpo": runs}
        print(
            f"| {f} | base | {fmt([b['accuracy']])} | {fmt([b['wrong_steps']])} | {fmt([b['tokens']], 1)} | "
            f"{fmt([b['calls']], 2)} | {fmt([b['failures']])} | | |"
        )
        cells = [
            fmt([r[k] for r in runs], d)
            for k, d in (
                ("accuracy", 3),
                ("wrong_steps", 3),
                ("tokens", 1),
                ("calls", 2),
                ("failures", 3),
                ("steps", 0),
                ("train_seconds", 0),
            )
        ]
        print(f"| {f} | GRPO | " + " | ".join(cells) + " |", flush=True)
    save(args, "reasoning_formats", {"args": vars(args), "formats": out})
    if args.quick:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
