"""What matters in GRPO on the built-in task: one setting changed at a time, same base and budget.

    python benchmarks/grpo_ablations.py [--steps 200] [--seeds 0] [--only NAME ...] [--json FILE] [--quick]

Each variant trains from the shipped base with the demo's defaults except the named change,
then reports held-out greedy accuracy, the right-answer-wrong-steps rate and wall time
(``mean ± sd`` over ``--seeds`` when several are given).  Takes 4-12 minutes per variant and seed
on two cores at one torch thread.  Skipping flat groups (``update.skip_zero_advantage``) only leaves out rows whose
gradient is exactly 0, so it changes nothing while the KL sits in the loss; at ``kl.beta 0`` it
is a pure saving, which the two ``kl_beta 0`` rows show.  ``--quick``: the process-reward variant alone, one step
of 2 prompts x 2, 8 held-out problems.
"""

from __future__ import annotations

import argparse
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

VARIANTS = {
    "default (outcome reward)": {},
    "process reward": {"verifier": "arithmetic-process"},
    "kl_beta 0.02": {"kl.beta": 0.02},
    "kl_beta 0 (no reference; flat groups skipped)": {"kl.beta": 0.0},
    "kl_beta 0, flat groups kept": {"kl.beta": 0.0, "update.skip_zero_advantage": False},
    "temperature 1.0": {"sampling.temperature": 1.0},
    "sample std": {"advantage.std": "sample"},
    "token-mean aggregation": {"loss.aggregation": "token-mean"},
    "plain: lr 1e-4, T 1.0, no clip, no KL": {
        "optim.lr": 1e-4,
        "sampling.temperature": 1.0,
        "loss.clip_eps_low": 1e6,
        "loss.clip_eps_high": 1e6,
        "kl.beta": 0.0,
    },
}


QUICK = {"rollout.prompts_per_step": 2, "rollout.group_size": 2, "task.arithmetic.heldout_size": 8}


def run(name: str, overrides: dict, steps: int, seed: int, threads: int, extra: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(
            TrainConfig,
            {},
            {
                "run_dir": tmp,
                "steps": steps,
                "save_rollouts": False,
                "seed": seed,
                "threads": threads,
                **(extra or {}),
                **overrides,
            },
        )
        t0 = time.time()
        Trainer(cfg, progress=False).train()
        seconds = time.time() - t0
        task = cfg.task.build()
        policy = load_policy(f"{tmp}/final")
        result = evaluate(policy, task.heldout(), cfg.task.eval_verifiers(), EvalConfig(n_samples=0))
    return {
        "variant": name,
        "seed": seed,
        "greedy_accuracy": result.greedy_accuracy,
        "wrong_steps_rate": result.wrong_steps_rate,
        "mul_accuracy": result.by_tag["mul"]["greedy_accuracy"],
        "clean_accuracy": result.by_tag["clean"]["greedy_accuracy"],
        "train_seconds": seconds,
    }


def main() -> None:
    silence_hub_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seeds", default="0", help="comma-separated run seeds; several give mean ± sd")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    p.add_argument("--only", nargs="*", default=None, help="variant names to run (default: all)")
    result_args(p, "grpo_ablations")
    args = p.parse_args()
    if args.quick:
        args.steps, args.seeds, args.only = 1, "0", args.only or ["process reward"]
    seeds = parse_seeds(args.seeds)
    names = args.only or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    rows = []
    print(
        f"| variant ({args.steps} steps; seeds {args.seeds}) | held-out greedy | right answer, wrong steps | `mul` "
        "| `clean` | train s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        extra = QUICK if args.quick else None
        rs = [run(name, VARIANTS[name], args.steps, seed, args.threads, extra) for seed in seeds]
        rows += rs
        cells = [
            fmt([r[k] for r in rs]) for k in ("greedy_accuracy", "wrong_steps_rate", "mul_accuracy", "clean_accuracy")
        ]
        print(f"| {name} | " + " | ".join(cells) + f" | {fmt([r['train_seconds'] for r in rs], 0)} |", flush=True)
    save(args, "grpo_ablations", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
