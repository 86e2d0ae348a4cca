"""Every method of `veriloop algos`, trained on the built-in task from the same base with the same sample budget.

    python benchmarks/algorithms.py [--steps 60] [--prompts 16] [--group 8] [--only NAME ...] [--json FILE]

Each recipe trains from the shipped base on a budget of ``steps x prompts x group`` sampled
completions: ``steps`` steps of ``prompts x group`` (PPO, which samples one completion per
prompt, gets ``prompts x group`` prompts per step; DAPO's dynamic sampling spends more per step
and stops earlier, when the budget is used), then the final policy is evaluated greedily on the
held-out split.  ``distill`` needs a teacher: it distils the
policy that this run's ``grpo`` produced (run ``grpo`` first, as the default order does).
``sft`` learns from the task's own (imperfect) teacher traces, the data the base was made from;
``sft-correct`` from the same teacher with its slips turned off (correct demonstrations).

Columns: held-out greedy accuracy, right-answer-wrong-steps rate, optimizer steps taken,
completions and completion tokens sampled (read, for sft), train wall time.  About 1-2 minutes per method on two cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.training.config import build_config
from veriloop.training.recipes import RECIPES
from veriloop.training.run_config import TrainConfig
from veriloop.training.trainer import Trainer

ORDER = ["grpo", "dr_grpo", "gspo", "dapo", "rloo", "reinforce", "ppo", "online_rft", "rft", "distill", "dpo", "sft",
         "sft-correct"]  # fmt: skip
# rows that are a recipe with settings of their own
VARIANTS = {"sft-correct": ("sft", {"task.teacher.multiplication_slip": 0.0, "task.teacher.subtraction_slip": 0.0})}


def budget(algo: str, steps: int, prompts: int, group: int) -> dict:
    # Every method stops at the same number of sampled completions (max_samples); dynamic sampling
    # spends more per step, so it is given room for more steps and stops on the budget instead.
    samples = {"max_samples": steps * prompts * group}
    if algo == "ppo":
        return {"steps": steps, "rollout.prompts_per_step": prompts * group, "rollout.group_size": 1, **samples}
    return {"steps": steps * 10, "rollout.prompts_per_step": prompts, "rollout.group_size": group, **samples}


def run(name: str, root: Path, steps: int, prompts: int, group: int, seed: int, extra: dict) -> dict:
    algo, own = VARIANTS.get(name, (name, {}))
    run_dir = root / name
    settings = {"algo": algo, "run_dir": str(run_dir), "seed": seed, "save_rollouts": False,
                "checkpoint_every": 10**6, **budget(algo, steps, prompts, group), **own, **extra}  # fmt: skip
    if algo == "distill":
        teacher = root / "grpo" / "final"
        if not teacher.is_dir():
            raise SystemExit("distill needs the grpo run's policy as its teacher: include grpo before distill")
        settings["rollout.teacher"] = str(teacher)
    cfg = build_config(TrainConfig, {}, settings)
    t0 = time.time()
    Trainer(cfg, progress=False).train()
    seconds = time.time() - t0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    result = evaluate(load_policy(str(run_dir / "final")), cfg.task.build().heldout(), cfg.task.eval_verifiers(),
                      EvalConfig(n_samples=0))  # fmt: skip
    return {"algo": name, "greedy_accuracy": result.greedy_accuracy, "wrong_steps_rate": result.wrong_steps_rate,
            "steps": len(rows), "completions": sum(r.get("sampled_records", 0) for r in rows),
            "tokens": int(sum(r.get("sampled_tokens", 0) for r in rows)), "train_seconds": seconds}  # fmt: skip


def base_row(seed: int) -> dict:
    cfg = build_config(TrainConfig, {}, {"seed": seed})
    result = evaluate(load_policy(cfg.policy), cfg.task.build().heldout(), cfg.task.eval_verifiers(),
                      EvalConfig(n_samples=0))  # fmt: skip
    return {"algo": "base (no training)", "greedy_accuracy": result.greedy_accuracy,
            "wrong_steps_rate": result.wrong_steps_rate, "steps": 0, "completions": 0, "tokens": 0,
            "train_seconds": 0.0}  # fmt: skip


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", default=None, help=f"methods to run, in order (default: {' '.join(ORDER)})")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config for every run")
    p.add_argument("--json", default="")
    args = p.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    algos = args.only or ORDER
    unknown = [a for a in algos if a not in RECIPES and a not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown algo(s) {unknown}; known: {sorted(RECIPES)}")
    print(f"| method ({args.steps} steps x {args.prompts} x {args.group}) | held-out greedy | right answer, "
          "wrong steps | steps | completions | tokens | train s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []

    def show(r):
        rows.append(r)
        print(f"| {r['algo']} | {r['greedy_accuracy']:.3f} | {r['wrong_steps_rate']:.3f} | {r['steps']} "
              f"| {r['completions']} | {r['tokens']} | {r['train_seconds']:.0f} |", flush=True)  # fmt: skip

    show(base_row(args.seed))
    with tempfile.TemporaryDirectory() as tmp:
        for algo in algos:
            show(run(algo, Path(tmp), args.steps, args.prompts, args.group, args.seed, extra))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
