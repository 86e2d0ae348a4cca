"""``veriloop <command>``: parse the options, set up the logs, call the packages, report errors plainly.

Every command takes ``--config FILE.yaml`` and one ``--section.field VALUE`` flag per option (``veriloop
<command> --help`` lists them with defaults).  Flags override the file.  ``-q``, ``-v``, ``--log_level`` and
``--log_every`` go before or after the command (``veriloop.logs``: what is shown, and each run's log file).

Exit status 2: the input is wrong (``InputError``, a config error, a missing file), said in one
line; 1: anything else escaping a command, a bug in veriloop, shown with its traceback (``audit``
also exits 1 when it finds false accepts or rejects); 3: ``doctor`` found a missing part; 4: a training run
stopped on a NaN or an infinity (its step and tensor named: ``training/run/alarms.py``); 5: a learner rank or its
node died (``ClusterFailure``: which one is named; the checkpoints are kept for ``--resume``); 130: interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from contextlib import contextmanager

from veriloop import __version__, logs
from veriloop.cli_help import COMMANDS, EPILOG, INTRO, USAGE, _listing
from veriloop.config import ConfigError, add_arguments, config_from_args
from veriloop.errors import ClusterFailure, InputError
from veriloop.training.run.alarms import NonFiniteError

EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_NON_FINITE = 4
EXIT_CLUSTER = 5
CLUSTER_FAILURE_HINT = (
    "the checkpoints written so far are kept: `veriloop train --resume RUN_DIR` continues from the last one (on the "
    "same cluster with the node replaced, or a smaller one: docs/guides/cluster.md)"
)
log = logging.getLogger("veriloop.cli")  # not __name__: `python -m veriloop.cli` runs it as __main__


def _parser(only: set[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser.  With ``only``, the other commands get no options of their own: building them
    imports the training stack, which ``veriloop --help`` or ``veriloop verify`` has no need of."""
    parser = argparse.ArgumentParser(
        prog="veriloop",
        usage=USAGE,
        description=INTRO + _listing(),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"veriloop {__version__}")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable): it may register tasks, verifiers, estimators, "
        "objectives or search strategies (veriloop.registry)",
    )
    _add_output_options(parser, top=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", prog="veriloop", help=argparse.SUPPRESS
    )  # listed by group in the description
    if _HANDLERS.keys() != COMMANDS.keys():
        raise AssertionError(
            f"cli_help.COMMANDS and cli._HANDLERS name different commands: {_HANDLERS.keys() ^ COMMANDS.keys()}"
        )
    for name, (_, help_text) in COMMANDS.items():
        if only is None or name in only:
            _HANDLERS[name][0](sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _add_output_options(p: argparse.ArgumentParser, top: bool = False) -> None:
    """-q, -v, --log_level, --log_every: on the top-level parser and on every command's, so that they may come
    before or after the command (a command's own leaves the top-level value alone unless given)."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    g = p.add_argument_group("output (before or after the command)")
    g.add_argument(
        "-q", "--quiet", action="store_true", default=default(False), help="warnings and errors only, no progress"
    )
    g.add_argument("-v", "--verbose", action="store_true", default=default(False), help="debug messages too")
    g.add_argument(
        "--log_level",
        choices=tuple(logs.LEVELS),
        default=default(None),
        help="what is shown on stderr (default info; -q is warning, -v is debug); the run's own log "
        "file keeps everything",
    )
    g.add_argument(
        "--log_every",
        type=int,
        metavar="N",
        default=default(0),
        help="off a terminal, a progress line every N steps (default: 10 to 20 lines a run)",
    )


def _command(sub, name: str, cls, help_text: str, defaults=None) -> argparse.ArgumentParser:
    """A command whose options are the fields of the config dataclass ``cls``."""
    # Not ArgumentDefaultsHelpFormatter: every option flag's argparse default is None (a flag not given leaves the
    # config's value alone), so it would print "(default: None)"; add_arguments writes each option's true default.
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--config", metavar="FILE.yaml", help="YAML file of options (flags override it)")
    _add_output_options(p)
    add_arguments(p, cls, defaults)
    return p


def _configured(module: str, cls_name: str, defaults: Callable | None = None, *flags: Callable) -> Callable:
    """The parser builder of a command whose options are the fields of the config dataclass ``module.cls_name``,
    shown from ``defaults()`` when given, then ``flags`` (adders of its own further arguments).  The module is
    imported only when the command's parser is built: ``veriloop --help`` does not load the training stack."""

    def add(sub, name: str, help_text: str) -> None:
        cls = getattr(importlib.import_module(module), cls_name)
        p = _command(sub, name, cls, help_text, defaults() if defaults is not None else None)
        for flag in flags:
            flag(p)

    return add


def _add_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its latest "
        "checkpoint that matches its manifest; with none (killed before its first), start it "
        "over from step 0",
    )


