"""Docs match code: the generated option tables are current and --help documents every option."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from veriloop import cli
from veriloop.config import iter_fields
from veriloop.evaluation.run import EvalRunConfig
from veriloop.training.config import TrainConfig
from veriloop.training.recipes import SFT_COMMAND_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent


def test_options_doc_is_current():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_options.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("command, cls", [("train", TrainConfig), ("sft", TrainConfig), ("eval", EvalRunConfig)])
def test_help_documents_every_option(command, cls, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    for key, _tp, _default, help_text in iter_fields(cls):
        assert f"--{key}" in text
        assert help_text, f"{cls.__name__}.{key} has no help text"


def _code(readme: str) -> list[str]:
    """Every fenced block and inline code span of the README."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.DOTALL)
    rest = re.sub(r"```.*?```", "", readme, flags=re.DOTALL)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def _make_recipe(makefile: str, target: str) -> tuple[str, list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    m = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", makefile, re.MULTILINE)
    assert m, f"Makefile has no target {target!r}"
    return m.group(1), [line.strip() for line in m.group(2).splitlines()]


def test_readme_gives_exactly_two_commands_and_they_do_what_it_says():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    for target, runs in (("demo", "$(BIN)/veriloop demo"), ("test", "$(BIN)/python -m pytest")):
        prerequisites, recipe = _make_recipe(makefile, target)
        assert "setup" in prerequisites.split(), f"make {target} must set up the venv first"
        assert any(line.startswith(runs) for line in recipe), (target, recipe)
    _, setup = _make_recipe(makefile, "$(VENV)/.installed")
    assert any("requirements/cpu.txt" in line for line in setup)
    assert "torch==2.13.0" in (ROOT / "requirements" / "cpu.txt").read_text()  # never a multi-GB CUDA build
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci


def test_every_command_and_script_the_readme_names_exists():
    readme = (ROOT / "README.md").read_text()
    code = "\n".join(_code(readme))
    parser = cli._parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    prm_sub = next(a for a in sub["prm"]._actions if a.dest == "prm_command").choices
    named = set(re.findall(r"\bveriloop ([a-z][a-z-]*)", code))
    assert {"demo", "train", "eval", "search"} <= named  # the parse found the commands
    assert named <= set(sub), f"README names commands that do not exist: {sorted(named - set(sub))}"
    assert set(re.findall(r"\bveriloop prm ([a-z]+)", code)) <= set(prm_sub)
    scripts = set(re.findall(r"\bpython ((?:benchmarks|examples|scripts)/[\w/]+\.py)", readme))
    assert "benchmarks/run.py" in scripts
    missing = sorted(p for p in scripts if not (ROOT / p).is_file())
    assert not missing, f"README names scripts that do not exist: {missing}"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_load(path):
    from veriloop.config import build_config, load_yaml

    if path.name == "r1.yaml":  # `veriloop pipeline`'s
        from veriloop.pipeline import PipelineConfig

        build_config(PipelineConfig, load_yaml(path), source=str(path))
        return
    base = SFT_COMMAND_DEFAULTS if path.name.startswith("sft") else {}  # what `veriloop sft` starts from
    build_config(TrainConfig, {**base, **load_yaml(path)}, source=str(path))


def test_every_file_the_readme_and_the_docs_link_to_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
