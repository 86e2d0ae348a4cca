"""PRM from automatic labels, test-time strategies against compute, process-supervised GRPO.

    python benchmarks/prm_search.py                 # every stage (about 90 minutes on two cores at --threads 1)
    python benchmarks/prm_search.py --stages search  # one stage, reusing the earlier ones' files
    python benchmarks/prm_search.py --quick          # every stage at toy sizes (a smoke test, in a scratch --out)

``--quick``: the faithful completer alone (one SFT step), 4/2/2 problems x 2 solutions x 2 completions, one PRM and
the ORM for one epoch, 2 search problems at budgets 1 and 2, one step of process-reward GRPO (2 prompts x 2, 4
held-out problems), revision pairs on 8 problems x 4 samples and one SFT step.  Stages (files under --out, default
runs/bench-prm):

0. ``completer``: the faithful completer, the base SFT'd on a teacher whose subtraction slips are
   carried forward, never repaired (see ``stage_completer``).
1. ``label``: Math-Shepherd labels of the shipped base's solutions (4 per problem), every step
   prefix completed N=8 times by each completer (``--completers faithful,base``): 400 train,
   100 validation and 100 held-out problems.
2. ``train``: PRM variants (``--variants``: completer x targets, and an ORM), each for up to 5
   epochs with the epoch chosen by validation AUC against its own labels; the PRM the later
   stages use is the variant with the best validation AUC against the exact process checker
   (ground truth, never used in training or labelling).  Held-out AUCs are read once per variant.
3. ``search``: every strategy at budgets 1-16 on 200 held-out problems with that PRM, plus
   best-of-N ranked by the ORM; accuracy and mean tokens per problem, by difficulty bin.
4. ``grpo``: GRPO from the base with the outcome reward, with PRM step rewards alone
   (grpo_process), with both (outcome_weight 1), and with the PRM refreshed on the policy's own
   samples every 10 steps; same steps and samples; held-out accuracy and wrong-steps rate.
5. ``revision``: wrong -> right pairs (nearest by edit distance) from the base's samples on
   2,000 train problems, a revision model SFT'd on them from the base, and the ``revision``
   strategy (chains of 1-16 attempts) selecting by PRM, majority or last attempt.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_args, save  # noqa: E402

from veriloop.config import build_config  # noqa: E402
from veriloop.evaluation.evaluate import EvalConfig, evaluate  # noqa: E402
from veriloop.models.loading import load_policy  # noqa: E402
from veriloop.prm.label import LabelConfig, label_steps  # noqa: E402
from veriloop.prm.train import PRMTrainConfig, train_prm  # noqa: E402
from veriloop.search.run import SearchConfig, run_search  # noqa: E402
from veriloop.tasks.config import TaskConfig  # noqa: E402
from veriloop.training.config import TrainConfig  # noqa: E402
from veriloop.training.trainer import Trainer  # noqa: E402

STAGES = ("completer", "label", "train", "search", "grpo", "revision")
QUICK_TASK = {"arithmetic": {"heldout_size": 4, "validation_size": 4}}  # the grpo stage's held-out reads


def stage_completer(out: Path, quick: bool) -> None:
    """A completer that computes with whatever a prefix wrote, wrong values included: the base SFT'd on
    the task's teacher with its multiplication slips off and its subtraction slips carried forward
    (``7-3=-4;-4*2=-8``), never repaired.  The shipped base repairs them, so its labels cannot see them."""
    shutil.rmtree(out / "completer", ignore_errors=True)
    teacher = {"multiplication_slip": 0.0, "subtraction_slip": 0.3, "compensate_slips": False}
    cfg = build_config(
        TrainConfig,
        {"algo": "sft", "run_dir": str(out / "completer"), "steps": 3 if quick else 300, "task": {"teacher": teacher}},
        {},
    )
    Trainer(cfg, progress=True).train()


def completer_path(out: Path, completer: str) -> str:
    """``faithful``: the stage's model; ``base``: the policy itself (the shipped base); else a directory."""
    return {"faithful": str(out / "completer" / "final"), "base": ""}.get(completer, completer)


def labels_file(out: Path, completer: str, split: str) -> Path:
    return out / f"labels-{completer}-{split}.jsonl"


def stage_label(out: Path, completers: list[str], quick: bool) -> None:
    """Math-Shepherd labels of the base's solutions, completed by each completer, on train, validation and
    held-out problems (the same solutions for every completer: one sampling seed per split)."""
    policy = load_policy("builtin:base")
    sizes = {"train": 4, "validation": 2, "heldout": 2} if quick else {"train": 400, "validation": 100, "heldout": 100}
    for completer in completers:
        path = completer_path(out, completer)
        comp = load_policy(path) if path else None
        for split, n in sizes.items():
            cfg = LabelConfig(
                problems=n,
                solutions=2 if quick else 4,
                completions=2 if quick else 8,
                split=split,
                output=str(labels_file(out, completer, split)),
            )
            cfg.completer = path
            s = label_steps(cfg, progress=True, policy=policy, completer=comp)
            print(
                f"labels {completer}/{split}: {s['solutions']} solutions, {s['steps']} steps, "
                f"{s['completions']} completions, mean soft label {s['mean_soft_label']:.3f}, {s['seconds']} s"
            )


