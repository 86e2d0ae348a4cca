"""``veriloop allocate`` on the built-in task: the allocation chosen on validation against the best single
strategy, both applied to held-out problems, over several seeds.

    python benchmarks/allocate.py                          # makes a PRM first (about 70 s), seeds 0,1,2
    python benchmarks/allocate.py --prm runs/bench-prm/prm --seeds 0
    python benchmarks/allocate.py --strategies single,majority,revision --budgets 1,2,4,8 --revision_sweep 1,2,4,8
    python benchmarks/allocate.py --quick    # a toy PRM (make_prm(quick=True)), 4 problems, budgets 1,2, one seed

The PRM, unless ``--prm`` names one: the recipe of ``tests/test_prm_drives_steps_on_cpu.py`` (a
completer SFT'd for 40 steps on the task's faithful teacher, Math-Shepherd labels of the shipped
base's samples, 3 epochs).  Each seed draws its own probes and strategy samples (``--seed``); the
PRM, the validation and the held-out problems stay the same.  Prints each seed's table and, per
token budget, held-out accuracy and mean tokens as mean +- sd over the seeds.

With ``revision`` among ``--strategies``: a revision model first (``benchmarks/revision.py``'s recipe, history
1: pairs from 8 base samples on ``--revision_train_problems`` training problems, ``--revision_steps`` SFT steps
from the base), answers by majority over every attempt, and with ``--revision_sweep`` each budget N split
into C chains for each C <= N (``veriloop allocate --revision_chains_sweep``): the sequential/parallel ratio
per bin, in each seed's table and chosen per bin like any cell.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress  # noqa: E402
from revision import revision_model  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.prm.label import LabelConfig, label_steps  # noqa: E402
from veriloop.prm.model import load_prm  # noqa: E402
from veriloop.prm.train import PRMTrainConfig, train_prm  # noqa: E402
from veriloop.search.allocate import AllocateConfig, run_allocate  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402

FAITHFUL_TEACHER = {"multiplication_slip": 0.0, "subtraction_slip": 0.3, "compensate_slips": False}


def make_prm(root: Path, quick: bool = False) -> str:
    """The PRM of the docstring in ``root/prm`` (``quick``: one SFT step, 2 solutions of 4, 2 and 2 problems with 2
    completions each, one epoch: a PRM that only proves the path runs)."""
    sft = {
        "algo": "sft",
        "run_dir": str(root / "completer"),
        "steps": 1 if quick else 40,
        "save_rollouts": False,
        "checkpoint_every": 10**6,
        "task": {"teacher": FAITHFUL_TEACHER},
    }
    trainer = Trainer(build_config(TrainConfig, sft, {}), progress=False)
    trainer.train()
    base = load_policy("builtin:base")
    files = {}
    sizes = (
        (("train", 4, 2), ("validation", 2, 2), ("heldout", 2, 2))
        if quick
        else (("train", 96, 4), ("validation", 24, 2), ("heldout", 24, 2))
    )
    for split, problems, solutions in sizes:
        files[split] = str(root / f"{split}.jsonl")
        label = LabelConfig(
            problems=problems, solutions=solutions, completions=2 if quick else 4, split=split, output=files[split]
        )
        label_steps(label, progress=False, policy=base, completer=trainer.policy)
    cfg = PRMTrainConfig(
        data=files["train"],
        val_data=files["validation"],
        eval_data=files["heldout"],
        out=str(root / "prm"),
        epochs=1 if quick else 3,
    )
    ev = train_prm(cfg, progress=False)["eval"]
    print(f"PRM: held-out AUC against the exact checker {ev['auc_vs_exact_checker']:.3f}", flush=True)
    return cfg.out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prm", default="", help="PRM directory; '' = make one (about 70 s)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--strategies", default="single,majority,best_of_n,weighted_vote,beam")
    ap.add_argument("--budgets", default="1,2,4,8,16")
    ap.add_argument("--token_budgets", default="4,8,16")
    ap.add_argument("--problems", type=int, default=200, help="validation problems")
    ap.add_argument("--heldout_problems", type=int, default=200)
    ap.add_argument("--probe_samples", type=int, default=4)
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--revision_sweep", default="", help="chain counts C for revision (--revision_chains_sweep)")
    ap.add_argument("--revision_train_problems", type=int, default=2000)
    ap.add_argument("--revision_steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    result_args(ap, "allocate")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.strategies, args.budgets, args.token_budgets = "0", "single,best_of_n", "1,2", "1,2"
        args.threads = 1
        args.problems, args.heldout_problems, args.probe_samples, args.levels = 4, 2, 2, 2
    torch.set_num_threads(args.threads)
    silence_hub_progress()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        prm_dir = args.prm or make_prm(Path(tmp), args.quick)
        prm, policy = load_prm(prm_dir), load_policy("builtin:base")
        revision = {}
        if "revision" in args.strategies.split(","):
            model, pairs = revision_model(Path(tmp), 1, args.revision_train_problems, args.revision_steps)
            print(f"revision model: {pairs['pairs']} demonstrations ({time.time() - t0:.0f} s)", flush=True)
            revision = {
                "revision_policy": model,
                "revision_select": "majority",
                "revision_history": 1,
                "revision_chains_sweep": args.revision_sweep,
            }
        runs = []
        for seed in parse_seeds(args.seeds):
            cfg = AllocateConfig(
                strategy=args.strategies,
                budgets=args.budgets,
                token_budgets=args.token_budgets,
                problems=args.problems,
                heldout_problems=args.heldout_problems,
                probe_samples=args.probe_samples,
                levels=args.levels,
                seed=seed,
                out=f"{tmp}/allocate-{seed}",
                prm=prm_dir,
                **revision,
            )
            s = run_allocate(cfg, progress=False, policy=policy, prm=prm)
            runs.append(s)
            print(f"\nseed {seed} ({s['seconds']} s):\n" + Path(cfg.out, "table.md").read_text(), flush=True)
    print(
        f"\nHeld-out, mean ± sd over seeds {args.seeds} ({args.heldout_problems} problems; choices made on "
        f"{args.problems} validation problems):\n"
    )
    print(
        "| token budget (samples) | best single: accuracy | tokens | allocation: accuracy | tokens (probe included) "
        "| choices (per seed) |"
    )
    print("|---:|---:|---:|---:|---:|---|")
    for i, units in enumerate(runs[0]["choices"]):
        chs = [r["choices"][i] for r in runs]
        single = [c["heldout"].get("single") or {} for c in chs]
        alloc = [c["heldout"].get("allocation") or {} for c in chs]
        picks = "; ".join(f"{c['single']} vs {'/'.join(c['allocation'] or ['-'])}" for c in chs)
        print(
            f"| {units['budget_units']:g} | {fmt([x.get('accuracy') for x in single])} | "
            f"{fmt([x.get('mean_tokens') for x in single], 1)} | {fmt([x.get('accuracy') for x in alloc])} | "
            f"{fmt([x.get('mean_tokens') for x in alloc], 1)} | {picks} |"
        )
    print(f"\n{time.time() - t0:.0f} s")
    print(json.dumps({"bins": [r["bins"] for r in runs], "edges": [r["edges"] for r in runs]}))
    save(args, "allocate", {"args": vars(args), "runs": runs, "seconds": time.time() - t0})


if __name__ == "__main__":
    main()
