"""The demo's table over several seeds: mean and spread of every column.

    python benchmarks/demo_seeds.py [--seeds 0,1,2] [--out runs/bench-demo] [--threads 0] [--set KEY=VALUE ...]

Runs ``veriloop demo`` (defaults: base and teacher evaluation, GRPO on the outcome reward, the
continued-SFT control for the same wall time, GRPO on the process reward) once per seed
(``train.seed``: prompts, sampling, mini-batch order and the control's data order), each in
``OUT/seed-S``, then prints the demo's table with ``mean ± sd`` over the seeds.  A seed whose
directory already holds a finished demo is read instead of run again, so seeds can run in
separate processes (``--seeds 1`` and ``--seeds 2`` side by side, then ``--seeds 0,1,2``).  The base and
the teacher do not depend on the seed.  About 35-42 minutes per seed on two cores at one torch thread
(``--threads 1``) next to another benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, silence_hub_progress  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.demo import DemoConfig, run_demo  # noqa: E402

ROWS = [("greedy_accuracy", "greedy accuracy"), ("pass@8", "pass@8 (T = 1, unbiased)"),
        ("sampled_accuracy", "sampled accuracy (T = 1)"), ("process_rate", "process-correct rate"),
        ("wrong_steps_rate", "right answer, wrong steps"), ("format_rate", "format rate")]  # fmt: skip
COLUMNS = [("base", "base"), ("grpo", "GRPO, outcome reward"), ("sft-control", "continued SFT (control)"),
           ("grpo-process", "GRPO, process reward")]  # fmt: skip
TEACHER = {"greedy_accuracy": "accuracy", "process_rate": "process_rate", "wrong_steps_rate": "wrong_steps_rate"}


def main() -> None:
    silence_hub_progress()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated train seeds")
    ap.add_argument("--out", default="runs/bench-demo")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="demo options for every seed")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    per_seed, evals, seconds = [], [], []
    for seed in seeds:
        out = Path(args.out) / f"seed-{seed}"
        if (out / "summary.json").is_file():  # a finished seed is read, not run again (seeds can run apart)
            print(f"seed {seed}: reading the finished demo in {out}")
            summary = json.loads((out / "summary.json").read_text())
        else:
            cfg = build_config(DemoConfig, {}, {"run_dir": str(out), "train.seed": seed, "threads": args.threads,
                                                **dict(kv.split("=", 1) for kv in args.set)})  # fmt: skip
            summary = run_demo(cfg, progress=False)
            out = Path(summary["run_dir"])
        evals.append(json.loads((out / "eval.json").read_text()))
        per_seed.append(summary)
        seconds.append(summary["total_seconds"])
    print(f"\n| held-out ({len(seeds)} seeds: {args.seeds}) | " + " | ".join(c for _, c in COLUMNS) + " | teacher |")
    print("|---|" + "---:|" * (len(COLUMNS) + 1))
    for key, label in ROWS:
        cells = []
        for col, _ in COLUMNS:
            values = [e[col]["pass_at"].get("8") if key == "pass@8" else e[col].get(key) for e in evals if col in e]
            cells.append(fmt(values))
        teacher = evals[0]["teacher"].get(TEACHER.get(key, ""), None)
        print(f"| {label} | " + " | ".join(cells) + f" | {'' if teacher is None else format(teacher, '.3f')} |")
    print(f"\nwall time per demo: {fmt(seconds, 0)} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": seeds, "summaries": per_seed, "eval": evals}, indent=1))


if __name__ == "__main__":
    main()
