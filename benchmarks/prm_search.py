"""PRM from automatic labels, test-time strategies against compute, process-supervised GRPO.

    python benchmarks/prm_search.py                 # every stage (about 25 minutes on two cores)
    python benchmarks/prm_search.py --stages search  # one stage, reusing the earlier ones' files

Stages (files under --out, default runs/bench-prm):

1. ``label``: Math-Shepherd labels from the shipped base (it writes and completes the
   solutions): 400 train problems x 4 solutions x N=8, and 100 held-out problems x 4.
2. ``train``: a PRM (hard labels, BCE) and an ORM (outcome labels) on the same solutions;
   ROC AUC of held-out step scores against the held-out labels and against the exact process
   checker (ground truth, never used in training).
3. ``search``: every strategy at budgets 1-16 on 200 held-out problems with the PRM, plus
   best-of-N ranked by the ORM; accuracy and mean tokens per problem, by difficulty bin.
4. ``grpo``: GRPO from the base with the outcome reward, with PRM step rewards alone
   (grpo_process) and with both (outcome_weight 1), same steps and samples; held-out accuracy
   and right-answer-wrong-steps rate.
5. ``revision``: wrong -> right pairs (nearest by edit distance) from the base's samples on
   2,000 train problems, a revision model SFT'd on them from the base, and the ``revision``
   strategy (chains of 1-16 attempts) selecting by PRM, majority or last attempt.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.prm.label import LabelConfig, label_steps
from veriloop.prm.train import PRMTrainConfig, train_prm
from veriloop.search.run import SearchConfig, run_search
from veriloop.training.config import build_config
from veriloop.training.run_config import TaskConfig, TrainConfig
from veriloop.training.trainer import Trainer

STAGES = ("completer", "label", "train", "search", "grpo", "revision")


def stage_completer(out: Path, quick: bool) -> None:
    """A completer that computes with whatever a prefix wrote, wrong values included: the base SFT'd on
    the task's teacher with its multiplication slips off and its subtraction slips carried forward
    (``7-3=-4;-4*2=-8``), never repaired.  The shipped base repairs them, so its labels cannot see them."""
    shutil.rmtree(out / "completer", ignore_errors=True)
    teacher = {"multiplication_slip": 0.0, "subtraction_slip": 0.3, "compensate_slips": False}
    cfg = build_config(TrainConfig, {"algo": "sft", "run_dir": str(out / "completer"), "steps": 3 if quick else 300,
                                     "task": {"teacher": teacher}}, {})  # fmt: skip
    Trainer(cfg, progress=True).train()


def completer_path(out: Path, completer: str) -> str:
    """``faithful``: the stage's model; ``base``: the policy itself (the shipped base); else a directory."""
    return {"faithful": str(out / "completer" / "final"), "base": ""}.get(completer, completer)


def stage_label(out: Path, completer: str, quick: bool) -> None:
    policy = load_policy("builtin:base")
    completer = completer_path(out, completer)
    comp = load_policy(completer) if completer else None
    n_train, n_held = (40, 20) if quick else (400, 100)
    for name, cfg in {
        "train": LabelConfig(problems=n_train, solutions=4, completions=8, output=str(out / "labels-train.jsonl")),
        "heldout": LabelConfig(
            problems=n_held, solutions=4, completions=8, split="heldout", output=str(out / "labels-heldout.jsonl")
        ),  # fmt: skip
    }.items():
        cfg.completer = completer
        s = label_steps(cfg, progress=True, policy=policy, completer=comp)
        print(f"labels {name}: {s['solutions']} solutions, {s['steps']} steps, {s['completions']} completions, "
              f"mean soft label {s['mean_soft_label']:.3f}, {s['seconds']} s")  # fmt: skip


