"""Experiment tracking (veriloop.training.run.tracking): each backend's own reader gets back the rows and the config.

The backends log in a child process with a deadline: wandb starts a service process of its own, and a hang must fail
the test, not stall the suite. Nothing leaves the machine: wandb offline, mlflow's local store, error reports and
telemetry off, and wandb's caches under tmp_path.
"""

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from veriloop.errors import InputError
from veriloop.training.run.tracking import TRACKERS, build_tracker, check_report_to, numeric_row

CHILD_TIMEOUT_S = 120
TEST_DEADLINE_S = 150  # past the child's, so that a hung child reports as such

CONFIG = {
    "algo": "grpo",
    "lr": 1e-6,
    "use_kl": False,
    "model": {"name": "tiny", "layers": 2},
    "stages": [1, 2],
    "seed": None,
    "long": "x" * 10_000,  # over mlflow's param length limit (6000 in mlflow 3)
}
# Each row also holds what must be skipped: a string, None, a list.
ROWS = [
    (
        step,
        {
            "reward_mean": 0.1 * step,
            "eval": {"accuracy": 0.5},
            "done": step == 3,
            "note": "x",
            "seed": None,
            "lengths": [1, 2],
        },
    )
    for step in (1, 2, 3)
]
EXPECTED = {
    "reward_mean": [(1, 0.1), (2, 0.2), (3, 0.3)],
    "eval/accuracy": [(1, 0.5), (2, 0.5), (3, 0.5)],
    "done": [(1, 0), (2, 0), (3, 1)],  # bools as 0/1
}

_CHILD = """
import json, sys
from pathlib import Path
from veriloop.training.run.tracking import build_tracker

report_to, run_dir, sessions = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
config, rows = json.load(sys.stdin)
for _ in range(sessions):  # a second session is a resumed run in the same directory
    tracker = build_tracker(report_to, run_dir, config, "run-1")
    for step, metrics in rows:
        tracker.log(step, metrics)
    tracker.close()
"""


@pytest.fixture(autouse=True)
def _deadline():
    """Fail rather than hang: the repo has no pytest-timeout."""

    def expire(signum, frame):
        raise TimeoutError(f"test ran past {TEST_DEADLINE_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _local_env(home: Path) -> dict:
    """This process's environment, minus any tracking settings, plus those that keep everything on this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_ERROR_REPORTING="false",
        WANDB_CACHE_DIR=str(home / "wandb-cache"),  # wandb-core's own logs go here, not to ~/.cache
        WANDB_CONFIG_DIR=str(home / "wandb-config"),
        WANDB_DATA_DIR=str(home / "wandb-data"),
        MLFLOW_DISABLE_TELEMETRY="true",
        DO_NOT_TRACK="true",
    )
    return env


@pytest.fixture
def local_env(tmp_path, monkeypatch):
    """The same for this process, undone after the test (build_tracker sets defaults into os.environ)."""
    env = _local_env(tmp_path)
    for name in list(os.environ):
        if name.startswith(("WANDB_", "MLFLOW_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _log(report_to: str, run_dir: Path, sessions: int = 1) -> None:
    """Build a tracker on ``run_dir``, log ROWS and close it, ``sessions`` times, in a child process."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, report_to, str(run_dir), str(sessions)],
        input=json.dumps([CONFIG, ROWS]),
        env=_local_env(run_dir.parent),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def _read_tensorboard(run_dir: Path) -> tuple[dict, dict, dict]:
    """(scalars by tag as [(step, value)], the config from the text summary, the hparams)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()  # every event file in the folder, oldest first
    history = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    start = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
    hparams = {key: getattr(value, value.WhichOneof("kind")) for key, value in hparams.items()}
    return history, yaml.safe_load(textwrap.dedent(text)), hparams


def _wandb_records(path: Path):
    """The protobuf records of a .wandb file.

    LevelDB's log format after a 7-byte header (":W&B", magic, version): 32 KiB blocks of chunks, each behind a 7-byte
    header (crc32, length, type); a record too long for its block is split into FIRST, MIDDLE..., LAST chunks; a
    block's last < 7 bytes are padding.
    """
    from wandb.proto import wandb_internal_pb2

    block, full, last = 32 * 1024, 1, 4
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, pending = 7, b""
    while len(data) - pos >= 7:
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zeros: nothing written past here
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (full, last):
            yield wandb_internal_pb2.Record.FromString(pending)
            pending = b""


def _read_wandb_run(path: Path) -> tuple[dict, dict]:
    """(history by key as [(step, value)], config) of one offline run's .wandb file."""
    history, config = {}, {}
    for record in _wandb_records(path):
        kind = record.WhichOneof("record_type")
        items = {"history": record.history.item, "run": record.run.config.update, "config": record.config.update}
        values = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in items.get(kind, ())}
        if kind == "history":
            step = values["_step"]
            for key, value in values.items():
                if not key.startswith("_"):  # wandb's own: _step, _runtime, _timestamp
                    history.setdefault(key, []).append((step, value))
        elif kind in ("run", "config"):
            config.update({k: v for k, v in values.items() if not k.startswith("_")})
    return history, config


