"""LoRA GRPO on the built-in task: the learning rate chosen on the validation split, and what it costs.

    python benchmarks/lora_lr.py [--lrs 2e-4,5e-4,1e-3,2e-3] [--seeds 0] [--threads 2] [--json FILE] [--quick]

Each run is the setting of ``tests/test_lora_on_cpu.py::test_lora_grpo_improves_the_built_in_task`` (40 GRPO
steps of 16 prompts x 8 from the shipped base, rank 16, alpha 32) at one learning rate, scored by greedy
accuracy on the validation split (never the held-out set), next to full fine-tuning at the recipe's own rate.
Prints validation accuracy (mean ± sd over seeds), trainable parameters and the run's peak RSS per setting.
``--quick``: one LoRA rate (no full fine-tuning: the same worker), one step of 2 prompts x 2, 8 validation problems.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile

from common import fmt, parse_seeds, result_args, save

SETTINGS = {
    "steps": 40,
    "checkpoint_every": 100,
    "rollout.prompts_per_step": 16,
    "rollout.group_size": 8,
    "task.arithmetic.heldout_size": 200,
    "device": "cpu",
    "save_rollouts": False,
}
LORA = {"lora.r": 16, "lora.alpha": 32}
QUICK = {"steps": 1, "rollout.prompts_per_step": 2, "rollout.group_size": 2, "task.arithmetic.validation_size": 8}


def worker(spec: dict) -> dict:
    import torch

    from veriloop.config import build_config
    from veriloop.evaluation.evaluate import EvalConfig, evaluate
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    torch.set_num_threads(spec["threads"])
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(TrainConfig, {}, {**SETTINGS, **spec["over"], "run_dir": f"{tmp}/run"})
        trainer = Trainer(cfg, progress=False)
        trainable = sum(p.numel() for p in trainer.policy.model.parameters() if p.requires_grad)
        problems, verifiers = cfg.task.build().validation(), cfg.task.eval_verifiers()
        before = evaluate(trainer.policy, problems, verifiers, EvalConfig(n_samples=0)).greedy_accuracy
        trainer.train()
        after = evaluate(trainer.policy, problems, verifiers, EvalConfig(n_samples=0)).greedy_accuracy
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"before": before, "after": after, "trainable": trainable, "peak_rss_mb": rss}


def run(over: dict, seed: int, threads: int) -> dict:
    spec = json.dumps({"over": {**over, "seed": seed}, "threads": threads})
    out = subprocess.run([sys.executable, __file__, "--worker", spec], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lrs", default="2e-4,5e-4,1e-3,2e-3")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "lora_lr")
    ap.add_argument("--worker", default="")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.quick:
        args.lrs, args.seeds, args.threads = args.lrs.split(",")[-1], "0", 1
    seeds, quick = parse_seeds(args.seeds), QUICK if args.quick else {}
    settings = {} if args.quick else {"full (recipe lr)": {}}
    settings |= {f"lora lr {lr}": {**quick, **LORA, "optim.lr": float(lr)} for lr in args.lrs.split(",")}
    results = {}
    for name, over in settings.items():
        results[name] = [run(over, s, args.threads) for s in seeds]
        print(f"{name}: {[round(r['after'], 3) for r in results[name]]}", file=sys.stderr, flush=True)
    print("| setting | validation before | validation after | trainable params | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for name, rs in results.items():
        print(
            f"| {name} | {fmt([r['before'] for r in rs])} | {fmt([r['after'] for r in rs])} | "
            f"{rs[0]['trainable']:,} | {fmt([r['peak_rss_mb'] for r in rs], 0)} |"
        )
    save(args, "lora_lr", {"args": vars(args), "seeds": seeds, "results": results})


if __name__ == "__main__":
    main()