# name -> (completer whose labels it trains on, targets, cumulative, loss)
PRM_VARIANTS = {
    "prm-base-step": ("base", "hard", False, "bce"),
    "prm-faithful-step": ("faithful", "hard", False, "bce"),
    "prm-faithful-min": ("faithful", "hard", True, "bce"),
    "orm-faithful": ("faithful", "outcome", False, "bce"),
}


def stage_train(out: Path, variants: list[str], quick: bool) -> None:
    """Each variant: up to 5 epochs, the epoch kept by validation AUC against its own targets; then the PRM
    used by the later stages (``out/prm``) is the PRM variant with the best validation AUC against the
    exact checker, and the ORM (``out/orm``) the ORM.  Held-out AUCs are reported once, for every variant."""
    results = {}
    for name in variants:
        completer, labels, cumulative, loss = PRM_VARIANTS[name]
        cfg = PRMTrainConfig(
            data=str(labels_file(out, completer, "train")),
            val_data=str(labels_file(out, completer, "validation")),
            eval_data=str(labels_file(out, completer, "heldout")),
            out=str(out / name),
            labels=labels,
            loss=loss,
            cumulative=cumulative,
            epochs=1 if quick else 5,
            aggregation="last" if labels == "outcome" else "min",
        )
        s = train_prm(cfg, progress=True)
        # the chosen epoch scored against the exact checker on validation (a choice between variants, below)
        from veriloop.prm.model import load_prm
        from veriloop.prm.train import evaluate_prm, load_labels

        val = evaluate_prm(load_prm(out / name), load_labels(cfg.val_data), labels, cumulative)
        results[name] = (s, val)
    prms = [n for n in variants if PRM_VARIANTS[n][1] != "outcome"]
    chosen = max(prms, key=lambda n: results[n][1]["auc_vs_exact_checker"] or 0.0)
    for link, target in (("prm", chosen), ("orm", next((n for n in variants if n.startswith("orm")), None))):
        if target:
            shutil.rmtree(out / link, ignore_errors=True)
            shutil.copytree(out / target, out / link)
    print(
        "\n| model | completer | targets | epoch (chosen on validation) | validation AUC vs exact checker | "
        "held-out AUC vs its labels | held-out AUC vs exact checker | `clean` | `mul` | `sub-inner` | train s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in variants:
        s, val = results[name]
        completer, labels, cumulative, _ = PRM_VARIANTS[name]
        e, tags = s["eval"], s["eval"]["auc_vs_exact_checker_by_tag"]
        target = "outcome" if labels == "outcome" else ("hard, running min" if cumulative else "hard, per step")
        by = " | ".join(
            f"{tags[t]['auc']:.3f}" if t in tags and tags[t]["auc"] is not None else "-"
            for t in ("clean", "mul", "sub-inner")
        )
        print(
            f"| {name}{' (used below)' if name == chosen else ''} | {completer} | {target} | {s['selected_epoch']} "
            f"| {val['auc_vs_exact_checker']:.3f} | {e['auc_vs_targets']:.3f} | {e['auc_vs_exact_checker']:.3f} "
            f"| {by} | {s['seconds']} |"
        )
    for completer in sorted({PRM_VARIANTS[n][0] for n in variants}):
        e = next(results[n][0]["eval"] for n in variants if PRM_VARIANTS[n][0] == completer)
        print(
            f"labels of the {completer} completer (held-out): soft labels rank steps with AUC "
            f"{e['soft_labels_auc_vs_exact_checker']:.3f} against the exact checker; "
            f"{e['unsound_steps_labelled_good']:.1%} of unsound steps carry a good hard label"
        )
    (out / "prm-variants.json").write_text(
        json.dumps({n: {"train": s, "validation": v} for n, (s, v) in results.items()}, indent=1, default=str)
    )


def stage_search(out: Path, problems: int, quick: bool) -> None:
    budgets = "1,2" if quick else "1,2,4,8,16"
    cfg = SearchConfig(prm=str(out / "prm"), problems=problems, budgets=budgets, out=str(out / "search"))
    s = run_search(cfg, progress=True)
    orm = SearchConfig(
        prm=str(out / "orm"), problems=problems, budgets=budgets, strategy="best_of_n", out=str(out / "search-orm")
    )
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


def stage_grpo(out: Path, steps: int, runs: list[str], quick: bool = False) -> None:
    rows = {}
    task = build_config(TaskConfig, QUICK_TASK if quick else {}, {})
    for name in runs:
        extra = json.loads(json.dumps(GRPO_RUNS[name]))
        if extra["algo"] == "grpo_process":
            extra.setdefault("process", {})["prm"] = str(out / "prm")
            extra["process"]["replay_data"] = json.loads((out / "prm" / "prm.json").read_text())["data"]
        run_dir = out / f"grpo-{name.replace('+', '-')}"
        shutil.rmtree(run_dir, ignore_errors=True)  # this benchmark's own earlier run of the stage
        if quick:
            extra.update(task=QUICK_TASK, rollout={"prompts_per_step": 2, "group_size": 2})
        cfg = build_config(TrainConfig, {"run_dir": str(run_dir), "steps": steps, **extra}, {})
        t0 = time.time()
        trainer = Trainer(cfg, progress=True)
        trainer.train()
        r = evaluate(trainer.policy, task.build().heldout(), task.eval_verifiers(), EvalConfig(n_samples=0))
        rows[name] = (r, time.time() - t0)
    base = evaluate(load_policy("builtin:base"), task.build().heldout(), task.eval_verifiers(), EvalConfig(n_samples=0))
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

    for name, split, n in (("", "train", 8 if quick else 2000), ("-heldout", "heldout", 8 if quick else 100)):
        s = make_revision_pairs(
            RevisionPairsConfig(
                problems=n,
                split=split,
                history=1,  # single pairs: benchmarks/revision.py has chains
                samples=4 if quick else 8,
                output=str(out / f"revision-pairs{name}.jsonl"),
            )
        )
        print(
            f"revision pairs ({split}): {s['pairs']} pairs from {s['problems_with_pairs']} of {s['problems']} "
            "problems, "
            f"mean edit distance {s['mean_edit_distance']:.1f}, {s['seconds']} s"
        )
    task = {
        "name": "jsonl",
        "data": str(out / "revision-pairs.jsonl"),
        "verifier": "arithmetic-outcome",
        "heldout_data": str(out / "revision-pairs-heldout.jsonl"),
    }
    shutil.rmtree(out / "revision-sft", ignore_errors=True)  # this benchmark's own earlier run of the stage
    cfg = build_config(
        TrainConfig,
        {"algo": "sft", "run_dir": str(out / "revision-sft"), "task": task, "steps": 1 if quick else 100},
        {},
    )
    Trainer(cfg, progress=True).train()
    budgets = "1,2" if quick else "1,2,4,8,16"
    print("\n| strategy | select | budget (attempts) | accuracy | mean tokens |\n|---|---|---|---|---|")
    for select in ("prm",) if quick else ("prm", "majority", "last"):
        sc = SearchConfig(
            prm=str(out / "prm"),
            problems=problems,
            budgets=budgets,
            strategy="revision",
            revision_policy=str(out / "revision-sft" / "final"),
            revision_select=select,
            revision_history=1,
            out=str(out / f"search-revision-{select}"),
        )
        r = run_search(sc, progress=True)
        for b, c in r["strategies"]["revision"].items():
            print(f"| revision | {select} | {b} | {c['accuracy']:.3f} | {c['mean_tokens']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        default="",
        help="directory of every stage's files (default: runs/bench-prm; --quick: a scratch directory, removed after)",
    )
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated: " + ", ".join(STAGES))
    ap.add_argument(
        "--completers",
        default="faithful,base",
        help="label stage: faithful (stage completer's model) | base (the policy) | a model directory",
    )
    ap.add_argument("--variants", default=",".join(PRM_VARIANTS), help="train stage: " + ", ".join(PRM_VARIANTS))
    ap.add_argument("--problems", type=int, default=200, help="held-out problems in the search stage")
    ap.add_argument("--grpo_steps", type=int, default=200, help="steps of each GRPO run")
    ap.add_argument("--grpo_runs", default=",".join(GRPO_RUNS), help="grpo stage runs: " + ", ".join(GRPO_RUNS))
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 = torch's default")
    result_args(ap, "prm_search")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.grpo_steps, args.threads, args.grpo_runs = 2, 1, 1, "process"
        if args.completers == ap.get_default("completers"):
            args.completers = "faithful"
        if args.variants == ap.get_default("variants"):
            args.variants = "prm-faithful-step,orm-faithful"
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    scratch = tempfile.mkdtemp(prefix="prm-search-quick-") if args.quick and not args.out else ""
    out = Path(args.out or scratch or "runs/bench-prm")
    out.mkdir(parents=True, exist_ok=True)
    seconds = {}
    for stage in args.stages.split(","):
        t0 = time.time()
        if stage == "completer":
            stage_completer(out, args.quick)
        elif stage == "label":
            stage_label(out, args.completers.split(","), args.quick)
        elif stage == "train":
            stage_train(out, args.variants.split(","), args.quick)
        elif stage == "search":
            stage_search(out, args.problems, args.quick)
        elif stage == "grpo":
            stage_grpo(out, args.grpo_steps, args.grpo_runs.split(","), args.quick)
        elif stage == "revision":
            stage_revision(out, args.problems, args.quick)
        else:
            raise SystemExit(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
        seconds[stage] = time.time() - t0
        print(f"[{stage}: {seconds[stage]:.0f} s]\n")
    files = {f.name: json.loads(f.read_text()) for f in sorted(out.glob("*.json"))}  # the stages' own summaries
    save(args, "prm_search", {"args": vars(args), "out": str(out), "stage_seconds": seconds, "files": files})
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
