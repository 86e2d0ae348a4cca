"""``veriloop judge data|train|score``: the judge's commands (parsers and runners; ``veriloop.cli`` registers them)."""

from __future__ import annotations

import argparse
import json


def add_judge(sub, name: str, help_text: str, command, add_output_options) -> None:
    """``command`` and ``add_output_options`` are ``veriloop.cli``'s (given, not imported: the CLI is above)."""
    from veriloop.judge.train import JudgeDataConfig, JudgeTrainConfig

    judge = sub.add_parser(name, help=help_text, description=help_text)
    add_output_options(judge)
    judge_sub = judge.add_subparsers(
        dest="judge_command", required=True, metavar="JUDGE_COMMAND", prog="veriloop judge"
    )
    command(judge_sub, "data", JudgeDataConfig, "verdict rows: the policy's solutions, each with a rule's verdict")
    command(judge_sub, "train", JudgeTrainConfig, "fine-tune a causal LM to write the rule's verdict (the judge)")
    p = judge_sub.add_parser(
        "score", help="judge JSONL rows {prompt, completion}, each with a reference and a verdict if given"
    )
    p.add_argument("--judge", required=True, metavar="DIR", help="judge directory, or any local causal LM")
    p.add_argument("--input", required=True, metavar="IN.jsonl")
    p.add_argument("--output", required=True, metavar="OUT.jsonl", help="the rows with judge_verdict and its output")
    p.add_argument("--rubric", default="", help="standard | compact | a text file; default: the judge's own")
    add_output_options(p)


def run_judge(args: argparse.Namespace, progress: bool) -> int:
    from veriloop.config import config_from_args

    if args.judge_command == "data":
        from veriloop.judge.train import JudgeDataConfig, make_verdict_rows

        print(json.dumps(make_verdict_rows(config_from_args(JudgeDataConfig, args), progress=progress), indent=2))
    elif args.judge_command == "train":
        from veriloop.judge.train import JudgeTrainConfig, train_judge

        cfg = config_from_args(JudgeTrainConfig, args)
        print(json.dumps(train_judge(cfg, progress=progress), indent=2))
        print(
            f"wrote {cfg.out} (reward with it: veriloop train --judge {cfg.out}; audit it: veriloop audit judge "
            f"--option path={cfg.out} --option audit=arithmetic-outcome)"
        )
    else:
        from veriloop.judge.train import score_file

        print(json.dumps(score_file(args.judge, args.input, args.output, args.rubric), indent=2))
    return 0
