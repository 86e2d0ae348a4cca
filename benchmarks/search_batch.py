"""``veriloop search`` one problem at a time against several problems per sampler call and PRM pass.

    python benchmarks/search_batch.py                      # 48 held-out problems, budgets 1,4,16, batches 1 and 16
    python benchmarks/search_batch.py --prm runs/bench-prm/prm --rounds 3
    python benchmarks/search_batch.py --quick        # 2 problems, budgets 1,2, batches 1 and 2, one round

Runs ``run_search`` at each ``--batches`` size, alternating them for ``--rounds`` rounds (this
machine's speed drifts), on the shipped base; the scorer is ``--prm`` or, by default, a PRM with a
seeded random head on the shipped base (the same forward passes as a trained one: speed, not
accuracy, is measured here).  Prints seconds per problem of every strategy and budget (the median
over rounds; at batch > 1 a problem's share of its batch's wall time) and checks that every batch
size chose the same solutions at the same cost (``results.jsonl`` equal but for ``seconds``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_args, save, silence_hub_progress  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.prm.model import PRM, load_prm  # noqa: E402
from veriloop.search.run import SearchConfig, run_search  # noqa: E402


def random_head_prm() -> PRM:
    torch.manual_seed(0)
    prm = PRM(load_policy("builtin:base"), "semicolon", "{reference}?", {"labels": "hard", "loss": "bce"})
    torch.nn.init.normal_(prm.head.weight, std=0.5)
    return prm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=48)
    ap.add_argument("--budgets", default="1,4,16")
    ap.add_argument("--strategies", default="single,majority,best_of_n,weighted_vote,beam,lookahead")
    ap.add_argument("--batches", default="1,16", help="batch_problems sizes to compare")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prm", default="", help="PRM directory; '' = the shipped base with a random head")
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "search_batch")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.budgets, args.batches, args.rounds, args.threads = 2, "1,2", "1,2", 1, 1
        args.strategies = "single,best_of_n,beam"
    torch.set_num_threads(args.threads)
    silence_hub_progress()
    policy = load_policy("builtin:base")
    prm = load_prm(args.prm) if args.prm else random_head_prm()
    batches = [int(b) for b in args.batches.split(",")]
    seconds: dict[int, dict[tuple[str, str], list[float]]] = {b: {} for b in batches}
    walls: dict[int, list[float]] = {b: [] for b in batches}
    rows: dict[int, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for b in batches:
                data = {
                    "strategy": args.strategies,
                    "budgets": args.budgets,
                    "problems": args.problems,
                    "batch_problems": b,
                    "out": f"{tmp}/b{b}",
                    "threads": args.threads,
                }
                t0 = time.time()
                summary = run_search(build_config(SearchConfig, data, {}), progress=False, policy=policy, prm=prm)
                walls[b].append(time.time() - t0)
                for s, per in summary["strategies"].items():
                    for budget, cell in per.items():
                        seconds[b].setdefault((s, budget), []).append(cell["mean_seconds"])
                rows[b] = [json.loads(x) for x in Path(f"{tmp}/b{b}/results.jsonl").read_text().splitlines()]
                print(f"[round {r + 1}, batch_problems {b}: {walls[b][-1]:.1f} s]", flush=True)
    ref = [{k: v for k, v in x.items() if k != "seconds"} for x in rows[batches[0]]]
    same = {b: ref == [{k: v for k, v in x.items() if k != "seconds"} for x in rows[b]] for b in batches}
    head = " | ".join(f"s/problem, batch {b}" for b in batches)
    print(f"\n| strategy | budget | {head} | speed-up (batch {batches[-1]} vs {batches[0]}) |")
    print("|---|---:|" + "---:|" * (len(batches) + 1))
    for key in seconds[batches[0]]:
        med = [statistics.median(seconds[b][key]) for b in batches]
        cells = " | ".join(f"{m:.4f}" for m in med)
        print(f"| {key[0]} | {key[1]} | {cells} | {med[0] / med[-1]:.1f}x |")
    totals = " | ".join(f"{statistics.median(walls[b]):.1f}" for b in batches)
    print(
        f"| whole run (s, median; bins included) | | {totals} | "
        f"{statistics.median(walls[batches[0]]) / statistics.median(walls[batches[-1]]):.1f}x |"
    )
    print(
        f"\n{args.problems} problems, budgets {args.budgets}, {args.rounds} rounds, {args.threads} threads; "
        f"results equal to batch {batches[0]}'s (all but seconds): "
        + ", ".join(f"batch {b}: {'yes' if same[b] else 'NO'}" for b in batches)
    )
    save(
        args,
        "search_batch",
        {
            "args": vars(args),
            "wall_s": walls,
            "same_results": same,
            "seconds_per_problem": {
                f"{b}": {f"{k[0]} {k[1]}": v for k, v in per.items()} for b, per in seconds.items()
            },
        },
    )
    if not all(same.values()):
        raise SystemExit("batched search chose other solutions than one problem at a time")


if __name__ == "__main__":
    main()
