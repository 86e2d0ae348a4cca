"""Write docs/reference/commands.md from the command line's own parser (``veriloop.cli``).

python scripts/gen_cli_reference.py          # rewrite docs/reference/commands.md
python scripts/gen_cli_reference.py --check  # exit 1 if it is out of date (the tests run this)

Every command and sub-command the parser knows gets a section: its help text, its usage, and a table of its
own arguments. The options a command takes from a config dataclass (the ``--section.field`` flags, whose argparse
dest starts with ``opt::``) are counted by section here and tabulated with types, defaults and meanings in
docs/options.md (scripts/gen_options.py), which the section links to.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = ROOT / "docs" / "reference" / "commands.md"
WIDTH = "100"  # argparse wraps help at the terminal's width: fixed, so the page does not depend on who ran it


def _parser() -> argparse.ArgumentParser:
    from veriloop import cli

    make = getattr(cli, "build_parser", None) or getattr(cli, "parser", None) or cli._parser
    return make()


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each sub-command, in the parser's order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), p) for name, p in action.choices.items()]
    return out


def _slug(text: str) -> str:
    """The anchor MkDocs (python-markdown's toc) gives a heading: lower case, words joined by '-'."""
    text = re.sub(r"[^\w\s-]", "", text.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _option_sections() -> list[tuple[str, set[str]]]:
    """``(heading of docs/options.md, its option keys)`` for each command of scripts/gen_options.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import gen_options
    finally:
        sys.path.pop(0)
    from veriloop.config import iter_fields

    return [(name, {key for key, *_ in iter_fields(cls)}) for name, cls in gen_options.COMMANDS]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.dest.startswith("opt::") or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + (action.metavar or action.dest.upper())
        else:
            name = action.metavar or action.dest
        default = ""
        if action.option_strings and action.nargs != 0 and action.default not in (None, [], argparse.SUPPRESS):
            default = f"`{action.default!r}`"
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
        help_text = parser._get_formatter()._expand_help(action) if action.help else ""  # %(default)s and the like
        rows.append(f"| `{name}` | {default} | {_cell(help_text + choices)} |")
    if not rows:
        return []
    return ["| argument | default | meaning |", "|---|---|---|", *rows, ""]


def _options_note(parser: argparse.ArgumentParser, sections) -> list[str]:
    keys = {a.dest[5:] for a in parser._actions if a.dest.startswith("opt::")}
    if not keys:
        return []
    by_section = Counter(k.split(".")[0] if "." in k else "" for k in keys)
    top = by_section.pop("", 0)
    parts = ([f"{top} top-level"] if top else []) + [f"`{s}.*` ({n})" for s, n in sorted(by_section.items())]
    where = next((name for name, fields in sections if fields == keys), None)
    link = ""
    if where:
        link = f" Each is listed with its type, default and meaning in [Options](../options.md#{_slug(where)})."
    return [
        f"**{len(keys)} options**, each a flag (`--section.field VALUE`) and a key of the YAML file given with "
        f"`--config` (flags override the file): {', '.join(parts)}.{link}",
        "",
    ]


def _section(title: str, help_text: str, parser: argparse.ArgumentParser, sections, level: int) -> list[str]:
    out = ["#" * level + f" `{title}`", ""]
    description = parser.description or help_text
    if description:
        out += [_cell(description), ""]
    usage = parser.format_usage().strip()
    if any(a.dest.startswith("opt::") for a in parser._actions):  # the usage would list every option flag
        positional = [
            a.metavar or a.dest
            for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        ]
        usage = " ".join([f"usage: {parser.prog} [options]", *positional])
    out += ["```text", usage, "```", ""]
    out += _arguments_table(parser)
    out += _options_note(parser, sections)
    for name, sub_help, sub in _subcommands(parser):
        out += _section(f"{title} {name}", sub_help, sub, sections, level + 1)
    return out


PREAMBLE = """\
Every command that runs something takes `--config FILE.yaml` and one flag per option (`--kl.beta 0.02`); flags
override the file. `veriloop --plugin MODULE <command>` imports MODULE first, so that what it registers (a task,
verifier, estimator, objective or search strategy) can be named in the options
([your own task, verifier or reward](../guides/plugins.md)). Unknown keys, bad values, malformed dataset rows,
non-finite rewards, tokenizer/model mismatches and any option that the chosen component does not read stop the
command before it runs, with one line naming the file, field or value ([Configuration](../configuration.md)).

| exit status | meaning |
|---|---|
| 0 | done; also `train` stopped by SIGTERM or a first Ctrl-C, after writing a checkpoint (`--resume` continues it) |
| 1 | a bug in veriloop, shown with its traceback; `audit` also exits 1 when it finds false accepts or rejects |
| 2 | bad input, said in one line (`veriloop.errors.InputError`, a `ValueError`; an unknown name is an \
`UnknownNameError`, also a `KeyError`) |
| 130 | interrupted (Ctrl-C; a second Ctrl-C during `train`) |
| 143 | `demo` or `pipeline` stopped by SIGTERM: the same command continues where it stopped |""".splitlines()


def render() -> str:
    os.environ["COLUMNS"] = WIDTH
    parser = _parser()
    sections = _option_sections()
    out = [
        "# Commands",
        "",
        "Generated by `python scripts/gen_cli_reference.py` from the command line's parser (`veriloop.cli`); do not",
        "edit by hand (a test fails when it is out of date). `veriloop <command> --help` prints the same, with every",
        "option of the command; [Options](../options.md) tabulates those options with their defaults.",
        "",
        *PREAMBLE,
        "",
        "## `veriloop --help`",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for name, help_text, sub in _subcommands(parser):
        out += _section(f"veriloop {name}", help_text, sub, sections, 2)
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not PATH.is_file() or PATH.read_text() != text:
            print(f"{PATH} is out of date: run python scripts/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(text)
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
