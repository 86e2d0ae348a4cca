"""A PRM against its control: the same training on labels that carry no step-level signal.

    python benchmarks/prm_controls.py [--seeds 0,1,2] [--json F] [--quick]

Labels the shipped base's own solutions as ``tests/test_prm_on_cpu.py``'s fixture does (Math-Shepherd,
the base as completer: 96 training problems x 4 solutions, 24 validation and 24 held-out problems x 2,
4 completions per step), then for each seed trains a PRM on those labels and one on
``shuffled_step_labels`` of them (each row given another row's step labels), 3 epochs each, and prints
both held-out AUCs against the exact step checker and against the hard labels.  The suite's floor
(``AUC_FLOOR`` in that test file) must sit between the two columns.  ``--quick``: one seed, 4 training problems x 2
solutions, 2 validation and 2 held-out problems, 2 completions per step, one epoch.
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


def label_fixture_sets(root: Path, quick: bool, policy) -> dict[str, int]:
    """The fixture's three label files under ``root`` (train, held, val ``.jsonl``); returns each one's step count."""
    from veriloop.prm.label import LabelConfig, label_steps

    n, m = (4, 2) if quick else (96, 24)
    sets = {
        "train": {"problems": n, "solutions": 2 if quick else 4},
        "held": {"problems": m, "solutions": 2, "split": "heldout"},
        "val": {"problems": m, "solutions": 2, "split": "validation"},
    }
    steps = {}
    for name, c in sets.items():
        cfg = LabelConfig(completions=2 if quick else 4, output=str(root / f"{name}.jsonl"), **c)
        steps[name] = label_steps(cfg, progress=False, policy=policy)["steps"]
    return steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="PRM training seeds (the labels are the fixture's, seed 0)")
    result_args(p, "prm_controls")
    a = p.parse_args()
    if a.quick:
        a.seeds = "0"
    seeds = parse_seeds(a.seeds)
    silence_hub_progress()
    from veriloop.models.loading import load_policy
    from veriloop.prm.train import PRMTrainConfig, load_labels, shuffled_step_labels, train_prm

    started, results = time.time(), []
    with tempfile.TemporaryDirectory(prefix="prm-controls-") as tmp:
        root, policy = Path(tmp), load_policy("builtin:base")
        label_fixture_sets(root, a.quick, policy)
        rows = load_labels(str(root / "train.jsonl"))
        for seed in seeds:
            shuffled = root / f"shuffled-{seed}.jsonl"
            shuffled.write_text("".join(json.dumps(r) + "\n" for r in shuffled_step_labels(rows, seed)))
            row = {"seed": seed}
            for kind, data in (("labels", root / "train.jsonl"), ("shuffled", shuffled)):
                cfg = PRMTrainConfig(
                    data=str(data),
                    eval_data=str(root / "held.jsonl"),
                    val_data=str(root / "val.jsonl"),
                    out=str(root / f"prm-{kind}-{seed}"),
                    epochs=1 if a.quick else 3,
                    seed=seed,
                )
                ev = train_prm(cfg, progress=False)["eval"]
                row[kind] = {k: ev[k] for k in ("auc_vs_exact_checker", "auc_vs_hard_labels")}
                print(f"seed {seed} {kind}: AUC vs exact checker {ev['auc_vs_exact_checker']:.3f}", file=sys.stderr)
            results.append(row)
    print(f"# {len(rows)} training solutions; held-out AUCs; seeds {a.seeds}; {time.time() - started:.0f} s\n")
    print("| seed | PRM vs exact checker | control vs exact checker | PRM vs hard labels | control vs hard labels |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        x, y = r["labels"], r["shuffled"]
        print(
            f"| {r['seed']} | {x['auc_vs_exact_checker']:.3f} | {y['auc_vs_exact_checker']:.3f} "
            f"| {x['auc_vs_hard_labels']:.3f} | {y['auc_vs_hard_labels']:.3f} |"
        )
    col = lambda kind, key: fmt([r[kind][key] for r in results])  # noqa: E731
    print(
        f"| mean ± sd | {col('labels', 'auc_vs_exact_checker')} | {col('shuffled', 'auc_vs_exact_checker')} "
        f"| {col('labels', 'auc_vs_hard_labels')} | {col('shuffled', 'auc_vs_hard_labels')} |"
    )
    save(a, "prm_controls", {"seeds": seeds, "training_solutions": len(rows), "results": results})


if __name__ == "__main__":
    main()
