"""The two forms of a PRM on the same labels: a scalar head against Math-Shepherd's generative [GOOD]/[BAD] token.

    python benchmarks/prm_forms.py [--seeds 0,1,2] [--json F] [--quick]

Labels the shipped base's own solutions as ``benchmarks/prm_controls.py`` does (Math-Shepherd, the base as
completer: 96 training problems x 4 solutions, 24 validation and 24 held-out problems x 2, 4 completions per step),
then for each seed trains a PRM of each form (``--form head``, ``--form generative``) on those labels, 3 epochs, the
epoch chosen by validation AUC against the labels, and reads the held-out labels once per model: ROC AUC of the
step scores against the exact step checker (the ground truth the labels approximate) and against the hard labels.
``--quick``: one seed, 4 training problems x 2 solutions, 2 validation and 2 held-out problems, 2 completions per
step, one epoch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress, stamp_line  # noqa: E402
from prm_controls import label_fixture_sets  # noqa: E402

FORMS = ("head", "generative")
KEYS = ("auc_vs_exact_checker", "auc_vs_hard_labels")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="PRM training seeds (the labels are one set, seed 0)")
    result_args(p, "prm_forms")
    a = p.parse_args()
    if a.quick:
        a.seeds = "0"
    seeds = parse_seeds(a.seeds)
    silence_hub_progress()
    from veriloop.models.loading import load_policy
    from veriloop.prm.train import PRMTrainConfig, train_prm

    started, results = time.time(), []
    with tempfile.TemporaryDirectory(prefix="prm-forms-") as tmp:
        root, policy = Path(tmp), load_policy("builtin:base")
        sizes = label_fixture_sets(root, a.quick, policy)
        for seed in seeds:
            row: dict = {"seed": seed}
            for form in FORMS:
                cfg = PRMTrainConfig(
                    data=str(root / "train.jsonl"),
                    eval_data=str(root / "held.jsonl"),
                    val_data=str(root / "val.jsonl"),
                    out=str(root / f"prm-{form}-{seed}"),
                    form=form,
                    epochs=1 if a.quick else 3,
                    seed=seed,
                )
                s = train_prm(cfg, progress=False)
                row[form] = {**{k: s["eval"][k] for k in KEYS}, "epoch": s["selected_epoch"], "seconds": s["seconds"]}
                print(f"seed {seed} {form}: AUC vs exact checker {s['eval']['auc_vs_exact_checker']}", file=sys.stderr)
            results.append(row)
    result = {"seeds": seeds, "steps": sizes, "results": results, "seconds": round(time.time() - started, 1)}
    out = save(a, "prm_forms", result)
    import json

    print(render([json.loads(out.read_text())]))


PAGE = "prm-forms"


def render(results: list[dict]) -> str:
    lines = [
        "# A PRM's two forms: a scalar head and a generative verdict token",
        "",
        "`benchmarks/prm_forms.py` (see its docstring): Math-Shepherd labels of the shipped base's own solutions, a "
        "PRM of each form trained on the same labels with the same settings, the epoch chosen on validation AUC, the "
        "held-out labels read once per model. The head reads a linear unit off the last hidden state at each step's "
        "end; the generative form reads the LM's own choice between two new tokens, [GOOD] and [BAD], at the same "
        "position. ROC AUC of the held-out step scores; mean ± sd over seeds (sample sd).",
        "",
    ]
    for r in results:
        s = r["steps"]
        lines += [
            f"Labelled steps: {s['train']} training, {s['val']} validation, {s['held']} held-out.",
            "",
            "| seed | head vs exact checker | generative vs exact checker | head vs hard labels | generative vs hard "
            "labels |",
            "|---|---:|---:|---:|---:|",
        ]
        for x in r["results"]:
            h, g = x["head"], x["generative"]
            cells = [fmt([part[key]]) for key in KEYS for part in (h, g)]
            lines.append(f"| {x['seed']} | " + " | ".join(cells) + " |")
        col = lambda form, key, rows=r["results"]: fmt([x[form][key] for x in rows])  # noqa: E731
        lines += [
            f"| mean ± sd | {col('head', KEYS[0])} | {col('generative', KEYS[0])} | {col('head', KEYS[1])} | "
            f"{col('generative', KEYS[1])} |",
            "",
            stamp_line(r),
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
