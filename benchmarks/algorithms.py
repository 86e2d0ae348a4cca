"""Every method of `veriloop algos`, trained on the built-in task from the same base with the same sample budget.

    python benchmarks/algorithms.py [--seeds 0,1,2] [--steps 60] [--prompts 16] [--group 8] [--only NAME ...]
                                    [--dpo_lrs 1e-4,5e-5,2e-5] [--json FILE] [--quick]

Each recipe trains from the shipped base on a budget of ``steps x prompts x group`` sampled
completions: ``steps`` steps of ``prompts x group`` (PPO, which samples one completion per
prompt, gets ``prompts x group`` prompts per step; DAPO's dynamic sampling spends more per step
and stops earlier, when the budget is used), then the final policy is evaluated greedily on the
held-out split.  ``distill`` needs a teacher: it distils the
policy that this run's ``grpo`` produced (run ``grpo`` first, as the default order does).
``sft`` learns from the task's own (imperfect) teacher traces, the data the base was made from;
``sft-correct`` from the same teacher with its slips turned off (correct demonstrations).

Every method runs once per seed (``--seeds``); the table gives ``mean ± sd`` over the seeds of
held-out greedy accuracy and the right-answer-wrong-steps rate, and the means of optimizer steps
taken, completions and completion tokens sampled (read, for sft) and train wall time.  About 1-2
minutes per method and seed on two cores.

DPO's learning rate is the one recipe setting chosen by measurement: ``--dpo_lrs`` trains DPO
(first seed) at each rate, evaluates on the task's **validation** split, and the best rate is
used for the DPO row; the held-out set is read only for the reported rows.

``--quick``: ``grpo`` alone, one seed, one step of 2 prompts x 2, 8 held-out problems.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.evaluation.evaluate import EvalConfig, evaluate  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.tasks.base import split_problems  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.recipes import RECIPES  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402

ORDER = [
    "grpo",
    "dr_grpo",
    "gspo",
    "dapo",
    "rloo",
    "reinforce",
    "ppo",
    "online_rft",
    "rft",
    "distill",
    "dpo",
    "sft",
    "sft-correct",
]
# rows that are a recipe with settings of their own
VARIANTS = {"sft-correct": ("sft", {"task.teacher.multiplication_slip": 0.0, "task.teacher.subtraction_slip": 0.0})}


def budget(algo: str, steps: int, prompts: int, group: int) -> dict:
    # Every method stops at the same number of sampled completions (max_samples); dynamic sampling
    # spends more per step, so it is given room for more steps and stops on the budget instead.
    samples = {"max_samples": steps * prompts * group}
    if algo == "ppo":
        return {"steps": steps, "rollout.prompts_per_step": prompts * group, "rollout.group_size": 1, **samples}
    return {"steps": steps * 10, "rollout.prompts_per_step": prompts, "rollout.group_size": group, **samples}


def run(
    name: str, root: Path, steps: int, prompts: int, group: int, seed: int, extra: dict, split: str = "heldout"
) -> dict:
    algo, own = VARIANTS.get(name, (name, {}))
    run_dir = root / name
    settings = {
        "algo": algo,
        "run_dir": str(run_dir),
        "seed": seed,
        "save_rollouts": False,
        "checkpoint_every": 10**6,
        **budget(algo, steps, prompts, group),
        **own,
        **extra,
    }
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
    result = evaluate(
        load_policy(str(run_dir / "final")),
        split_problems(cfg.task.build(), split),
        cfg.task.eval_verifiers(),
        EvalConfig(n_samples=0),
    )
    return {
        "algo": name,
        "seed": seed,
        "split": split,
        "greedy_accuracy": result.greedy_accuracy,
        "wrong_steps_rate": result.wrong_steps_rate,
        "steps": len(rows),
        "completions": sum(r.get("sampled_records", 0) for r in rows),
        "tokens": int(sum(r.get("sampled_tokens", 0) for r in rows)),
        "train_seconds": seconds,
    }


def base_row(extra: dict) -> dict:
    cfg = build_config(TrainConfig, {}, {k: v for k, v in extra.items() if k.startswith("task.")})
    result = evaluate(
        load_policy(cfg.policy), cfg.task.build().heldout(), cfg.task.eval_verifiers(), EvalConfig(n_samples=0)
    )
    return {
        "algo": "base (no training)",
        "seed": None,
        "greedy_accuracy": result.greedy_accuracy,
        "wrong_steps_rate": result.wrong_steps_rate,
        "steps": 0,
        "completions": 0,
        "tokens": 0,
        "train_seconds": 0.0,
    }


def tune_dpo_lr(lrs: list[float], root: Path, args, extra: dict) -> tuple[float, list[dict]]:
    """Train DPO at each learning rate (first seed), score each on the validation split; the best rate wins."""
    tried = []
    for lr in lrs:
        r = run(
            "dpo",
            root / f"dpo-lr-{lr:g}",
            args.steps,
            args.prompts,
            args.group,
            args.seeds[0],
            {**extra, "optim.lr": lr},
            split="validation",
        )
        tried.append({"lr": lr, "validation_greedy_accuracy": r["greedy_accuracy"]})
        print(f"  dpo lr {lr:g}: validation greedy {r['greedy_accuracy']:.3f}", flush=True)
    best = max(tried, key=lambda t: t["validation_greedy_accuracy"])
    return best["lr"], tried


def main() -> None:
    silence_hub_progress()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds; the table gives mean ± sd")
    p.add_argument("--only", nargs="*", default=None, help=f"methods to run, in order (default: {' '.join(ORDER)})")
    p.add_argument(
        "--dpo_lrs",
        default="1e-4,5e-5,2e-5",
        help="DPO learning rates tried on the validation split ('' = the recipe's)",
    )
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config for every run")
    result_args(p, "algorithms")
    args = p.parse_args()
    if args.quick:
        args.steps, args.prompts, args.group, args.seeds, args.dpo_lrs = 1, 2, 2, "0", ""
        args.only = args.only or ["grpo"]
        args.set = ["task.arithmetic.heldout_size=8", "task.arithmetic.validation_size=8", *args.set]
    args.seeds = parse_seeds(args.seeds)
    extra = dict(kv.split("=", 1) for kv in args.set)
    algos = args.only or ORDER
    unknown = [a for a in algos if a not in RECIPES and a not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown algo(s) {unknown}; known: {sorted(RECIPES)}")
    per_algo: dict[str, list[dict]] = {}
    tuning: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        extra_for = {a: dict(extra) for a in algos}
        if "dpo" in algos and args.dpo_lrs:
            print("choosing DPO's learning rate on the validation split:")
            lr, tuning = tune_dpo_lr([float(x) for x in args.dpo_lrs.split(",")], Path(tmp) / "tune", args, extra)
            extra_for["dpo"]["optim.lr"] = lr
            print(f"  chosen: {lr:g}\n")
        for seed in args.seeds:
            for algo in algos:  # grpo before distill in every seed: distill's teacher is that seed's grpo policy
                r = run(algo, Path(tmp) / f"seed-{seed}", args.steps, args.prompts, args.group, seed, extra_for[algo])
                per_algo.setdefault(algo, []).append(r)
                print(
                    f"  seed {seed} {algo}: held-out greedy {r['greedy_accuracy']:.3f}, wrong steps "
                    f"{r['wrong_steps_rate']:.3f}, {r['train_seconds']:.0f} s",
                    flush=True,
                )
    base = base_row(extra)
    seeds = ",".join(map(str, args.seeds))
    print(
        f"\n| method ({args.steps} steps x {args.prompts} x {args.group}; seeds {seeds}) | held-out greedy | "
        "right answer, wrong steps | steps | completions | tokens | train s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {base['algo']} | {base['greedy_accuracy']:.3f} | {base['wrong_steps_rate']:.3f} | | | | |")
    for algo, rs in per_algo.items():
        mean = {k: sum(r[k] for r in rs) / len(rs) for k in ("steps", "completions", "tokens", "train_seconds")}
        print(
            f"| `{algo}` | {fmt([r['greedy_accuracy'] for r in rs])} | {fmt([r['wrong_steps_rate'] for r in rs])} "
            f"| {mean['steps']:.0f} | {mean['completions']:,.0f} | {mean['tokens']:,.0f} "
            f"| {mean['train_seconds']:.0f} |"
        )
    save(args, "algorithms", {"args": vars(args), "base": base, "runs": per_algo, "dpo_lr_tuning": tuning})


if __name__ == "__main__":
    main()
