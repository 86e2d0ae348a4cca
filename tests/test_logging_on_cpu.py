"""Logs a person can read (veriloop.logs): off a terminal a training prints plain progress lines with its key
metrics and never a carriage return, -q shows none, the run directory keeps the full log (appended to when the
run is continued), library warnings reach the ``veriloop`` logger (and nothing else: the library configures no
handler), transformers' and Python's warnings go through the command line's logging."""

import logging
import re
import subprocess
import sys
import warnings

import pytest

from veriloop import cli, logs

TRAIN = [
    "--rollout.prompts_per_step",
    "4",
    "--rollout.group_size",
    "4",
    "--sampling.max_new_tokens",
    "24",
    "--threads",
    "1",
]
LINE = re.compile(
    r"^grpo step (\d+)/(\d+) \(\d+%\) \| reward [\d.]+ acc [\d.]+ kl \S+ loss \S+ tok/s \d+ \| "
    r"[\d.]+ (step/s|s/step), elapsed \d+:\d\d, ETA \d+:\d\d$"
)


@pytest.fixture(autouse=True)
def _no_cli_state_left():
    """Each test starts and ends without the command line's handlers (cli.main undoes them itself)."""
    yield
    assert not [h for h in logging.getLogger().handlers if type(h).__name__ == "_ConsoleHandler"]


def _progress_steps(text: str) -> list[int]:
    return [int(m.group(1)) for m in map(LINE.match, text.splitlines()) if m]


