"""Wall time per GRPO step: one process, the lag-1 pipeline, Ray rollout workers, DDP learners.

    python benchmarks/scaleout.py [--steps 8] [--configs local,local-lag1,ray1-lag1,ray2,ray2-lag1,ddp2]
                                  [--extra "--device cuda --dtype bfloat16"] [--json FILE] [--quick]
    .venv-vllm/bin/python benchmarks/scaleout.py --configs local,vllm,ray1-vllm-lag1   # vLLM's rows

The demo's workload (the shipped base, 32 prompts x 8 completions, 64 new tokens, GRPO with KL), each
configuration a ``veriloop train`` in its own process (a Ray configuration starts its own one-machine
cluster on 127.0.0.1).  Wall time per step is read from ``metrics.jsonl`` (``time_step_s``: the step's
wall clock, overlap included) over the steps that update (after the lag's warm-up), skipping the first
of them (allocator and thread-pool warm-up); printed as mean +- std over those steps.  ``--quick``: ``local``
alone, 2 steps of 2 prompts x 2, 8 new tokens, one thread (the Ray and DDP rows at toy size are
``tests/test_benchmarks_on_cpu.py``'s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import result_args, save

CONFIGS = {
    "local": [],
    "local-lag1": ["--rollout.lag", "1"],
    "ray1-lag1": ["--rollout.engine", "ray", "--rollout.workers", "1", "--rollout.lag", "1"],
    "ray2": ["--rollout.engine", "ray", "--rollout.workers", "2", "--rollout.request_groups", "16"],
    "ray2-lag1": [
        "--rollout.engine",
        "ray",
        "--rollout.workers",
        "2",
        "--rollout.request_groups",
        "16",
        "--rollout.lag",
        "1",
    ],
    "ddp2": ["--learner.strategy", "ddp", "--learner.world_size", "2"],
    # vLLM (run with .venv-vllm/bin/python): in the controller's process, or in one Ray actor, pipelined
    "vllm": ["--rollout.engine", "vllm"],
    "ray1-vllm-lag1": [
        "--rollout.engine",
        "ray",
        "--rollout.workers",
        "1",
        "--ray.worker_engine",
        "vllm",
        "--rollout.lag",
        "1",
    ],
}


def run(name: str, steps: int, workdir: Path, extra: list[str]) -> dict:
    run_dir = workdir / name
    args = [
        sys.executable,
        "-m",
        "veriloop.cli",
        "train",
        "--run_dir",
        str(run_dir),
        "--steps",
        str(steps),
        "--checkpoint_every",
        str(steps),
        "--eval_every",
        "0",
        "--quiet",
        *CONFIGS[name],
        *extra,
    ]
    t0 = time.time()
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=3600)
    total = time.time() - t0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updating = [r for r in rows if r.get("update_records", 0) > 0][1:]
    walls = [r["time_step_s"] for r in updating]
    gen = [r["time_generate_s"] for r in updating]
    upd = [r["time_update_s"] for r in updating]
    return {
        "config": name,
        "steps_measured": len(walls),
        "wall_s_mean": statistics.mean(walls),
        "wall_s_std": statistics.stdev(walls) if len(walls) > 1 else 0.0,
        "generate_s": statistics.mean(gen),
        "update_s": statistics.mean(upd),
        "process_s": total,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--configs", default=",".join(k for k in CONFIGS if "vllm" not in k))
    p.add_argument("--extra", default="", help="flags added to every configuration (e.g. --device cuda)")
    result_args(p, "scaleout")
    args = p.parse_args()
    if args.quick:
        args.steps, args.configs = 2, "local"
        args.extra = (
            "--rollout.prompts_per_step 2 --rollout.group_size 2 --sampling.max_new_tokens 8 "
            "--task.arithmetic.heldout_size 8 --update.mask_truncated false "
            "--update.skip_zero_advantage false --threads 1 " + args.extra
        )
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        p.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results.append(run(name, args.steps, Path(tmp), args.extra.split()))
            r = results[-1]
            print(f"{name}: {r['wall_s_mean']:.2f} +- {r['wall_s_std']:.2f} s/step", file=sys.stderr, flush=True)
    print("| configuration | wall s/step (mean +- std) | sampling s | update s | steps measured | process s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['config']} | {r['wall_s_mean']:.2f} +- {r['wall_s_std']:.2f} | {r['generate_s']:.2f} | "
            f"{r['update_s']:.2f} | {r['steps_measured']} | {r['process_s']:.0f} |"
        )
    save(args, "scaleout", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
