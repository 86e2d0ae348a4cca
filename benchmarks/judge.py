"""A model-based judge the project trains, on the built-in task: its agreement with the rule, its audit, and GRPO
rewarded by it (the run that shows a policy exploiting it).

    python benchmarks/judge.py [--seeds 0,1,2] [--rl_seeds 0,1] [--steps 60] [--json F] [--quick]

Verdict rows of the shipped base's own solutions (``veriloop judge data``: 4 samples a problem, each with the
outcome rule's verdict): 1500 training problems, 100 validation problems (the epoch is chosen on their rows), 200
held-out problems (read once per judge, at the end). For each of ``--seeds`` a judge is trained (``veriloop judge
train`` at its defaults: the compact rubric, the built-in model fine-tuned) and its held-out agreement, false-accept
and false-reject rates against the rule reported, then its failure-mode audit (``verifiers/judge_cases.py``: 32
held-out problems x 8 families, and the held-out case file ``heldout/judge.jsonl``). Then GRPO runs ``--steps``
steps at the trainer's defaults rewarded by the first seed's judge (``--judge``, the rule recorded beside it),
beside the same run rewarded by the rules, for each of ``--rl_seeds``: the training reward, the rule's accuracy and
the share of the policy's samples the judge accepts and the rule rejects (``reward_judge_false_accept``), over the
first and the last 10 steps, and each final policy's greedy accuracy on the held-out split. ``--quick``: 24/8/8
problems x 2 samples, one epoch, one seed, 2 RL steps, 16 held-out problems.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, parse_seeds, result_args, save, silence_hub_progress, stamp_line  # noqa: E402
from reward_model import QUICK_RL, _base_accuracy, rl_run  # noqa: E402

WINDOW = 10  # steps averaged at the start and at the end of a run


def _window(rows: list[dict], key: str, last: bool) -> float | None:
    rows = rows[-WINDOW:] if last else rows[:WINDOW]
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="judge training seeds")
    p.add_argument("--rl_seeds", default="0,1", help="GRPO seeds, each run with both rewards")
    p.add_argument("--steps", type=int, default=60, help="GRPO steps of each run")
    result_args(p, "judge")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.rl_seeds, a.steps = "0", "0", 2
    seeds, rl_seeds = parse_seeds(a.seeds), parse_seeds(a.rl_seeds)
    silence_hub_progress()
    from veriloop.judge.train import JudgeDataConfig, JudgeTrainConfig, make_verdict_rows, train_judge
    from veriloop.judge.verifier import JudgeVerifier
    from veriloop.models.loading import load_policy
    from veriloop.verifiers.audit import builtin_cases, run_audit
    from veriloop.verifiers.judge_cases import arithmetic_items, failure_mode_cases

    started, judges, runs = time.time(), [], []
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        root, policy = Path(tmp), load_policy("builtin:base")
        sizes = (24, 8, 8, 2) if a.quick else (1500, 100, 200, 4)
        rows = {}
        for split, n, seed in (("train", sizes[0], 1), ("validation", sizes[1], 2), ("heldout", sizes[2], 3)):
            cfg = JudgeDataConfig(problems=n, samples=sizes[3], split=split, seed=seed, output=str(root / f"{split}"))
            rows[split] = make_verdict_rows(cfg, progress=False, policy=policy)
            print(f"{split}: {rows[split]['rows']} rows from {n} problems", file=sys.stderr)
        # the generated failure modes (development) and the held-out case file, read once per judge
        cases = failure_mode_cases(arithmetic_items(4 if a.quick else 32)) + builtin_cases("judge", "heldout")
        for seed in seeds:
            cfg = JudgeTrainConfig(
                data=str(root / "train"),
                val_data=str(root / "validation"),
                eval_data=str(root / "heldout"),
                out=str(root / f"judge-{seed}"),
                seed=seed,
                **({"epochs": 1} if a.quick else {}),
            )
            s = train_judge(cfg, progress=False)
            verifier = JudgeVerifier(path=cfg.out, audit="arithmetic-outcome")
            audit = run_audit("judge", verifier, cases)
            judges.append(
                {
                    "seed": seed,
                    "selected_epoch": s["selected_epoch"],
                    "eval": s["eval"],
                    "audit": [{k: r[k] for k in ("part", "category", "expect", "cases", "false")} for r in audit.rows],
                }
            )
            print(f"judge seed {seed}: held-out agreement {s['eval']['agreement']:.3f}", file=sys.stderr)
        small = QUICK_RL if a.quick else {}
        for seed in rl_seeds:
            for name, extra in (("rules", {}), ("judge", {"judge": str(root / f"judge-{seeds[0]}")})):
                run = rl_run(root, name, seed, a.steps, {**small, **extra})
                steps = [json.loads(line) for line in (root / f"{name}-{seed}" / "metrics.jsonl").open()]
                for key in ("reward_mean", "accuracy", "reward_judge_false_accept"):
                    run[f"{key}_first{WINDOW}"] = _window(steps, key, last=False)
                    run[f"{key}_last{WINDOW}"] = _window(steps, key, last=True)
                runs.append(run)
                print(f"GRPO {name} seed {seed}: held-out {run['heldout_greedy_accuracy']:.3f}", file=sys.stderr)
    base = _base_accuracy({k: v for k, v in small.items() if k.startswith("task.")})
    result = {
        "settings": {
            "problems": sizes[:3],
            "samples": sizes[3],
            "steps": a.steps,
            "seeds": seeds,
            "rl_seeds": rl_seeds,
        },
        "rows": {k: v["rows"] for k, v in rows.items()},
        "correct_share": {k: v["correct_share"] for k, v in rows.items()},
        "judges": judges,
        "rl": runs,
        "base_heldout_greedy_accuracy": base,
        "seconds": round(time.time() - started, 1),
    }
    out = save(a, "judge", result)
    print(render([json.loads(out.read_text())]))


PAGE = "judge"


def render(results: list[dict]) -> str:
    lines = [
        "# A model-based judge on the built-in task",
        "",
        "`benchmarks/judge.py` (see its docstring): the built-in model fine-tuned to write the outcome rule's verdict "
        "on the shipped base's own solutions (`veriloop judge train` at its defaults), the epoch chosen on validation "
        "rows, the held-out rows read once per judge. Then its failure-mode audit, and GRPO at the trainer's defaults "
        "rewarded by the first judge beside the same run rewarded by the rules. Mean ± sd over seeds (sample sd).",
        "",
    ]
    for r in results:
        s = r["settings"]
        lines += [
            f"Verdict rows: {r['rows']['train']} training, {r['rows']['validation']} validation, "
            f"{r['rows']['heldout']} held-out ({s['samples']} samples of each of {s['problems'][0]}, "
            f"{s['problems'][1]} and {s['problems'][2]} problems; the rule calls {r['correct_share']['heldout']:.3f} "
            "of the held-out ones correct).",
            "",
            "| judge seed | epoch chosen | held-out agreement | false-accept rate | false-reject rate | unparseable | "
            "refused |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for j in r["judges"]:
            e = j["eval"]
            lines.append(
                f"| {j['seed']} | {j['selected_epoch']} | {e['agreement']:.3f} | {e['false_accept_rate']:.3f} | "
                f"{e['false_reject_rate']:.3f} | {e['unparseable_rate']:.3f} | {e['refused_rate']:.3f} |"
            )
        col = lambda key, r=r: fmt([j["eval"][key] for j in r["judges"]])  # noqa: E731
        lines += [
            f"| mean ± sd | | {col('agreement')} | {col('false_accept_rate')} | {col('false_reject_rate')} | | |",
            "",
            "The failure-mode audit (false accepts of a `reject` family, false rejects of an `accept` one), per judge: "
            "the generated families (development, `verifiers/judge_cases.py`) and the held-out case file "
            "(`heldout/judge.jsonl`, written by reading before any judge ran on it):",
            "",
            "| part | family | expect | cases | false, per judge seed |",
            "|---|---|---|---:|---|",
        ]
        for i, row in enumerate(r["judges"][0]["audit"]):
            per = ", ".join(str(j["audit"][i]["false"]) for j in r["judges"])
            lines.append(f"| {row.get('part', '')} | {row['category']} | {row['expect']} | {row['cases']} | {per} |")
        w = WINDOW
        lines += [
            "",
            f"GRPO, {s['steps']} steps, seeds {s['rl_seeds']} (first / last {w} steps' means):",
            "",
            "| reward | held-out greedy accuracy | training reward, first / last | rule accuracy, first / last | "
            "judge accepts, rule rejects: first / last |",
            "|---|---:|---:|---:|---:|",
            f"| base (no training) | {r['base_heldout_greedy_accuracy']:.3f} | | | |",
        ]
        for name in ("rules", "judge"):
            rows = [x for x in r["rl"] if x["reward"] == name]
            col = lambda key, rows=rows: fmt([x[key] for x in rows])  # noqa: E731
            fa = (
                f"{col(f'reward_judge_false_accept_first{w}')} / {col(f'reward_judge_false_accept_last{w}')}"
                if name == "judge"
                else ""
            )
            lines.append(
                f"| {name} | {col('heldout_greedy_accuracy')} | {col(f'reward_mean_first{w}')} / "
                f"{col(f'reward_mean_last{w}')} | {col(f'accuracy_first{w}')} / {col(f'accuracy_last{w}')} | {fa} |"
            )
        lines += ["", stamp_line(r), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