def _read_wandb(run_dir: Path) -> list[tuple[dict, dict]]:
    return [_read_wandb_run(path) for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))]


def _read_mlflow(run_dir: Path, tmp_path: Path) -> list[tuple[str, dict, dict, dict]]:
    """(run name, metric history by key as [(step, value)], config.json, params) of each run, oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("veriloop")
    runs = []
    for run in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]):
        run_id = run.info.run_id
        history = {key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)] for key in run.data.metrics}
        config = json.loads(Path(client.download_artifacts(run_id, "config.json", str(tmp_path))).read_text())
        runs.append((run.info.run_name, history, config, run.data.params))
    return runs


def _assert_history(history: dict, expected: dict = EXPECTED) -> None:
    assert set(history) == set(expected)  # no string, None or list got in
    for key, rows in expected.items():
        got = sorted(history[key]) if key in history else []
        assert [step for step, _ in got] == [step for step, _ in sorted(rows)], key
        assert [value for _, value in got] == pytest.approx([value for _, value in sorted(rows)], rel=1e-6), key


@pytest.mark.parametrize("backend", ["tensorboard", "wandb", "mlflow"])
def test_each_backend_gives_back_the_rows_and_the_config(backend, tmp_path):
    pytest.importorskip(backend)  # each backend is the package of its name
    run_dir = tmp_path / "run"
    _log(backend, run_dir)
    if backend == "tensorboard":
        history, config, hparams = _read_tensorboard(run_dir)
        # numbers, strings and bools as they are; anything else as JSON text
        assert hparams == {
            "algo": "grpo",
            "lr": 1e-6,
            "use_kl": False,
            "model/name": "tiny",
            "model/layers": 2,
            "stages": "[1, 2]",
            "seed": "null",
            "long": "x" * 10_000,
        }
    elif backend == "wandb":
        (run,) = _read_wandb(run_dir)
        history, config = run
    else:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        ((name, history, config, params),) = _read_mlflow(run_dir, tmp_path)
        assert name == "run-1"
        assert MAX_PARAM_VAL_LENGTH < 10_000  # else "long" tests no truncation
        assert params == {
            "algo": "grpo",
            "lr": "1e-06",
            "use_kl": "false",
            "model/name": "tiny",
            "model/layers": "2",
            "stages": "[1, 2]",
            "seed": "null",
            "long": "x" * MAX_PARAM_VAL_LENGTH,
        }
    _assert_history(history)
    assert config == CONFIG


def test_all_backends_at_once_and_a_resumed_run(tmp_path):
    for backend in TRACKERS[1:]:
        pytest.importorskip(backend)
    run_dir = tmp_path / "run"
    _log("tensorboard,wandb,mlflow", run_dir, sessions=2)
    # tensorboard: both sessions' event files in one folder, so each step twice
    history, _, _ = _read_tensorboard(run_dir)
    _assert_history(history, {key: rows * 2 for key, rows in EXPECTED.items()})
    # wandb: a second offline run beside the first
    wandb_runs = _read_wandb(run_dir)
    assert len(wandb_runs) == 2
    for history, config in wandb_runs:
        _assert_history(history)
        assert config == CONFIG
    # mlflow: a second run of the same name in the same experiment
    mlflow_runs = _read_mlflow(run_dir, tmp_path)
    assert [name for name, *_ in mlflow_runs] == ["run-1", "run-1"]
    for _, history, config, _ in mlflow_runs:
        _assert_history(history)
        assert config == CONFIG


def test_none_writes_nothing(tmp_path, local_env):
    run_dir = tmp_path / "run"
    tracker = build_tracker("none", run_dir, CONFIG, "run-1")
    for step, metrics in ROWS:
        tracker.log(step, metrics)
    tracker.close()
    tracker.close()  # closing twice does nothing
    assert not run_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_numeric_row_flattens_and_keeps_only_numbers():
    metrics = {
        "a": 1,
        "b": True,
        "c": {"d": 2.5, "e": "s", "f": {"g": np.float32(0.25)}},
        "h": None,
        "i": [1.0],
        "j": np.int64(7),
    }
    row = numeric_row(metrics)
    assert row == {"a": 1, "b": 1, "c/d": 2.5, "c/f/g": 0.25, "j": 7}
    assert type(row["b"]) is int and type(row["c/f/g"]) is float and type(row["j"]) is int


@pytest.mark.parametrize("report_to", ["none", "tensorboard", "tensorboard,mlflow", " wandb , mlflow ", "wandb,wandb"])
def test_check_report_to_accepts(report_to):
    check_report_to(report_to)


@pytest.mark.parametrize(
    "report_to, named",
    [
        ("neptune", "'neptune'"),
        ("tensorboard,neptune", "'neptune'"),
        ("", "''"),
        ("none,wandb", "'none' cannot be combined"),
    ],
)
def test_check_report_to_rejects(report_to, named):
    with pytest.raises(ValueError) as caught:
        check_report_to(report_to)
    assert isinstance(caught.value, InputError)
    message = str(caught.value)
    assert named in message
    for allowed in TRACKERS:
        assert f"'{allowed}'" in message, message


@pytest.mark.parametrize(
    "report_to, missing, extra",
    [
        ("tensorboard", "tensorboard", "tensorboard"),
        ("wandb", "wandb", "wandb"),
        ("mlflow", "mlflow", "mlflow"),
        ("tensorboard,wandb", "wandb", "wandb"),
    ],
)
def test_a_missing_package_is_an_input_error_naming_the_extra(
    report_to, missing, extra, tmp_path, monkeypatch, local_env
):
    if report_to != missing:
        pytest.importorskip(report_to.split(",")[0])
    monkeypatch.setitem(sys.modules, missing, None)  # how `import` sees a package that is not installed
    run_dir = tmp_path / "run"
    with pytest.raises(InputError) as caught:
        build_tracker(report_to, run_dir, CONFIG, "run-1")
    assert str(caught.value) == f"report_to {extra} needs the {missing} package: pip install 'veriloop[{extra}]'"
    assert not run_dir.exists()  # checked before any backend started


def test_mlflow_local_store_needs_sqlalchemy(tmp_path, monkeypatch, local_env):
    pytest.importorskip("mlflow")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    with pytest.raises(InputError, match=r"report_to mlflow needs the sqlalchemy package: .*veriloop\[mlflow\]"):
        build_tracker("mlflow", tmp_path / "run", CONFIG, "run-1")


def _unset(monkeypatch, *names):
    for name in names:
        monkeypatch.setenv(name, "")  # so that monkeypatch undoes what build_tracker sets, too
        monkeypatch.delenv(name)


def test_local_backends_turn_error_reports_and_telemetry_off_by_default(tmp_path, monkeypatch, local_env):
    monkeypatch.setitem(sys.modules, "wandb", None)  # stops build_tracker right after it set the defaults
    monkeypatch.setitem(sys.modules, "mlflow", None)
    _unset(monkeypatch, "WANDB_MODE", "WANDB_ERROR_REPORTING", "MLFLOW_TRACKING_URI", "MLFLOW_DISABLE_TELEMETRY")
    for report_to in ("wandb", "mlflow"):
        with pytest.raises(InputError, match=f"report_to {report_to} needs the {report_to} package"):
            build_tracker(report_to, tmp_path / "run", CONFIG, "run-1")
    assert os.environ["WANDB_ERROR_REPORTING"] == "false"
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    # online, or a tracking server: the user's and the package's defaults stand
    _unset(monkeypatch, "WANDB_ERROR_REPORTING", "MLFLOW_DISABLE_TELEMETRY")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    for report_to in ("wandb", "mlflow"):
        with pytest.raises(InputError, match=f"report_to {report_to} needs the {report_to} package"):
            build_tracker(report_to, tmp_path / "run", CONFIG, "run-1")
    assert "WANDB_ERROR_REPORTING" not in os.environ and "MLFLOW_DISABLE_TELEMETRY" not in os.environ
    # a value already set wins
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")
    with pytest.raises(InputError, match="report_to wandb needs the wandb package"):
        build_tracker("wandb", tmp_path / "run", CONFIG, "run-1")
    assert os.environ["WANDB_ERROR_REPORTING"] == "true"


def test_a_training_run_reports_every_metrics_row_and_its_evaluation_curve(tmp_path, local_env):
    """`veriloop train --report_to tensorboard --eval_every 2`: each step's row in TensorBoard, the periodic
    evaluation in the rows and as a curve in the run's report."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from veriloop import cli

    run_dir = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--policy",
            "builtin:init",
            "--model.hidden_size",
            "32",
            "--model.num_layers",
            "1",
            "--model.intermediate_size",
            "64",
            "--model.num_heads",
            "2",
            "--steps",
            "4",
            "--eval_every",
            "2",
            "--eval_problems",
            "4",
            "--rollout.prompts_per_step",
            "2",
            "--rollout.group_size",
            "2",
            "--sampling.max_new_tokens",
            "8",
            "--run_dir",
            str(run_dir),
            "--report_to",
            "tensorboard",
            "--device",
            "cpu",
            "--task.arithmetic.heldout_size",
            "4",
        ]
    )
    assert code in (0, None)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    rewards = [(e.step, e.value) for e in events.Scalars("reward_mean")]
    assert rewards == [(r["step"], pytest.approx(r["reward_mean"])) for r in rows]
    evals = [(e.step, e.value) for e in events.Scalars("validation_greedy_accuracy")]
    assert [s for s, _ in evals] == [2, 4]
    assert (run_dir / "plots" / "evaluation.png").is_file()
    from veriloop.report.data import page_data

    curves = page_data(run_dir)["curves"]  # the run browser's evaluation chart: the same two points
    assert curves["eval_steps"] == [2, 4] and any(p["id"] == "evaluation" for p in curves["panels"])


def test_a_missing_tracker_package_stops_the_run_before_its_directory_exists(tmp_path, monkeypatch, local_env):
    from veriloop import cli

    monkeypatch.setitem(sys.modules, "wandb", None)
    run_dir = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--policy",
            "builtin:init",
            "--model.hidden_size",
            "32",
            "--model.num_layers",
            "1",
            "--model.intermediate_size",
            "64",
            "--model.num_heads",
            "2",
            "--steps",
            "1",
            "--run_dir",
            str(run_dir),
            "--report_to",
            "wandb",
            "--device",
            "cpu",
        ]
    )
    assert code == 2 and not run_dir.exists()
