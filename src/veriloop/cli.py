"""``veriloop <command>``: parse options, call the packages, report errors plainly.

Every command takes ``--config FILE.yaml`` and one ``--section.field VALUE`` flag per
option (``veriloop <command> --help`` lists them with defaults).  Flags override the file.

Exit status 2: the input is wrong (``InputError``, a config error, a missing file), said in one
line; 1: anything else escaping a command, a bug in veriloop, shown with its traceback (``audit``
also exits 1 when it finds false accepts or rejects); 130: interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from veriloop.config import ConfigError, add_arguments, config_from_args, to_dict
from veriloop.errors import InputError

EXIT_BUG = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="veriloop", description=__doc__.split("\n")[0])
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (repeatable): it may register tasks, verifiers, estimators, "
                        "objectives or search strategies (veriloop.registry)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_commands(sub)
    _add_verifier_commands(sub)
    sub.add_parser("algos", help="list the training recipes (--algo NAME) and what each sets")
    _add_prm_and_search_commands(sub)
    return parser


def _command(sub, name: str, cls, help_text: str, defaults=None) -> argparse.ArgumentParser:
    """A command whose options are the fields of the config dataclass ``cls``."""
    # Not ArgumentDefaultsHelpFormatter: every option flag's argparse default is None (a flag not given leaves the
    # config's value alone), so it would print "(default: None)"; add_arguments writes each option's true default.
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--config", metavar="FILE.yaml", help="YAML file of options (flags override it)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_arguments(p, cls, defaults)
    return p


def _add_run_commands(sub) -> None:
    from veriloop.demo import DemoConfig, demo_defaults
    from veriloop.evaluation.run import EvalRunConfig
    from veriloop.pipeline import PipelineConfig
    from veriloop.training.config import TrainConfig

    _command(sub, "sft", TrainConfig, "supervised fine-tuning on the task's teacher traces: the sft recipe from a "
             "new built-in model (makes the base)", _sft_defaults())  # fmt: skip
    p = _command(sub, "train", TrainConfig,
                 "train a policy with any recipe (--algo, default grpo); resumable run directory")  # fmt: skip
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint that "
                   "matches its manifest; with none (killed before its first), start it over from step 0")  # fmt: skip
    _command(sub, "eval", EvalRunConfig,
             "held-out evaluation: greedy/sampled accuracy, pass@k, format, process, wrong steps")  # fmt: skip
    _command(sub, "demo", DemoConfig, "evaluate the shipped base, train it with GRPO, evaluate again, print the table",
             demo_defaults())  # fmt: skip
    _command(sub, "pipeline", PipelineConfig, "the R1 recipe: cold start, RL, rejection sampling, SFT from the base, "
             "RL again (or R1-Zero); one run directory per stage, resumable")  # fmt: skip
    p = sub.add_parser("report", help="write plots/ and report.html for a run directory")
    p.add_argument("run_dir")


def _add_verifier_commands(sub) -> None:
    sub.add_parser("verifiers", help="list the registered verifiers")
    p = sub.add_parser("verify", help="grade a JSONL file of {completion, reference} rows with a verifier")
    p.add_argument("--verifier", required=True, help="verifier name (see `veriloop verifiers`)")
    p.add_argument("--input", required=True, metavar="IN.jsonl", help="rows with completion and reference")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with score, outcome, components")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="verifier option (repeatable), e.g. percent=either, partial_credit=true")  # fmt: skip
    p.add_argument("--workers", type=int, default=0, help="processes; 0 = every core")
    p = sub.add_parser("audit", help="false accepts and false rejects of a verifier, by part and family")
    p.add_argument("verifier", help="verifier name")
    p.add_argument("--part", choices=("development", "heldout", "all"), default="all",
                   help="built-in cases: development (the reader is tuned on them), heldout (written from reading, "
                        "never edited), all")
    p.add_argument("--cases", action="append", default=[], metavar="FILE.jsonl",
                   help="your cases {completion, reference, expect: accept|reject, family} (repeatable; part user)")
    p.add_argument("--no-builtin", action="store_true", help="only the cases given with --cases")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="verifier option")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON (totals per part, every failure)")


def _add_prm_and_search_commands(sub) -> None:
    from veriloop.prm.label import LabelConfig
    from veriloop.prm.train import PRMTrainConfig
    from veriloop.search.allocate import AllocateConfig
    from veriloop.search.revision import RevisionPairsConfig
    from veriloop.search.run import SearchConfig

    prm = sub.add_parser("prm", help="process reward models: label steps, train, score")
    prm_sub = prm.add_subparsers(dest="prm_command", required=True, metavar="PRM_COMMAND")
    _command(prm_sub, "label", LabelConfig, "Math-Shepherd step labels: complete each step prefix N times, JSONL out")
    _command(prm_sub, "train", PRMTrainConfig, "train a PRM (or an ORM with --labels outcome) on step labels")
    p = prm_sub.add_parser("score", help="score JSONL rows {prompt or reference, completion} with a PRM")
    p.add_argument("--prm", required=True, metavar="DIR", help="PRM directory from `veriloop prm train`")
    p.add_argument("--input", required=True, metavar="IN.jsonl")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with step_scores and score")
    p.add_argument("--aggregation", default="", help="min | prod | last; default: the PRM's own")
    _command(sub, "search", SearchConfig, "test-time strategies at several budgets: summary.json, table, plot")
    _command(sub, "allocate", AllocateConfig,
             "compute-optimal allocation: difficulty bins and a strategy per bin chosen on validation, "
             "applied to held-out")  # fmt: skip
    _command(sub, "revision-pairs", RevisionPairsConfig,
             "wrong -> right demonstrations (nearest by edit distance) for a revision model")  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    progress = not getattr(args, "quiet", False)
    if args.command in ("sft", "train", "eval", "demo"):
        return _run_training(args, progress)
    if args.command == "pipeline":
        from veriloop.pipeline import PipelineConfig, run_pipeline

        cfg = config_from_args(PipelineConfig, args)
        run_pipeline(cfg, progress=progress)
        print(open(f"{cfg.run_dir}/table.md").read())
        print(f"pipeline directory: {cfg.run_dir} (pipeline.json, table.md, one run directory per stage)")
    if args.command == "report":
        from veriloop.report.report import write_report

        print(write_report(args.run_dir))
    elif args.command == "verifiers":
        from veriloop import verifiers

        for name in verifiers.names():
            print(name)
    elif args.command == "verify":
        from veriloop.verifiers.batch import verify_file

        summary = verify_file(args.verifier, args.input, args.output, _options(args.option), args.workers)
        print(summary.text())
        print(f"wrote {args.output}")
    elif args.command == "audit":
        return _audit(args)
    elif args.command == "prm":
        return _prm(args, progress)
    elif args.command in ("search", "revision-pairs", "allocate"):
        return _search(args, progress)
    elif args.command == "algos":
        from veriloop.training.recipes import RECIPES

        for name, recipe in RECIPES.items():
            sets = ", ".join(f"{k}={v}" for k, v in recipe.overrides.items()) or "(the defaults)"
            print(f"{name:<11} {recipe.description}\n{'':<11} sets: {sets}")
    return 0


def _run_training(args: argparse.Namespace, progress: bool) -> int:
    if args.command in ("sft", "train"):
        from veriloop.report.report import write_report
        from veriloop.training.config import TrainConfig
        from veriloop.training.recipes import SFT_COMMAND_DEFAULTS
        from veriloop.training.trainer import Trainer

        if args.command == "sft":
            cfg = config_from_args(TrainConfig, args, base=SFT_COMMAND_DEFAULTS)
            trainer = Trainer(cfg, progress=progress)
        elif args.resume:
            cfg = _resume_config(args)
            trainer = Trainer(cfg, resume=True, progress=progress)
        else:
            cfg = config_from_args(TrainConfig, args)
            trainer = Trainer(cfg, progress=progress)
        trainer.train()
        write_report(cfg.run_dir)
        made = "checkpoints/: resume it" if trainer.stop_signal else "final/"  # preempted runs have no final/
        print(f"run directory: {cfg.run_dir} (report.html, metrics.jsonl, {made})")
    elif args.command == "eval":
        from veriloop.evaluation.run import EvalRunConfig, run_eval

        run_eval(config_from_args(EvalRunConfig, args))
    else:
        from veriloop.demo import DemoConfig, demo_defaults, run_demo

        run_demo(config_from_args(DemoConfig, args, base=to_dict(demo_defaults())), progress=progress)
    return 0


def _search(args: argparse.Namespace, progress: bool) -> int:
    if args.command == "search":
        from veriloop.search.run import SearchConfig, run_search

        cfg = config_from_args(SearchConfig, args)
        summary = run_search(cfg, progress=progress)
        print(open(f"{cfg.out}/table.md").read())
        print(f"wrote {cfg.out}/summary.json, table.md, accuracy_vs_tokens.png, results.jsonl "
              f"({summary['seconds']} s)")  # fmt: skip
    elif args.command == "allocate":
        from veriloop.search.allocate import AllocateConfig, run_allocate

        cfg = config_from_args(AllocateConfig, args)
        summary = run_allocate(cfg, progress=progress)
        print(open(f"{cfg.out}/table.md").read())
        print(f"wrote {cfg.out}/summary.json, table.md, validation.jsonl, heldout.jsonl ({summary['seconds']} s)")
    else:
        from veriloop.search.revision import RevisionPairsConfig, make_revision_pairs

        print(json.dumps(make_revision_pairs(config_from_args(RevisionPairsConfig, args), progress=progress), indent=2))
    return 0


def _prm(args: argparse.Namespace, progress: bool) -> int:
    if args.prm_command == "label":
        from veriloop.prm.label import LabelConfig, label_steps

        print(json.dumps(label_steps(config_from_args(LabelConfig, args), progress=progress), indent=2))
    elif args.prm_command == "train":
        from veriloop.prm.train import PRMTrainConfig, train_prm

        cfg = config_from_args(PRMTrainConfig, args)
        print(json.dumps(train_prm(cfg, progress=progress), indent=2))
        print(f"wrote {cfg.out} (load it with veriloop.verifiers.get('prm', path={cfg.out!r}))")
    else:
        from veriloop.prm.train import score_file

        print(json.dumps(score_file(args.prm, args.input, args.output, args.aggregation), indent=2))
    return 0


def _options(pairs: list[str]) -> dict:
    """``KEY=VALUE`` strings -> verifier options; values read as YAML scalars (numbers, booleans)."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--option must be KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def _audit(args: argparse.Namespace) -> int:
    from veriloop.verifiers import get
    from veriloop.verifiers.audit import builtin_cases, builtin_names, load_cases, run_audit

    cases = [] if args.no_builtin else builtin_cases(args.verifier, args.part)
    for path in args.cases:
        cases += load_cases(path)
    if not cases:
        known = ", ".join(builtin_names())
        raise InputError(f"no audit cases for {args.verifier!r}: built-in cases exist for {known}; add --cases FILE")
    verifier = get(args.verifier, **_options(args.option))
    report = run_audit(args.verifier, verifier, cases)
    print(report.table())
    sandboxed = hasattr(verifier, "limits")  # code and the program verifiers run completions in the sandbox
    if sandboxed:
        from veriloop.verifiers.sandbox import isolation

        print(isolation().describe())
    if args.json:
        from veriloop.io import atomic_write_json

        atomic_write_json(args.json, {**report.to_json(), **({"sandbox": isolation().layers} if sandboxed else {})})
    return 1 if report.false_accepts or report.false_rejects else 0