def stage_train(out: Path, quick: bool) -> None:
    rows = []
    for name, labels in (("prm", "hard"), ("orm", "outcome")):
        cfg = PRMTrainConfig(data=str(out / "labels-train.jsonl"), eval_data=str(out / "labels-heldout.jsonl"),
                             out=str(out / name), labels=labels, loss="bce", epochs=1 if quick else 5,
                             aggregation="min" if name == "prm" else "last", cumulative=name == "prm")  # fmt: skip
        s = train_prm(cfg, progress=True)
        rows.append((name, s))
    print("\n| model | labels (PRM: running min) | held-out steps | AUC vs held-out labels | AUC vs exact checker "
          "| train s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, s in rows:
        e = s["eval"]
        print(f"| {name} | {'hard' if name == 'prm' else 'outcome'} | {e['steps']} | {e['auc_vs_hard_labels']:.3f} | "
              f"{e['auc_vs_exact_checker']:.3f} | {s['seconds']} |")  # fmt: skip
    e = rows[0][1]["eval"]
    print("by problem class (AUC vs exact checker):", json.dumps(e["auc_vs_exact_checker_by_tag"]))
    print(f"\nThe soft labels themselves rank held-out steps with AUC {e['soft_labels_auc_vs_exact_checker']:.3f} "
          f"against the exact checker; {e['unsound_steps_labelled_good']:.1%} of unsound held-out steps carry a "
          "good hard label (the completer repairs them).")  # fmt: skip


def stage_search(out: Path, problems: int, quick: bool) -> None:
    budgets = "1,2" if quick else "1,2,4,8,16"
    cfg = SearchConfig(prm=str(out / "prm"), problems=problems, budgets=budgets, out=str(out / "search"))
    s = run_search(cfg, progress=True)
    orm = SearchConfig(prm=str(out / "orm"), problems=problems, budgets=budgets, strategy="best_of_n",
                       out=str(out / "search-orm"))  # fmt: skip
    o = run_search(orm, progress=True)
    print((out / "search" / "table.md").read_text())
    print("best-of-N ranked by the ORM (last-step score):")
    for b, c in o["strategies"]["best_of_n"].items():
        print(f"| best_of_n (ORM) | {b} | {c['accuracy']:.3f} | {c['mean_tokens']:.1f} |")
    print(f"search: {s['seconds']} s, ORM search: {o['seconds']} s")


GRPO_RUNS = {
    "outcome": {"algo": "grpo"},
    "process": {"algo": "grpo_process"},
    "process+outcome": {"algo": "grpo_process", "process": {"outcome_weight": 1.0}},
    # iterative PRM: relabel the policy's own samples every 10 steps, replay 10% of older labels
    "process+refresh": {"algo": "grpo_process", "process": {"refresh_every": 10}},
}


def stage_grpo(out: Path, steps: int, runs: list[str]) -> None:
    rows = {}
    for name in runs:
        extra = json.loads(json.dumps(GRPO_RUNS[name]))
        if extra["algo"] == "grpo_process":
            extra.setdefault("process", {})["prm"] = str(out / "prm")
            extra["process"]["replay_data"] = str(out / "labels-train.jsonl")
        run_dir = out / f"grpo-{name.replace('+', '-')}"
        shutil.rmtree(run_dir, ignore_errors=True)  # this benchmark's own earlier run of the stage
        cfg = build_config(TrainConfig, {"run_dir": str(run_dir), "steps": steps, **extra}, {})
        t0 = time.time()
        trainer = Trainer(cfg, progress=True)
        trainer.train()
        r = evaluate(
            trainer.policy, TaskConfig().build().heldout(), TaskConfig().eval_verifiers(), EvalConfig(n_samples=0)
        )
        rows[name] = (r, time.time() - t0)
    base = evaluate(load_policy("builtin:base"), TaskConfig().build().heldout(), TaskConfig().eval_verifiers(),
                    EvalConfig(n_samples=0))  # fmt: skip
    print("\n| run | held-out greedy accuracy | process rate | right answer, wrong steps | train+eval s |")
    print("|---|---|---|---|---|")
    print(f"| base | {base.greedy_accuracy:.3f} | {base.process_rate:.3f} | {base.wrong_steps_rate:.3f} | - |")
    for name, (r, sec) in rows.items():
        print(
            f"| GRPO {name} | {r.greedy_accuracy:.3f} | {r.process_rate:.3f} | {r.wrong_steps_rate:.3f} | {sec:.0f} |"
        )
    (out / f"grpo-{'-'.join(runs).replace('+', '-')}.json").write_text(
        json.dumps({k: v[0].as_dict() for k, v in rows.items()}, indent=1, default=str)
    )


def stage_revision(out: Path, problems: int, quick: bool) -> None:
    from veriloop.search.revision import RevisionPairsConfig, make_revision_pairs

    for name, split, n in (("", "train", 200 if quick else 2000), ("-heldout", "heldout", 100)):
        s = make_revision_pairs(
            RevisionPairsConfig(problems=n, split=split, output=str(out / f"revision-pairs{name}.jsonl"))
        )
        print(f"revision pairs ({split}): {s['pairs']} pairs from {s['problems_with_pairs']} of {s['problems']} "
              "problems, "
              f"mean edit distance {s['mean_edit_distance']:.1f}, {s['seconds']} s")  # fmt: skip
    task = {"name": "jsonl", "data": str(out / "revision-pairs.jsonl"), "verifier": "arithmetic-outcome",
            "heldout_data": str(out / "revision-pairs-heldout.jsonl")}  # fmt: skip
    shutil.rmtree(out / "revision-sft", ignore_errors=True)  # this benchmark's own earlier run of the stage
    cfg = build_config(TrainConfig, {"algo": "sft", "run_dir": str(out / "revision-sft"), "task": task,
                                     "steps": 3 if quick else 100}, {})  # fmt: skip
    Trainer(cfg, progress=True).train()
    budgets = "1,2" if quick else "1,2,4,8,16"
    print("\n| strategy | select | budget (attempts) | accuracy | mean tokens |\n|---|---|---|---|---|")
    for select in ("prm", "majority", "last"):
        sc = SearchConfig(prm=str(out / "prm"), problems=problems, budgets=budgets, strategy="revision",
                          revision_policy=str(out / "revision-sft" / "final"), revision_select=select,
                          out=str(out / f"search-revision-{select}"))  # fmt: skip
        r = run_search(sc, progress=True)
        for b, c in r["strategies"]["revision"].items():
            print(f"| revision | {select} | {b} | {c['accuracy']:.3f} | {c['mean_tokens']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/bench-prm")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated: " + ", ".join(STAGES))
    ap.add_argument("--completer", default="faithful",
                    help="faithful (stage completer's model) | base (the policy) | a model directory")  # fmt: skip
    ap.add_argument("--problems", type=int, default=200, help="held-out problems in the search stage")
    ap.add_argument("--grpo_steps", type=int, default=200, help="steps of each GRPO run")
    ap.add_argument("--grpo_runs", default=",".join(GRPO_RUNS), help="grpo stage runs: " + ", ".join(GRPO_RUNS))
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks that every stage runs")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.grpo_steps = min(args.problems, 8), min(args.grpo_steps, 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stage in args.stages.split(","):
        t0 = time.time()
        if stage == "completer":
            stage_completer(out, args.quick)
        elif stage == "label":
            stage_label(out, args.completer, args.quick)
        elif stage == "train":
            stage_train(out, args.quick)
        elif stage == "search":
            stage_search(out, args.problems, args.quick)
        elif stage == "grpo":
            stage_grpo(out, args.grpo_steps, args.grpo_runs.split(","))
        elif stage == "revision":
            stage_revision(out, args.problems, args.quick)
        else:
            raise SystemExit(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
        print(f"[{stage}: {time.time() - t0:.0f} s]\n")


if __name__ == "__main__":
    main()