def _add_run_dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the run would do (samples and "
        "tokens per step, optimizer steps and micro-batches per batch, staleness, estimated "
        "memory) from its config, the model's shapes and the data; train nothing, make no run "
        "directory",
    )


def _add_search_dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the search would cost (per strategy "
        "and budget: generations, tokens, PRM and verifier calls per problem and in all; estimated "
        "memory) from its config, the models' shapes and the problems; draw nothing, make no run "
        "directory",
    )


def _add_plain(sub, name: str, help_text: str) -> None:
    """A command with no arguments but the output options (a listing, ``doctor``)."""
    _add_output_options(sub.add_parser(name, help=help_text, description=help_text))


def _add_report(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("run_dir", help="a training run, a search run, or a directory of runs (a demo's, a pipeline's)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the page on 127.0.0.1 with every record read on "
        "demand (a long run), and spot-check marks saved to the run directory; Ctrl-C stops it",
    )
    p.add_argument("--port", type=int, default=0, help="--serve's port (0: a free one)")
    p.add_argument(
        "--marks",
        metavar="FILE",
        help="spot-check marks exported from a report page (its 'Export "
        "marks' button): merged into the run's spot_check.json before the page is written",
    )
    _add_output_options(p)


def _add_compare(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more training run directories")
    p.add_argument("--out", default="compare.html", help="the page to write (default compare.html)")
    _add_output_options(p)


def _add_verify(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--verifier", required=True, help="verifier name (see `veriloop verifiers`)")
    p.add_argument("--input", required=True, metavar="IN.jsonl", help="rows with completion and reference")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with score, outcome, components")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="verifier option (repeatable), e.g. percent=either, partial_credit=true",
    )
    p.add_argument("--workers", type=int, default=0, help="processes; 0 = every core")
    _add_output_options(p)


def _add_audit(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("verifier", help="verifier name")
    p.add_argument(
        "--part",
        choices=("development", "heldout", "all"),
        default="all",
        help="built-in cases: development (the reader is tuned on them), heldout (written from reading, "
        "never edited), all",
    )
    p.add_argument(
        "--cases",
        action="append",
        default=[],
        metavar="FILE.jsonl",
        help="your cases {completion, reference, expect: accept|reject, family} (repeatable; part user)",
    )
    p.add_argument("--no-builtin", action="store_true", help="only the cases given with --cases")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="verifier option")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON (totals per part, every failure)")
    _add_output_options(p)


def _add_prm(sub, name: str, help_text: str) -> None:
    from veriloop.prm.label import LabelConfig
    from veriloop.prm.train import PRMTrainConfig

    prm = sub.add_parser(name, help=help_text, description=help_text)
    _add_output_options(prm)
    prm_sub = prm.add_subparsers(dest="prm_command", required=True, metavar="PRM_COMMAND", prog="veriloop prm")
    _command(prm_sub, "label", LabelConfig, "Math-Shepherd step labels: complete each step prefix N times, JSONL out")
    _command(prm_sub, "train", PRMTrainConfig, "train a PRM (or an ORM with --labels outcome) on step labels")
    p = prm_sub.add_parser("score", help="score JSONL rows {prompt or reference, completion} with a PRM")
    p.add_argument("--prm", required=True, metavar="DIR", help="PRM directory from `veriloop prm train`")
    p.add_argument("--input", required=True, metavar="IN.jsonl")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with step_scores and score")
    p.add_argument("--aggregation", default="", help="min | prod | last; default: the PRM's own")
    _add_output_options(p)


def _add_rm(sub, name: str, help_text: str) -> None:
    from veriloop.preference.pairs import PairsConfig
    from veriloop.preference.train import RMTrainConfig

    rm = sub.add_parser(name, help=help_text, description=help_text)
    _add_output_options(rm)
    rm_sub = rm.add_subparsers(dest="rm_command", required=True, metavar="RM_COMMAND", prog="veriloop rm")
    _command(rm_sub, "pairs", PairsConfig, "preference pairs (a correct solution over a wrong one) from the policy")
    _command(rm_sub, "train", RMTrainConfig, "train a Bradley-Terry reward model on pairs {prompt, chosen, rejected}")
    p = rm_sub.add_parser("score", help="score JSONL rows {prompt, completion} or pairs with a reward model")
    p.add_argument("--rm", required=True, metavar="DIR", help="reward model directory from `veriloop rm train`")
    p.add_argument("--input", required=True, metavar="IN.jsonl")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with reward (pairs: both rewards)")
    _add_output_options(p)


def _add_completion(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text + " (or add it to ~/.bashrc; zsh: veriloop completion zsh > ~/.zfunc/_veriloop)",
    )
    p.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    _add_output_options(p)


# ---------------------------------------------------------------------------------------------------- running


@contextmanager
def _run_log(args: argparse.Namespace, run_dir, name: str, marker: str | None = None):
    """The command's log in its run directory (``logs.attach_run_log``), opened by the command line it ran."""
    with logs.attach_run_log(run_dir, name, marker=marker):
        command = shlex.join(["veriloop", *getattr(args, "argv", [])])
        log.info("%s (veriloop %s)", command, __version__, extra=logs.FILE_ONLY)
        yield


def _run(args: argparse.Namespace, progress: bool = True) -> int:
    return _HANDLERS[args.command][1](args, progress)


def _run_pipeline(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.pipeline import STATE, PipelineConfig, run_pipeline

    cfg = config_from_args(PipelineConfig, args)
    if args.dry_run:
        from veriloop.pipeline import dry_run

        print(dry_run(cfg))
        return 0
    with _run_log(args, cfg.run_dir, "pipeline", marker=STATE):
        run_pipeline(cfg, progress=progress)
    print(open(f"{cfg.run_dir}/table.md").read())
    print(f"pipeline directory: {cfg.run_dir} (pipeline.json, table.md, one run directory per stage)")
    return 0


def _run_compare(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.report.compare import write_compare

    print(write_compare(args.run_dirs, args.out))
    return 0


def _add_export(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="a run's checkpoints/step-N directory")
    p.add_argument("--out", required=True, metavar="DIR", help="the save_pretrained directory to write")
    _add_output_options(p)


def _run_export(args: argparse.Namespace, progress: bool) -> int:
    from pathlib import Path

    from veriloop.training.loop.sharded_checkpoint import export_full

    try:
        print(export_full(Path(args.checkpoint), Path(args.out)))
    except (FileNotFoundError, ValueError) as e:
        raise InputError(str(e)) from None
    return 0


def _run_completion(args: argparse.Namespace, progress: bool) -> int:
    import shtab

    parser = _parser()
    next(a for a in parser._actions if a.dest == "command").help = "command"  # listed (shtab skips hidden)
    print(shtab.complete(parser, args.shell))
    return 0


def _run_doctor(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.doctor import run_doctor

    return run_doctor()


def _run_algos(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.training.recipes import RECIPES

    for name, recipe in RECIPES.items():
        sets = ", ".join(f"{k}={v}" for k, v in recipe.overrides.items()) or "(the defaults)"
        print(f"{name:<11} {recipe.description}\n{'':<11} sets: {sets}")
    return 0


def _verifiers(args: argparse.Namespace, progress: bool) -> int:
    if args.command == "audit":
        return _audit(args)
    if args.command == "verifiers":
        from veriloop import verifiers

        for name in verifiers.names():
            print(name)
    else:
        from veriloop.verifiers.batch import verify_file

        summary = verify_file(args.verifier, args.input, args.output, _options(args.option), args.workers)
        print(summary.text())
        print(f"wrote {args.output}")
    return 0


def _report(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.report.report import import_marks, marks_summary, write_report

    if args.marks:
        import_marks(args.run_dir, args.marks)
        print(marks_summary(args.run_dir))
    if not args.serve:
        print(write_report(args.run_dir))
        return 0
    import time

    from veriloop.report.serve import start_server

    httpd, _ = start_server(args.run_dir, args.port)
    print(f"serving {args.run_dir} at http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:  # how a server is stopped: not an interruption of work
        print("stopped")
    finally:
        httpd.shutdown()
    return 0


def _run_training(args: argparse.Namespace, progress: bool) -> int:
    if args.command in ("sft", "train"):
        from veriloop.report.report import write_report
        from veriloop.training.config import TrainConfig
        from veriloop.training.recipes import SFT_COMMAND_DEFAULTS
        from veriloop.training.trainer import Trainer

        if args.command == "sft":
            cfg, resume = config_from_args(TrainConfig, args, base=SFT_COMMAND_DEFAULTS), False
        elif args.resume:
            cfg, resume = _resume_config(args), True
        else:
            cfg, resume = config_from_args(TrainConfig, args), False
        if args.dry_run:
            from veriloop.training.dry_run import dry_run

            print(dry_run(cfg))
            return 0
        # train.log for sft too: `veriloop train --resume` continues an sft run, and appends to the same file
        with _run_log(args, cfg.run_dir, "train", marker="config.yaml"):
            trainer = Trainer(cfg, resume=resume, progress=progress)
            try:
                trainer.train()
            except NonFiniteError as e:  # the report shows the stop beside the alarms and the curves before it
                write_report(cfg.run_dir)
                raise NonFiniteError(e.step, e.name, e.value, e.detail, where=cfg.run_dir) from None
            write_report(cfg.run_dir)
        made = "checkpoints/: resume it" if trainer.stop_signal else "final/"  # preempted runs have no final/
        print(f"run directory: {cfg.run_dir} (report.html, metrics.jsonl, train.log, {made})")
    elif args.command == "eval":
        from veriloop.evaluation.run import EvalRunConfig, run_eval

        run_eval(config_from_args(EvalRunConfig, args))
    else:
        from veriloop.demo import DemoConfig, run_demo

        # no base: DemoConfig's own defaults, and a --train.algo's recipe defaults under them (as in `train`)
        cfg = config_from_args(DemoConfig, args)
        with _run_log(args, None, "demo"):  # the demo says its directory (a new demo-N, or one it continues)
            run_demo(cfg, progress=progress)
    return 0


def _search(args: argparse.Namespace, progress: bool) -> int:
    if args.command == "search":
        from veriloop.report.report import write_report
        from veriloop.search.run import SearchConfig, run_search

        cfg = config_from_args(SearchConfig, args)
        if args.dry_run:
            from veriloop.search.dry_run import dry_run

            print(dry_run(cfg))
            return 0
        with _run_log(args, cfg.out, "search"):
            summary = run_search(cfg, progress=progress)
            write_report(cfg.out)
        print(open(f"{cfg.out}/table.md").read())
        print(
            f"wrote {cfg.out}/summary.json, table.md, accuracy_vs_tokens.png, results.jsonl, report.html "
            f"({summary['seconds']} s)"
        )
    elif args.command == "allocate":
        from veriloop.search.allocate import AllocateConfig, run_allocate

        cfg = config_from_args(AllocateConfig, args)
        with _run_log(args, cfg.out, "allocate"):
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


def _rm(args: argparse.Namespace, progress: bool) -> int:
    if args.rm_command == "pairs":
        from veriloop.preference.pairs import PairsConfig, make_pairs

        print(json.dumps(make_pairs(config_from_args(PairsConfig, args), progress=progress), indent=2))
    elif args.rm_command == "train":
        from veriloop.preference.train import RMTrainConfig, train_reward_model

        cfg = config_from_args(RMTrainConfig, args)
        print(json.dumps(train_reward_model(cfg, progress=progress), indent=2))
        print(f"wrote {cfg.out} (reward with it: veriloop train --reward_model {cfg.out})")
    else:
        from veriloop.preference.train import score_file

        print(json.dumps(score_file(args.rm, args.input, args.output), indent=2))
    return 0


def _add_judge(sub, name: str, help_text: str) -> None:
    from veriloop.judge.cli import add_judge

    add_judge(sub, name, help_text, _command, _add_output_options)


def _judge(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.judge.cli import run_judge

    return run_judge(args, progress)


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
        from veriloop.sandbox import isolation

        print(isolation().describe())
    if args.json:
        from veriloop.io import atomic_write_json

        atomic_write_json(args.json, {**report.to_json(), **({"sandbox": isolation().layers} if sandboxed else {})})
    return 1 if report.false_accepts or report.false_rejects else 0


def _resume_config(args: argparse.Namespace):
    """What the resumed run will be: the run's config.yaml (checked against the run's manifest.json), then
    ``--config FILE`` and flags on top (e.g. more --steps).  The trainer compares it with the checkpoint's config
    and refuses a change that is not safe (``training/run/checkpoint.py``: SAFE_TO_CHANGE)."""
    from pathlib import Path

    from veriloop.config import build_config, load_yaml, overrides_from_args
    from veriloop.training.config import TrainConfig
    from veriloop.training.run.checkpoint import flatten
    from veriloop.training.run.run_dir import read_run_config

    overrides = overrides_from_args(args)
    if overrides.get("run_dir", args.resume) != args.resume:
        raise InputError(
            f"--run_dir {overrides['run_dir']} with --resume {args.resume}: a resumed run stays in "
            "its own directory; give only --resume"
        )
    data = read_run_config(Path(args.resume))
    extra = flatten(load_yaml(args.config)) if args.config else {}  # as if each of its keys were a flag
    return build_config(
        TrainConfig,
        data,
        {**extra, **overrides, "run_dir": args.resume},
        source=f"{args.resume}/config.yaml" + (f" + {args.config}" if args.config else ""),
    )


def _sft_defaults():
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

    return build_config(TrainConfig, SFT_COMMAND_DEFAULTS)


# How each command is parsed and run: (add its parser: (sub, name, help line) -> None, run it: (args, progress) ->
# exit status).  cli_help.COMMANDS is the one list of the commands (their order, groups and help lines, from which
# the parser, `veriloop --help` and docs/reference/commands.md are made): this gives each its code, and _parser
# refuses a command named in one but not the other.
_HANDLERS: dict[str, tuple[Callable, Callable]] = {
    "demo": (_configured("veriloop.demo", "DemoConfig"), _run_training),
    "train": (
        _configured("veriloop.training.config", "TrainConfig", None, _add_resume, _add_run_dry_run),
        _run_training,
    ),
    "sft": (_configured("veriloop.training.config", "TrainConfig", _sft_defaults, _add_run_dry_run), _run_training),
    "pipeline": (_configured("veriloop.pipeline", "PipelineConfig", None, _add_run_dry_run), _run_pipeline),
    "algos": (_add_plain, _run_algos),
    "eval": (_configured("veriloop.evaluation.run", "EvalRunConfig"), _run_training),
    "report": (_add_report, _report),
    "compare": (_add_compare, _run_compare),
    "export": (_add_export, _run_export),
    "search": (_configured("veriloop.search.run", "SearchConfig", None, _add_search_dry_run), _search),
    "allocate": (_configured("veriloop.search.allocate", "AllocateConfig"), _search),
    "revision-pairs": (_configured("veriloop.search.revision", "RevisionPairsConfig"), _search),
    "verifiers": (_add_plain, _verifiers),
    "verify": (_add_verify, _verifiers),
    "audit": (_add_audit, _verifiers),
    "prm": (_add_prm, _prm),
    "rm": (_add_rm, _rm),
    "judge": (_add_judge, _judge),
    "doctor": (_add_plain, _run_doctor),
    "completion": (_add_completion, _run_completion),
}


def _import_plugins(argv: list[str] | None) -> None:
    """``--plugin MODULE`` registers before the parser and the config validation read the registries."""
    from veriloop.registry import import_plugins

    argv = sys.argv[1:] if argv is None else argv
    modules = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--plugin"]
    modules += [a.split("=", 1)[1] for a in argv if a.startswith("--plugin=")]
    import_plugins(modules)


def _log_level(args: argparse.Namespace) -> int:
    """--log_level, else -v (debug), else -q (warning), else info."""
    if getattr(args, "log_level", None):
        return logs.LEVELS[args.log_level]
    if getattr(args, "verbose", False):
        return logging.DEBUG
    return logging.WARNING if getattr(args, "quiet", False) else logging.INFO


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    restore = logs.quiet_third_party()  # before transformers is imported: it reads the environment then
    try:
        return _main(argv)
    finally:
        restore()


def _main(argv: list[str]) -> int:
    try:
        _import_plugins(argv)
    except InputError as e:
        print(f"veriloop: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    args = _parser(only=set(argv) & set(COMMANDS)).parse_args(argv)
    args.argv, level = argv, _log_level(args)
    with logs.cli_logging(level, log_every=args.log_every):
        try:
            return _run(args, progress=level <= logging.INFO)
        except (InputError, ConfigError, FileNotFoundError) as e:  # the user's input: say what, no traceback
            print(f"veriloop {args.command}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except NonFiniteError as e:
            print(f"veriloop {args.command}: {e}", file=sys.stderr)
            return EXIT_NON_FINITE
        except ClusterFailure as e:  # a rank or a node died: not the input, not a bug; the checkpoints are kept
            print(f"veriloop {args.command}: stopped: {e}\n{CLUSTER_FAILURE_HINT}", file=sys.stderr)
            return EXIT_CLUSTER
        except KeyboardInterrupt:
            print(f"veriloop {args.command}: interrupted; checkpoints written so far are kept", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader of stdout went away (`veriloop completion bash | head`): not a bug
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exiting flushes nowhere
            return 0
        except Exception:  # anything else is a bug in veriloop: show where, and do not blame the input
            traceback.print_exc()
            print(
                f"veriloop {args.command}: internal error (a bug in veriloop, not in your input): please report "
                "it with the command line and the traceback above",
                file=sys.stderr,
            )
            return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
