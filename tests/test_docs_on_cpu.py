"""Docs match code: the generated option tables are current and --help documents every option."""

import subprocess
import sys
from pathlib import Path

import pytest

from veriloop import cli
from veriloop.training.config import iter_fields
from veriloop.training.run_config import EvalRunConfig, SFTConfig, TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def test_options_doc_is_current():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_options.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("command, cls", [("train", TrainConfig), ("sft", SFTConfig), ("eval", EvalRunConfig)])
def test_help_documents_every_option(command, cls, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    for key, _tp, _default, help_text in iter_fields(cls):
        assert f"--{key}" in text
        assert help_text, f"{cls.__name__}.{key} has no help text"


def test_readme_commands_exist():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_load(path):
    from veriloop.training.config import build_config, load_yaml

    cls = SFTConfig if path.name.startswith("sft") else TrainConfig
    build_config(cls, load_yaml(path), source=str(path))
