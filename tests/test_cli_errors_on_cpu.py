"""The CLI calls only input errors bad input (exit 2, one line); anything else is a bug (exit 1, traceback)."""

import json

import pytest

from veriloop import cli
from veriloop.errors import InputError, UnknownNameError
from veriloop.verifiers import get


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"completion": "#### 5", "reference": "#### 5"}) + "\n")
    return path


def _verify(rows, tmp_path, *extra):
    return cli.main(["verify", "--input", str(rows), "--output", str(tmp_path / "out.jsonl"), *extra])


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--verifier", "no-such-verifier"], "unknown verifier 'no-such-verifier'"),
        (["--verifier", "gsm8k", "--option", "percent"], "--option must be KEY=VALUE"),
        (["--verifier", "math", "--option", "percent=sometimes"], "percent must be one of"),
    ],
)
def test_an_input_error_is_one_line_and_exit_2(rows, tmp_path, capsys, extra, says):
    assert _verify(rows, tmp_path, *extra) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("veriloop verify: error: ") and says in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("bug", [RuntimeError("boom"), KeyError("boom"), ValueError("boom"), TypeError("boom")])
def test_a_bug_shows_its_traceback_and_exits_1(rows, tmp_path, capsys, monkeypatch, bug):
    def broken(*args, **kwargs):
        raise bug

    monkeypatch.setattr("veriloop.verifiers.batch.verify_file", broken)
    assert _verify(rows, tmp_path, "--verifier", "gsm8k") == cli.EXIT_BUG == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f"{type(bug).__name__}: " in err and "broken" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("veriloop verify: internal error (a bug in veriloop, not in your input)")
    assert "command line and the traceback above" in last
    assert "error: boom" not in err and "error: 'boom'" not in err


def test_an_input_error_raised_deep_inside_a_command_is_still_bad_input(rows, tmp_path, capsys, monkeypatch):
    def refuses(*args, **kwargs):
        raise InputError("in.jsonl:3: field 'reference' is empty")

    monkeypatch.setattr("veriloop.verifiers.batch.verify_file", refuses)
    assert _verify(rows, tmp_path, "--verifier", "gsm8k") == 2
    assert capsys.readouterr().err == "veriloop verify: error: in.jsonl:3: field 'reference' is empty\n"


def test_unknown_names_are_input_errors_and_still_key_errors():
    with pytest.raises(UnknownNameError) as caught:
        get("no-such-verifier")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, InputError)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith("unknown verifier 'no-such-verifier'")  # not quoted as KeyError quotes


def test_a_rank_or_node_that_died_is_named_with_how_to_resume_and_exits_5(rows, tmp_path, capsys, monkeypatch):
    """Neither the input nor a bug: the message names the rank and node, says how to continue, no traceback."""
    from veriloop.errors import ClusterFailure

    def died(*args, **kwargs):
        raise ClusterFailure("learner rank 1 on node 10.0.0.7 (ab12cd34ef56), pid 4242 died during update")

    monkeypatch.setattr(cli, "_run", died)
    assert _verify(rows, tmp_path, "--verifier", "gsm8k") == cli.EXIT_CLUSTER == 5
    err = capsys.readouterr().err
    assert "learner rank 1 on node 10.0.0.7" in err and "--resume RUN_DIR" in err and "Traceback" not in err
