"""rStar against MCTS, beam search, best-of-N and majority vote at equal token cost, on the built-in task.

    python benchmarks/rstar.py                          # makes a PRM first (about 70 s), seeds 0,1
    python benchmarks/rstar.py --prm runs/bench-prm/prm --seeds 0 --problems 40
    python benchmarks/rstar.py --discriminator completer --strategies rstar   # a peer model confirms instead
    python benchmarks/rstar.py --quick     # a toy PRM, 2 problems, rStar at 1 rollout against best-of-N at 2

Every strategy runs through ``veriloop search`` on the same held-out problems with the shipped base as
the policy.  rStar (``--rstar_budgets`` rollouts) uses no PRM and no reference: its reward is the outcome's
self-consistency, its answer the best trajectory its discriminator (the policy, drawing from a seed of its
own) confirms.  MCTS (PRM node values), beam and best-of-N rank with the PRM of
``benchmarks/allocate.py`` (``make_prm``); majority vote needs nothing.  For each rStar budget the table
puts beside it, per strategy, the accuracy at that strategy's largest budget whose mean tokens per problem
are at most rStar's (its budget and tokens named): the most it spends within rStar's cost, never more, and
no choice among budgets made on the held-out problems.  Every cell is printed as it is measured.
Mean +- sd over the seeds; each seed draws its own samples (``--seed``) on the same problems.

``--discriminator completer``: the trajectories are confirmed by another model instead of the policy itself, as
rStar pairs two small models of similar capability: the completer ``make_prm`` trains (the base SFT'd for 40 steps
on the task's teacher with its multiplication slips off; it needs no ``--prm``, it is made either way).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allocate import make_prm  # noqa: E402
from common import fmt, parse_seeds, result_args, save, silence_hub_progress  # noqa: E402

from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.prm.model import load_prm  # noqa: E402
from veriloop.search.run import SearchConfig, run_search  # noqa: E402

BASELINES = {
    "single": "1",
    "mcts": "4,8,16,32",
    "beam": "4,8,16,32,64",
    "best_of_n": "4,8,16,32,64",
    "majority": "4,8,16,32,64",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prm", default="", help="PRM directory; '' = make one (about 70 s)")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--problems", type=int, default=100, help="held-out problems")
    ap.add_argument("--rstar_budgets", default="1,2,4", help="rStar rollouts")
    ap.add_argument("--expand", type=int, default=4, help="samples per action of an expansion (every strategy)")
    ap.add_argument("--discriminator", default="policy", help="rstar's discriminator: policy | completer | DIR")
    ap.add_argument("--strategies", default="rstar," + ",".join(BASELINES), help="which to run")
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "rstar")
    args = ap.parse_args()
    baselines = dict(BASELINES)
    if args.quick:
        args.seeds, args.problems, args.rstar_budgets, args.expand, args.threads = "0", 2, "1", 2, 1
        args.strategies, baselines = "rstar,best_of_n", {"best_of_n": "2"}
    unknown = set(args.strategies.split(",")) - {"rstar", *BASELINES}
    if "rstar" not in args.strategies.split(",") or unknown:
        raise SystemExit(f"--strategies: rstar and any of {', '.join(BASELINES)}; got {args.strategies!r}")
    torch.set_num_threads(args.threads)
    silence_hub_progress()
    t0 = time.time()
    cells: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = make_prm(Path(tmp), args.quick) if not args.prm or args.discriminator == "completer" else ""
        prm_dir = args.prm or made
        prm, policy = load_prm(prm_dir), load_policy("builtin:base")
        disc = {"policy": "", "completer": str(Path(tmp) / "completer" / "final")}.get(
            args.discriminator, args.discriminator
        )
        wanted = args.strategies.split(",")
        for seed in parse_seeds(args.seeds):
            for strategy, budgets in {"rstar": args.rstar_budgets, **baselines}.items():
                if strategy not in wanted:
                    continue
                # expand where the strategy reads it (best-of-N and majority refuse an option they do not read)
                expand = {"expand": args.expand} if strategy in ("rstar", "mcts", "beam") else {}
                cfg = SearchConfig(
                    strategy=strategy,
                    budgets=budgets,
                    problems=args.problems,
                    split="heldout",
                    bin_samples=1,
                    seed=seed,
                    out=f"{tmp}/{strategy}-{seed}",
                    discriminator=disc,
                    **expand,
                )
                scorer = None if strategy in ("rstar", "majority", "single") else prm
                summary = run_search(cfg, progress=False, policy=policy, prm=scorer)
                for b, c in summary["strategies"][strategy].items():
                    cells.setdefault((strategy, b), []).append(c)
                done = " ".join(
                    f"{b}:{c['accuracy']:.3f}/{c['mean_tokens']:.0f}t"
                    for b, c in summary["strategies"][strategy].items()
                )
                print(f"seed {seed} {strategy}: {done} ({time.time() - t0:.0f} s)", flush=True)
    print(table(cells, args.rstar_budgets, wanted, baselines))
    print(f"\n{args.problems} held-out problems, seeds {args.seeds}, expand {args.expand}; {time.time() - t0:.0f} s")
    save(
        args,
        "rstar",
        {
            "args": vars(args),
            "budgets": {"rstar": args.rstar_budgets, **baselines},
            "cells": [{"strategy": s, "budget": b, "seeds": cs} for (s, b), cs in cells.items()],
            "seconds": time.time() - t0,
        },
    )


def table(
    cells: dict[tuple[str, str], list[dict]], rstar_budgets: str, wanted: list[str], budgets: dict[str, str] = BASELINES
) -> str:
    baselines = {s: b for s, b in budgets.items() if s in wanted}
    lines = [
        "| rStar rollouts | rStar accuracy | rStar tokens | " + " | ".join(baselines) + " |",
        "|---|---:|---:|" + "---|" * len(baselines),
    ]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    for b in rstar_budgets.split(","):
        rs = cells[("rstar", b.strip())]
        tokens = mean([c["mean_tokens"] for c in rs])
        row = [b, fmt([c["accuracy"] for c in rs]), fmt([c["mean_tokens"] for c in rs], 0)]
        for s, budgets in baselines.items():
            fits = [
                (mean([c["accuracy"] for c in cells[(s, x)]]), x)
                for x in budgets.split(",")
                if mean([c["mean_tokens"] for c in cells[(s, x)]]) <= tokens
            ]
            if not fits:
                row.append("-")
                continue
            x = max(fits, key=lambda f: int(f[1]))[1]  # the most this strategy spends within rStar's tokens
            used = cells[(s, x)]
            row.append(f"{fmt([c['accuracy'] for c in used])} (@{x}, {mean([c['mean_tokens'] for c in used]):.0f} t)")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
