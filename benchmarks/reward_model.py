"""A Bradley-Terry reward model on the built-in task: its held-out pair accuracy, and GRPO rewarded by it.

    python benchmarks/reward_model.py [--seeds 0,1,2] [--rl_seeds 0,1] [--steps 20] [--json F] [--quick]

Pairs of the shipped base's own solutions (``veriloop rm pairs``: 8 samples a problem, a correct solution over a
wrong one by the outcome rule): 400 training problems, 100 validation problems (the epoch is chosen on their pairs),
200 held-out problems (read once per reward model, at the end).  For each of ``--seeds`` a reward model is trained
(``veriloop rm train`` at its defaults) and its held-out pair accuracy reported (chance: 0.5).  Then GRPO runs
``--steps`` steps at the trainer's defaults, rewarded by the first seed's reward model (``--reward_model``), beside
the same run rewarded by the rules (``arithmetic``: 0.8 outcome + 0.2 format), for each of ``--rl_seeds``; each final
policy is evaluated greedily on the held-out split.  A reward model that ranks 3 pairs in 4 right is a noisy reward:
the table shows what that costs against the rules it was trained to imitate.  ``--quick``: 16/8/8 problems x 4
samples, one epoch, one seed, 1 RL step, 16 held-out problems.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress, stamp_line  # noqa: E402

# --quick: the smallest RL step and held-out split that go through the same code
QUICK_RL = {"rollout.prompts_per_step": 4, "rollout.group_size": 4, "task.arithmetic.heldout_size": 16}


def rl_run(root: Path, name: str, seed: int, steps: int, extra: dict) -> dict:
    from veriloop.config import build_config
    from veriloop.evaluation.evaluate import EvalConfig, evaluate
    from veriloop.models.loading import load_policy
    from veriloop.tasks.base import split_problems
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    run_dir = root / f"{name}-{seed}"
    settings = {"run_dir": str(run_dir), "seed": seed, "steps": steps, "save_rollouts": False, **extra}
    cfg = build_config(TrainConfig, {}, {**settings, "checkpoint_every": 10**6})
    t0 = time.time()
    Trainer(cfg, progress=False).train()
    seconds = time.time() - t0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ev = evaluate(
        load_policy(str(run_dir / "final")),
        split_problems(cfg.task.build(), "heldout"),
        cfg.task.eval_verifiers(),
        EvalConfig(n_samples=0),
    )
    last = rows[-5:]
    return {
        "reward": name,
        "seed": seed,
        "steps": len(rows),
        "heldout_greedy_accuracy": ev.greedy_accuracy,
        "train_accuracy_last5": sum(r["accuracy"] for r in last) / len(last),
        "train_accuracy_first": rows[0]["accuracy"],
        "seconds": round(seconds, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="reward model training seeds")
    p.add_argument("--rl_seeds", default="0,1", help="GRPO seeds, each run with both rewards")
    p.add_argument("--steps", type=int, default=20, help="GRPO steps of each run")
    result_args(p, "reward_model")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.rl_seeds, a.steps = "0", "0", 1
    seeds, rl_seeds = parse_seeds(a.seeds), parse_seeds(a.rl_seeds)
    silence_hub_progress()
    from veriloop.models.loading import load_policy
    from veriloop.preference.pairs import PairsConfig, make_pairs
    from veriloop.preference.train import RMTrainConfig, train_reward_model

    started, models, runs = time.time(), [], []
    with tempfile.TemporaryDirectory(prefix="reward-model-") as tmp:
        root, policy = Path(tmp), load_policy("builtin:base")
        sizes = (16, 8, 8, 4) if a.quick else (400, 100, 200, 8)
        pairs = {}
        for split, n, seed in (("train", sizes[0], 1), ("validation", sizes[1], 2), ("heldout", sizes[2], 3)):
            cfg = PairsConfig(problems=n, samples=sizes[3], split=split, seed=seed, output=str(root / f"{split}.jsonl"))
            pairs[split] = make_pairs(cfg, progress=False, policy=policy)
            print(f"{split}: {pairs[split]['pairs']} pairs from {n} problems", file=sys.stderr)
        for seed in seeds:
            cfg = RMTrainConfig(
                data=str(root / "train.jsonl"),
                val_data=str(root / "validation.jsonl"),
                eval_data=str(root / "heldout.jsonl"),
                out=str(root / f"rm-{seed}"),
                seed=seed,
                **({"epochs": 1} if a.quick else {}),
            )
            s = train_reward_model(cfg, progress=False)
            models.append({"seed": seed, "selected_epoch": s["selected_epoch"], "eval": s["eval"]})
            print(f"reward model seed {seed}: held-out pair accuracy {s['eval']['accuracy']:.3f}", file=sys.stderr)
        small = QUICK_RL if a.quick else {}
        for seed in rl_seeds:
            for name, extra in (("rules", {}), ("reward model", {"reward_model": str(root / f"rm-{seeds[0]}")})):
                runs.append(rl_run(root, name.replace(" ", "-"), seed, a.steps, {**small, **extra}))
                print(f"GRPO {name} seed {seed}: held-out {runs[-1]['heldout_greedy_accuracy']:.3f}", file=sys.stderr)
    base = _base_accuracy({k: v for k, v in (QUICK_RL if a.quick else {}).items() if k.startswith("task.")})
    result = {
        "settings": {
            "problems": sizes[:3],
            "samples": sizes[3],
            "steps": a.steps,
            "seeds": seeds,
            "rl_seeds": rl_seeds,
        },
        "pairs": {k: v["pairs"] for k, v in pairs.items()},
        "correct_share": {k: v["correct_share"] for k, v in pairs.items()},
        "reward_models": models,
        "rl": runs,
        "base_heldout_greedy_accuracy": base,
        "seconds": round(time.time() - started, 1),
    }
    out = save(a, "reward_model", result)
    print(render([json.loads(out.read_text())]))


def _base_accuracy(task_options: dict) -> float:
    from veriloop.config import build_config
    from veriloop.evaluation.evaluate import EvalConfig, evaluate
    from veriloop.models.loading import load_policy
    from veriloop.tasks.base import split_problems
    from veriloop.training.config import TrainConfig

    task = build_config(TrainConfig, {}, task_options).task
    ev = evaluate(
        load_policy("builtin:base"),
        split_problems(task.build(), "heldout"),
        task.eval_verifiers(),
        EvalConfig(n_samples=0),
    )
    return ev.greedy_accuracy


PAGE = "reward-model"


def render(results: list[dict]) -> str:
    lines = [
        "# A preference reward model on the built-in task",
        "",
        "`benchmarks/reward_model.py` (see its docstring): pairs of the shipped base's own solutions, a correct one "
        "over a wrong one by the outcome rule; Bradley-Terry reward models trained on the training pairs, the epoch "
        "chosen on the validation pairs, the held-out pairs read once per model. Then GRPO at the trainer's defaults "
        "rewarded by the first reward model, beside the same run rewarded by the rules; greedy accuracy on the "
        "held-out split. Mean ± sd over seeds (sample sd).",
        "",
    ]
    for r in results:
        s = r["settings"]
        acc = [m["eval"]["accuracy"] for m in r["reward_models"]]
        lines += [
            f"Pairs: {r['pairs']['train']} training, {r['pairs']['validation']} validation, {r['pairs']['heldout']} "
            f"held-out ({s['samples']} samples of each of {s['problems'][0]}, {s['problems'][1]} and "
            f"{s['problems'][2]} problems).",
            "",
            "| reward model seed | epoch chosen | held-out pair accuracy | mean margin r_c - r_r | held-out BT loss |",
            "|---|---:|---:|---:|---:|",
        ]
        for m in r["reward_models"]:
            e = m["eval"]
            lines.append(
                f"| {m['seed']} | {m['selected_epoch']} | {e['accuracy']:.3f} | {e['mean_margin']:.3f} | "
                f"{e['loss']:.3f} |"
            )
        lines += [f"| mean ± sd | | {fmt(acc)} | | |", "", f"GRPO, {s['steps']} steps, seeds {s['rl_seeds']}:", ""]
        lines += [
            "| reward | held-out greedy accuracy | training accuracy, first step | training accuracy, last 5 steps |",
            "|---|---:|---:|---:|",
            f"| base (no training) | {r['base_heldout_greedy_accuracy']:.3f} | | |",
        ]
        for name in ("rules", "reward-model"):
            rows = [x for x in r["rl"] if x["reward"] == name]
            col = lambda key, rows=rows: fmt([x[key] for x in rows])  # noqa: E731
            lines.append(
                f"| {name.replace('-', ' ')} | {col('heldout_greedy_accuracy')} | {col('train_accuracy_first')} | "
                f"{col('train_accuracy_last5')} |"
            )
        lines += ["", stamp_line(r), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
