"""What matters in GRPO on the built-in task: one setting changed at a time, same base and budget.

    python benchmarks/grpo_ablations.py [--steps 150] [--only NAME ...] [--json FILE]

Each variant trains from the shipped base with the demo's defaults except the named change,
then reports held-out greedy accuracy, the right-answer-wrong-steps rate and wall time.
Takes about 3 minutes per variant on two cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.training.config import build_config
from veriloop.training.run_config import TrainConfig
from veriloop.training.trainer import Trainer

VARIANTS = {
    "default (outcome reward)": {},
    "process reward": {"verifier": "arithmetic-process"},
    "kl_beta 0.02": {"kl.beta": 0.02},
    "kl_beta 0 (no reference)": {"kl.beta": 0.0},
    "temperature 1.0": {"sampling.temperature": 1.0},
    "keep zero-variance groups": {"update.skip_zero_advantage": False},
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


def run(name: str, overrides: dict, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(TrainConfig, {}, {"run_dir": tmp, "steps": steps, "save_rollouts": False, **overrides})
        t0 = time.time()
        Trainer(cfg, progress=False).train()
        seconds = time.time() - t0
        task = cfg.task.build()
        policy = load_policy(f"{tmp}/final")
        result = evaluate(policy, task.heldout(), cfg.task.eval_verifiers(), EvalConfig(n_samples=0))
    return {"variant": name, "greedy_accuracy": result.greedy_accuracy,
            "wrong_steps_rate": result.wrong_steps_rate, "mul_accuracy": result.by_tag["mul"]["greedy_accuracy"],
            "clean_accuracy": result.by_tag["clean"]["greedy_accuracy"], "train_seconds": seconds}  # fmt: skip


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--only", nargs="*", default=None, help="variant names to run (default: all)")
    p.add_argument("--json", default="")
    args = p.parse_args()
    names = args.only or list(VARIANTS)
    rows = []
    print(f"| variant ({args.steps} steps) | held-out greedy | right answer, wrong steps | `mul` | `clean` | train s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        r = run(name, VARIANTS[name], args.steps)
        rows.append(r)
        print(f"| {name} | {r['greedy_accuracy']:.3f} | {r['wrong_steps_rate']:.3f} | {r['mul_accuracy']:.3f} "
              f"| {r['clean_accuracy']:.3f} | {r['train_seconds']:.0f} |", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
