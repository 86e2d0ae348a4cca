"""The command line introduces itself: `veriloop --help` says what veriloop does for a user, the three commands to
start with and every command by group (compared with the parser's own commands, so that a new one cannot be
left out); each command's own --help still works; `veriloop --version`; -q / -v / --log_level / --log_every
before or after the command; a shell completion script."""

import importlib.metadata
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

import veriloop
from veriloop import cli

GROUPS = ["train", "evaluate", "search (test-time compute)", "verifiers and reward models", "tools"]


def _top_help(capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _commands() -> dict:
    """The full parser's commands: {name: its parser}."""
    return next(a for a in cli._parser()._actions if a.dest == "command").choices


def _listed(text: str) -> dict[str, list[tuple[str, str]]]:
    """The help's listing: {group: [(command, summary), ...]} (a summary's wrapped lines joined)."""
    listing = text[text.index("\n\n", text.index("start with:")) :].split("\noptions:")[0]
    groups, group = {}, None
    for line in listing.splitlines():
        if re.fullmatch(r"\S[^:]*:", line):
            group = line[:-1]
            groups[group] = []
        elif re.match(r"  \S", line):
            name, summary = line.strip().split(None, 1)
            groups[group].append((name, summary))
        elif line.strip() and group:  # a summary's next line
            name, summary = groups[group][-1]
            groups[group][-1] = (name, f"{summary} {line.strip()}")
    return groups


def test_help_opens_with_what_veriloop_does_and_the_three_commands_to_start_with(capsys):
    text = _top_help(capsys)
    usage, intro, start = text.split("\n\n")[:3]
    assert usage.startswith("usage: veriloop ") and usage.rstrip().endswith("COMMAND ...")
    assert intro.startswith("veriloop trains language models to reason with rewards a program can check")
    assert 2 <= len(re.findall(r"\.(\s|$)", intro)) <= 3  # two or three sentences
    assert start.startswith("start with:")
    started = [line.split()[1] for line in start.splitlines()[1:] if line.startswith("  veriloop ")]
    assert started == ["demo", "train", "eval"]
    assert "parse the options" not in text and "report errors plainly" not in text  # not the module's docstring


def test_every_command_is_listed_once_in_its_group_with_its_own_help_line(capsys):
    groups = _listed(_top_help(capsys))
    assert list(groups) == GROUPS and all(groups.values())
    listed = [name for entries in groups.values() for name, _ in entries]
    commands = _commands()
    assert sorted(listed) == sorted(commands), "a command the parser has is missing from `veriloop --help`"
    assert len(listed) == len(set(listed))
    helps = {a.dest: a.help for a in next(a for a in cli._parser()._actions if a.dest == "command")._choices_actions}
    for entries in groups.values():
        for name, summary in entries:
            assert summary == helps[name], name  # the same line as the command's own


def test_a_command_needs_both_its_line_and_its_code(monkeypatch):
    """cli_help.COMMANDS (name, group, help line) is the one list of commands; cli._HANDLERS gives each its parser
    and its runner: a command in one and not the other stops the parser from being built, naming it."""
    listed = cli.COMMANDS  # replaced, not edited: its order is the help's
    monkeypatch.setattr(cli, "COMMANDS", {**listed, "frobnicate": ("tools", "a command without code")})
    with pytest.raises(AssertionError, match="frobnicate"):
        cli._parser()
    monkeypatch.setattr(cli, "COMMANDS", {k: v for k, v in listed.items() if k != "doctor"})
    with pytest.raises(AssertionError, match="doctor"):
        cli._parser()


def test_each_command_s_own_help_still_works(capsys):
    for name in _commands():
        with pytest.raises(SystemExit) as done:
            cli.main([name, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0 and out.startswith(f"usage: veriloop {name}"), (name, out[:200])
        assert "--log_level" in out and "-q, --quiet" in out, name  # the output options after the command too
    for name in ("label", "train", "score"):
        with pytest.raises(SystemExit):
            cli.main(["prm", name, "--help"])
        assert capsys.readouterr().out.startswith(f"usage: veriloop prm {name}")


@pytest.mark.timeout(120)
def test_top_level_help_and_version_answer_without_loading_the_training_stack():
    code = (
        "import sys, contextlib, io\nfrom veriloop import cli\nfor argv in (['--help'], ['--version']):\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        cli.main(argv)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.timeout(120)
def test_version_is_the_installed_package_s(capsys):
    installed = importlib.metadata.version("veriloop")
    assert veriloop.__version__ == installed
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"veriloop {installed}\n"
    out = subprocess.run(
        [sys.executable, "-m", "veriloop.cli", "--version"], capture_output=True, text=True, timeout=100
    )
    assert out.returncode == 0 and out.stdout == f"veriloop {installed}\n", out.stderr


@pytest.mark.parametrize(
    "argv, level, every",
    [
        (["verifiers"], logging.INFO, 0),
        (["-q", "verifiers"], logging.WARNING, 0),
        (["verifiers", "-q"], logging.WARNING, 0),
        (["verifiers", "--quiet"], logging.WARNING, 0),
        (["-v", "verifiers"], logging.DEBUG, 0),
        (["verifiers", "--verbose"], logging.DEBUG, 0),
        (["verifiers", "--log_level", "error"], logging.ERROR, 0),
        (["--log_level", "debug", "verifiers", "-q"], logging.DEBUG, 0),  # the level named wins
        (["--log_every", "5", "verifiers"], logging.INFO, 5),
        (["-q", "prm", "score", "--prm", "p", "--input", "i", "--output", "o", "--log_every", "3"], logging.WARNING, 3),
        (["-q", "train", "--steps", "2"], logging.WARNING, 0),  # a command's own absent flag leaves -q alone
    ],
)
def test_output_options_go_before_or_after_the_command(argv, level, every):
    args = cli._parser(only=set(argv) & set(cli.COMMANDS)).parse_args(argv)
    assert cli._log_level(args) == level and args.log_every == every


def test_a_shell_completion_script_completes_commands_and_options(capsys):
    pytest.importorskip("shtab")
    assert cli.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    complete = (
        'source /dev/stdin; COMP_WORDS=(veriloop tr); COMP_CWORD=1; _shtab_veriloop; echo "${COMPREPLY[@]}"; '
        'COMP_WORDS=(veriloop train --ste); COMP_CWORD=2; _shtab_veriloop; echo "${COMPREPLY[@]}"'
    )
    out = subprocess.run(["bash", "-c", complete], input=script, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["train", "--steps"]


def test_the_changelog_s_latest_version_is_the_package_s():
    """CHANGELOG.md (Keep a Changelog): the first released section is the version the package reports."""
    text = (Path(__file__).resolve().parent.parent / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert released, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' section"
    assert released[0] == importlib.metadata.version("veriloop"), (
        f"CHANGELOG.md's latest version {released[0]} is not pyproject.toml's {importlib.metadata.version('veriloop')}"
    )
