"""The R1 pipeline against R1-Zero and against one long RL run of the same wall time, on the built-in task.

    python benchmarks/r1_pipeline.py                       # configs/r1.yaml, seeds 0,1
    python benchmarks/r1_pipeline.py --seeds 0 --option rl_steps=30
    python benchmarks/r1_pipeline.py --quick     # one seed, one step a stage, 4 problems, rl-long for 1 s

For each seed: ``veriloop pipeline --config configs/r1.yaml`` (variant r1), then ``--variant
r1-zero`` (its RL stage only: GRPO from the base for ``rl_steps``), then ``--variant rl-long``: GRPO
from the base for the r1 pipeline's own wall time (``max_minutes``).  Prints held-out greedy
accuracy and right-answer-wrong-steps after every stage, mean +- sd over the seeds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress  # noqa: E402

from veriloop.config import build_config, load_yaml  # noqa: E402
from veriloop.pipeline import PipelineConfig, options_for, run_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUICK = {
    "cold_start_steps": "1",
    "rl_steps": "1",
    "rs_problems": "4",
    "rs_samples": "2",
    "sft_steps": "1",
    "rl_again_steps": "1",
    "eval_problems": "4",
    "rl.rollout.prompts_per_step": "2",
    "rl.rollout.group_size": "2",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "r1.yaml"))
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="pipeline option (repeatable)")
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "r1_pipeline")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.threads = "0", 1
    torch.set_num_threads(args.threads)
    silence_hub_progress()
    overrides = {**(QUICK if args.quick else {}), **dict(o.split("=", 1) for o in args.option)}
    rows: dict[tuple[str, str], list[dict]] = {}
    seconds: dict[str, list[float]] = {}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in parse_seeds(args.seeds):
            r1_minutes = None
            for variant in ("r1", "r1-zero", "rl-long"):
                extra = {"variant": variant, "seed": str(seed), "run_dir": f"{tmp}/{variant}-{seed}"}
                if variant == "rl-long":
                    extra["max_minutes"] = str(min(r1_minutes, 1 / 60) if args.quick else r1_minutes)
                cfg = build_config(
                    PipelineConfig,
                    options_for(variant, load_yaml(args.config)),
                    {**options_for(variant, overrides), **extra},
                )
                start = time.time()
                state = run_pipeline(cfg, progress=False)
                took = time.time() - start
                r1_minutes = took / 60 if variant == "r1" else r1_minutes
                seconds.setdefault(variant, []).append(took)
                for stage, e in state["stages"].items():
                    if e.get("heldout"):
                        rows.setdefault((variant, stage), []).append(e["heldout"])
                done = [
                    f"{s} {e['heldout']['greedy_accuracy']:.3f}" for s, e in state["stages"].items() if e.get("heldout")
                ]
                print(f"[seed {seed} {variant}: {took:.0f} s] " + ", ".join(done), flush=True)
    print(f"\nHeld-out (greedy), mean ± sd over seeds {args.seeds}:\n")
    print("| run | after stage | accuracy | right answer, wrong steps |\n|---|---|---:|---:|")
    for (variant, stage), hs in rows.items():
        print(
            f"| {variant} | {stage} | {fmt([h['greedy_accuracy'] for h in hs])} | "
            f"{fmt([h['wrong_steps_rate'] for h in hs])} |"
        )
    print("\nwall seconds per run: " + ", ".join(f"{v} {fmt(s, 0)}" for v, s in seconds.items()))
    print(f"{time.time() - t0:.0f} s in all")
    save(
        args,
        "r1_pipeline",
        {
            "args": vars(args),
            "seconds": seconds,
            "heldout": [{"variant": v, "stage": st, "seeds": hs} for (v, st), hs in rows.items()],
        },
    )


if __name__ == "__main__":
    main()
