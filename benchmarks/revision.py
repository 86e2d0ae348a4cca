"""Revision with history: revision models trained on chains of up to H attempts, and the split of a fixed
budget between parallel chains and sequential revisions, with the right -> wrong drift of every revision.

    python benchmarks/revision.py                        # histories 1 and 4, budget 8 in 1, 2, 4 or 8 chains
    python benchmarks/revision.py --histories 4 --chains 1,8 --problems 100
    python benchmarks/revision.py --quick    # history 1, budget 2 in 1 or 2 chains, 2 problems, one SFT step

For each history H: ``veriloop revision-pairs --history H`` on ``--train_problems`` training problems
(the shipped base's samples), a revision model SFT'd from the base on them (``--sft_steps``), then
``veriloop search --strategy revision --revision_history H`` on held-out problems at ``--budget``
attempts split into C chains (C = budget: every attempt a first attempt, no revision; C = 1: one
chain of budget - 1 revisions), the answer chosen by majority over every attempt and by the chains'
last attempts.  Drift, judged against the reference: of the revisions of a right attempt, the share
made wrong; of a wrong attempt, the share made right.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_args, save, silence_hub_progress  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.search.revision import RevisionPairsConfig, make_revision_pairs  # noqa: E402
from veriloop.search.run import SearchConfig, run_search  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402


def revision_model(
    root: Path, history: int, train_problems: int, steps: int, heldout_problems: int = 100, samples: int = 8
) -> tuple[str, dict]:
    files = {}
    for split, n in (("train", train_problems), ("heldout", heldout_problems)):
        files[split] = str(root / f"pairs-h{history}-{split}.jsonl")
        summary = make_revision_pairs(
            RevisionPairsConfig(problems=n, split=split, history=history, samples=samples, output=files[split]),
            progress=False,
        )
        if split == "train":
            pairs = summary
    task = {"name": "jsonl", "data": files["train"], "heldout_data": files["heldout"], "verifier": "arithmetic-outcome"}
    data = {
        "algo": "sft",
        "run_dir": str(root / f"sft-h{history}"),
        "task": task,
        "steps": steps,
        "save_rollouts": False,
        "checkpoint_every": 10**6,
    }
    cfg = build_config(TrainConfig, data, {})
    Trainer(cfg, progress=False).train()
    return str(root / f"sft-h{history}" / "final"), pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--histories", default="1,4")
    ap.add_argument("--chains", default="1,2,4,8")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--selects", default="majority,last", help="revision_select values: majority, last")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems searched")
    ap.add_argument("--train_problems", type=int, default=2000)
    ap.add_argument("--sft_steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "revision")
    args = ap.parse_args()
    if args.quick:
        args.histories, args.chains, args.budget, args.selects, args.threads = "1", "1,2", 2, "majority", 1
        args.problems, args.train_problems, args.sft_steps = 2, 8, 1
    torch.set_num_threads(args.threads)
    silence_hub_progress()
    t0 = time.time()
    policy = load_policy("builtin:base")
    lines, cells = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for history in [int(h) for h in args.histories.split(",")]:
            model, pairs = revision_model(
                Path(tmp), history, args.train_problems, args.sft_steps, *((4, 4) if args.quick else ())
            )
            print(
                f"history {history}: {pairs['pairs']} demonstrations from {pairs['problems_with_pairs']} problems, "
                f"mean attempts {pairs['mean_attempts']:.2f}, mean edit distance {pairs['mean_edit_distance']:.1f} "
                f"({time.time() - t0:.0f} s)",
                flush=True,
            )
            for chains in [int(c) for c in args.chains.split(",")]:
                for select in args.selects.split(","):
                    cfg = SearchConfig(
                        strategy="revision",
                        budgets=str(args.budget),
                        problems=args.problems,
                        revision_policy=model,
                        revision_select=select,
                        revision_history=history,
                        revision_chains=chains,
                        bin_samples=1,
                        out=f"{tmp}/s-{history}-{chains}-{select}",
                    )
                    c = run_search(cfg, progress=False, policy=policy)["strategies"]["revision"][str(args.budget)]
                    r2w, w2r = c.get("right_to_wrong_rate"), c.get("wrong_to_right_rate")
                    cells.append({"history": history, "chains": chains, "select": select, **c})
                    lines.append(
                        f"| {history} | {chains} x {args.budget // chains} | {select} | {c['accuracy']:.3f} | "
                        f"{c['mean_tokens']:.1f} | {'-' if r2w is None else f'{r2w:.3f}'} | "
                        f"{'-' if w2r is None else f'{w2r:.3f}'} |"
                    )
                    print(lines[-1], flush=True)
    print(f"\n{args.problems} held-out problems, {args.budget} attempts each, seed 0:\n")
    print("| history | chains x attempts | select | accuracy | mean tokens | right -> wrong | wrong -> right |")
    print("|---:|---|---|---:|---:|---:|---:|")
    print("\n".join(lines))
    print(f"\n{time.time() - t0:.0f} s")
    save(args, "revision", {"args": vars(args), "cells": cells, "seconds": time.time() - t0})


if __name__ == "__main__":
    main()