@pytest.mark.timeout(300)
def test_off_a_terminal_a_train_prints_plain_lines_without_a_carriage_return_and_keeps_its_log(
    tiny_policy, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "veriloop.cli",
        "train",
        "--policy",
        tiny_policy,
        "--run_dir",
        str(run_dir),
        "--steps",
        "3",
        *TRAIN,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stdout and "\r" not in done.stderr  # before: 8 in one stderr line of tqdm redraws
    assert _progress_steps(done.stderr) == [1, 2, 3], done.stderr  # the first, ..., the last
    assert "%|" not in done.stderr and "[transformers]" not in done.stderr  # no bar, ours or another library's
    assert done.stdout.startswith(f"run directory: {run_dir}")
    log = (run_dir / "train.log").read_text()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO    veriloop.cli: veriloop train --policy ", log)
    assert _progress_steps("\n".join(line.split(": ", 1)[1] for line in log.splitlines())) == [1, 2, 3]

    # continued in this process: the progress lines on this stderr, the log appended to, never truncated
    assert cli.main(["train", "--resume", str(run_dir), "--steps", "5"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and _progress_steps(err) == [4, 5], err
    again = (run_dir / "train.log").read_text()
    assert again.startswith(log) and "veriloop train --resume" in again[len(log) :]
    assert [int(s) for s in re.findall(r"grpo step (\d+)/", again)] == [1, 2, 3, 4, 5]


@pytest.mark.timeout(300)
def test_quiet_shows_no_progress_and_the_run_log_still_has_every_step(tiny_policy, tmp_path, capsys):
    for i, quiet in enumerate((["-q", "train"], ["train", "--quiet"], ["--log_level", "warning", "train"])):
        run_dir = tmp_path / f"run{i}"
        assert cli.main([*quiet, "--policy", tiny_policy, "--run_dir", str(run_dir), "--steps", "2", *TRAIN]) == 0
        out, err = capsys.readouterr()
        assert err == "" and out.startswith("run directory:"), (quiet, err)
        log = (run_dir / "train.log").read_text()
        assert re.findall(r"DEBUG   veriloop.training.trainer: grpo step (\d)/2", log) == ["1", "2"], log


def test_plain_progress_prints_ten_to_twenty_lines_a_run_plus_the_first_and_last(caplog):
    caplog.set_level(logging.INFO, logger="veriloop")

    def lines(total, every=0, stop=None):
        caplog.clear()
        bar = logs.Progress(desc="sft", total=total, unit="step", every=every, logger=logging.getLogger("veriloop.t"))
        for _ in range(stop or total):
            bar.set_postfix({"loss": "0.5", "tok/s": "100"})
            bar.update(1)
        bar.close()
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert all("\r" not in s and s.startswith("sft step ") and "loss 0.5 tok/s 100 | " in s for s in said)
        return [int(re.match(r"sft step (\d+)", s).group(1)) for s in said]

    assert lines(3) == [1, 2, 3]
    assert lines(200) == [1, *range(10, 201, 10)]  # every 10: 20 lines and the first
    assert 11 <= len(lines(1000)) <= 22 and 11 <= len(lines(137)) <= 22
    assert lines(50, every=20) == [1, 20, 40, 50]  # --log_every
    assert lines(200, stop=15) == [1, 10, 15]  # a run that stopped early says where it stopped
    assert lines(float("inf"), stop=5) == [1, 5]  # no total (a time budget): the first, then every 30 s, the last


def test_a_library_warning_reaches_the_veriloop_logger_and_the_library_adds_no_handler(tmp_path, caplog, capfd):
    from veriloop.training.run.metrics import MetricsLog

    root_handlers = list(logging.getLogger().handlers)
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "cut')
    with caplog.at_level(logging.WARNING, logger="veriloop"):
        rows = MetricsLog(path).rows
    assert [r["step"] for r in rows] == [1]
    (record,) = [r for r in caplog.records if r.name.startswith("veriloop")]
    assert record.name == "veriloop.training.run.metrics" and record.levelno == logging.WARNING
    assert f"{path}:2: dropping the last line" in record.getMessage()
    assert capfd.readouterr().err == ""  # said through logging only: the embedding program decides where it goes
    assert logging.getLogger("veriloop").handlers == [] and logging.getLogger().handlers == root_handlers


def test_transformers_and_python_warnings_go_through_the_cli_s_logging(tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    from veriloop.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.model_max_length = 4
    hf_logger = logging.getLogger("transformers")
    with logs.cli_logging("info"), logs.attach_run_log(tmp_path, "train"):
        tok("0123456789")  # "Token indices sequence length is longer than the specified maximum ...": said by
        # veriloop in its own words (preflight), so only in the run's log
        hf_logging.get_logger("transformers.modeling_utils").warning("a transformers warning")
        warnings.warn("a library's warning", UserWarning, stacklevel=1)
        logging.getLogger("veriloop.x").info("ours")
        logging.getLogger("veriloop.x").debug("only in the run's log")
        logging.getLogger("some.library").info("another library's information: only in the run's log")
    err = capsys.readouterr().err
    said = err.splitlines()
    assert "warning: [transformers] a transformers warning" in said, err
    assert not any(line.startswith("[transformers]") for line in said)  # not transformers' own handler
    assert "Token indices" not in err
    assert any(line.startswith("warning: [py.warnings] ") and "a library's warning" in line for line in said), err
    assert "ours" in said and "only in the run's log" not in err and "another library" not in err
    log = (tmp_path / "train.log").read_text()
    kept = [
        "WARNING transformers.tokenization_utils_base: Token indices sequence length is longer",
        "a transformers warning",
        "a library's warning",
        "INFO    veriloop.x: ours",
        "DEBUG   veriloop.x: only in the run's log",
        "INFO    some.library: another library's information",
    ]
    for text in kept:
        assert text in log, text
    assert not hf_logger.propagate and hf_logger.handlers  # put back as transformers had it


def test_a_run_log_waits_for_its_directory_and_a_refused_directory_gets_none(tmp_path):
    log = logging.getLogger("veriloop.test")
    log.setLevel(logging.DEBUG)
    run_dir = tmp_path / "run"
    with logs.attach_run_log(run_dir, "train", marker="config.yaml", logger="veriloop"):
        log.info("before the run took its directory")
        run_dir.mkdir()
        log.info("the directory exists, config.yaml not yet")
        (run_dir / "config.yaml").write_text("{}")
        log.info("accepted")
    text = (run_dir / "train.log").read_text()
    assert [line.split(": ", 1)[1] for line in text.splitlines()] == [
        "before the run took its directory",
        "the directory exists, config.yaml not yet",
        "accepted",
    ]
    with logs.attach_run_log(tmp_path / "refused", "train", marker="config.yaml", logger="veriloop"):
        (tmp_path / "refused").mkdir()
        log.warning("refused: its directory holds another run's files")
    assert list((tmp_path / "refused").iterdir()) == []
    # the demo's directory is said by the record that chooses it; an error ending the block is written too
    with pytest.raises(ValueError), logs.attach_run_log(None, "demo", logger="veriloop"):
        log.info("starting")
        (tmp_path / "demo").mkdir()
        log.info("demo directory: ...", extra={**logs.FILE_ONLY, **logs.run_dir_extra(tmp_path / "demo")})
        raise ValueError("boom")
    text = (tmp_path / "demo" / "demo.log").read_text()
    assert "starting" in text and "demo directory" in text
    assert "ended by Traceback" in text and "ValueError: boom" in text
    log.setLevel(logging.NOTSET)


def test_off_a_terminal_other_libraries_bars_are_switched_off_for_the_command_only(monkeypatch):
    names = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "VLLM_CONFIGURE_LOGGING")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    restore = logs.quiet_third_party(terminal=False)
    import os

    assert [os.environ.get(n) for n in names] == ["1", "1", "0"]
    restore()
    assert [os.environ.get(n) for n in names] == [None, None, None]
    monkeypatch.setenv("TQDM_DISABLE", "0")  # the user's own setting is kept
    logs.quiet_third_party(terminal=False)()
    assert os.environ["TQDM_DISABLE"] == "0"