def _resume_config(args: argparse.Namespace):
    """What the resumed run will be: the run's config.yaml (checked against the run's manifest.json), then
    ``--config FILE`` and flags on top (e.g. more --steps).  The trainer compares it with the checkpoint's config
    and refuses a change that is not safe (``training/checkpoint.py``: SAFE_TO_CHANGE)."""
    from pathlib import Path

    from veriloop.config import build_config, load_yaml, overrides_from_args
    from veriloop.training.checkpoint import flatten
    from veriloop.training.config import TrainConfig
    from veriloop.training.run_dir import read_run_config

    overrides = overrides_from_args(args)
    if overrides.get("run_dir", args.resume) != args.resume:
        raise InputError(f"--run_dir {overrides['run_dir']} with --resume {args.resume}: a resumed run stays in "
                         "its own directory; give only --resume")  # fmt: skip
    data = read_run_config(Path(args.resume))
    extra = flatten(load_yaml(args.config)) if args.config else {}  # as if each of its keys were a flag
    return build_config(TrainConfig, data, {**extra, **overrides, "run_dir": args.resume},
                        source=f"{args.resume}/config.yaml" + (f" + {args.config}" if args.config else ""))  # fmt: skip


def _sft_defaults():
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

    return build_config(TrainConfig, SFT_COMMAND_DEFAULTS)


def _import_plugins(argv: list[str] | None) -> None:
    """``--plugin MODULE`` registers before the parser and the config validation read the registries."""
    from veriloop.registry import import_plugins

    argv = sys.argv[1:] if argv is None else argv
    modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--plugin"]
    modules += [a.split("=", 1)[1] for a in argv if a.startswith("--plugin=")]
    import_plugins(modules)


def main(argv: list[str] | None = None) -> int:
    try:
        _import_plugins(argv)
    except InputError as e:
        print(f"veriloop: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    args = _parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bars show progress; theirs would interleave
    try:
        return _run(args)
    except (InputError, ConfigError, FileNotFoundError) as e:  # the user's input: say what, no traceback
        print(f"veriloop {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"veriloop {args.command}: interrupted; checkpoints written so far are kept", file=sys.stderr)
        return 130
    except Exception:  # anything else is a bug in veriloop: show where, and do not blame the input
        traceback.print_exc()
        print(f"veriloop {args.command}: internal error (a bug in veriloop, not in your input): please report it "
              "with the command line and the traceback above", file=sys.stderr)  # fmt: skip
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
