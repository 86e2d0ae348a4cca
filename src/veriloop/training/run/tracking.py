"""Experiment tracking: each metrics row goes to TensorBoard, Weights & Biases and/or MLflow.

``report_to`` is "none" or a comma-separated list of backends. Each logs the run's config once, then every numeric
value of each row (nested dicts flattened with "/": ``eval/accuracy``), and writes under the run directory unless
the environment points it elsewhere:

- tensorboard: event files in ``run_dir/tensorboard/``; the config as a text summary (YAML) and as hparams.
- wandb: ``run_dir/wandb/offline-run-*/`` (upload later with ``wandb sync``); offline unless WANDB_MODE says
  otherwise; project WANDB_PROJECT (default "veriloop"); the config as the run's ``config``.
- mlflow: MLFLOW_TRACKING_URI if set, else a SQLite store ``run_dir/mlruns/mlflow.db`` with artifacts in
  ``run_dir/mlruns/artifacts/`` (view: ``mlflow ui --backend-store-uri sqlite:///<run_dir>/mlruns/mlflow.db``);
  recent mlflow refuses a plain ``mlruns/`` file store. Experiment MLFLOW_EXPERIMENT_NAME (default "veriloop");
  the config as params (flattened, stringified, truncated to mlflow's limit) and as the artifact ``config.json``.

A resumed run logs into the same run directory again: tensorboard adds an event file to the same folder (one run in
TensorBoard; steps logged before the crash and again after show twice), wandb starts a new offline run beside the
first, and mlflow starts a new run with the same name in the same experiment.

While the data stays on this machine (wandb offline, mlflow's local store), nothing else leaves it either:
WANDB_ERROR_REPORTING and MLFLOW_DISABLE_TELEMETRY default to off (a value already set wins).
"""

from __future__ import annotations

import importlib
import json
import numbers
import os
import time
from pathlib import Path

import yaml

from veriloop.errors import InputError

TRACKERS = ("none", "tensorboard", "wandb", "mlflow")

# Modules each backend imports; the extra of the same name installs them.
_MODULES = {"tensorboard": ("tensorboard",), "wandb": ("wandb",), "mlflow": ("mlflow",)}
_MLFLOW_LOCAL_STORE_MODULES = ("sqlalchemy", "alembic")  # mlflow-skinny lacks them; its SQLite store needs both
_MLFLOW_PARAM_LENGTH_FALLBACK = 500  # mlflow's smallest limit ever, should its internal constant move


def _parse(report_to: str) -> tuple[str, ...]:
    """The backends named in ``report_to`` (none for "none"), or an InputError."""
    names = tuple(dict.fromkeys(name.strip() for name in str(report_to).split(",")))
    unknown = [name for name in names if name not in TRACKERS]
    if unknown or ("none" in names and len(names) > 1):
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "'none' cannot be combined with a backend"
        raise InputError(
            f"report_to {report_to!r}: {what}; allowed: 'none' or a comma-separated list of "
            f"{', '.join(map(repr, TRACKERS[1:]))} (e.g. 'tensorboard,mlflow')"
        )
    return () if names == ("none",) else names


def check_report_to(report_to: str) -> None:
    """Raise InputError (a ValueError) unless ``report_to`` is "none" or a comma-separated list of backends."""
    _parse(report_to)


def flatten(tree: dict, prefix: str = "") -> dict:
    """``{"eval": {"accuracy": 0.5}}`` -> ``{"eval/accuracy": 0.5}``; other values are kept as they are."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def numeric_row(metrics: dict) -> dict[str, int | float]:
    """The numbers in ``metrics``, flattened: bools become 0/1; strings, None, lists and the like are dropped."""
    row = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool):
            row[key] = int(value)
        elif isinstance(value, numbers.Integral):
            row[key] = int(value)
        elif isinstance(value, numbers.Real):  # numpy scalars included
            row[key] = float(value)
    return row


def _plain(config: dict) -> dict:
    """``config`` as JSON types only (paths, tuples... become strings and lists), as every backend can store it."""
    return json.loads(json.dumps(config, default=str))


def _as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _TensorBoard:
    def __init__(self, run_dir: Path, config: dict, run_name: str):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        # indented: TensorBoard renders text as Markdown, and an indented block shows verbatim
        text = yaml.safe_dump(config, sort_keys=False)
        self.writer.add_text("config", "".join(f"    {line}\n" for line in text.splitlines()))
        # hparams() takes numbers, strings and bools only
        values = {k: v if isinstance(v, (int, float, str, bool)) else _as_text(v) for k, v in flatten(config).items()}
        for summary in hparams(values, {}):  # written into this run's file, not a new run as add_hparams would
            self.writer._get_file_writer().add_summary(summary)

    def log(self, step: int, row: dict) -> None:
        for key, value in row.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, run_dir: Path, config: dict, run_name: str):
        import wandb

        self.run = wandb.init(
            mode=os.environ.get("WANDB_MODE", "offline"),
            dir=run_dir,
            project=os.environ.get("WANDB_PROJECT", "veriloop"),
            name=run_name,
            config=config,
            reinit="create_new",  # a run left open elsewhere in this process must not receive our rows
        )

    def log(self, step: int, row: dict) -> None:
        self.run.log(row, step=step)

    def close(self) -> None:
        self.run.finish()


class _MLflow:
    def __init__(self, run_dir: Path, config: dict, run_name: str):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as max_length
        except ImportError:
            max_length = _MLFLOW_PARAM_LENGTH_FALLBACK
        uri, artifacts = _mlflow_store(run_dir)
        # a client of our own, not mlflow's global active run, which the caller's code may be using
        self.client = MlflowClient(uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "veriloop")
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            experiment_id = self.client.create_experiment(name, artifact_location=artifacts)
        else:
            experiment_id = experiment.experiment_id
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        params = [Param(key, _as_text(value)[:max_length]) for key, value in flatten(config).items()]
        try:
            self.client.log_batch(self.run_id, params=params)  # the client splits it into mlflow's batch limits
            self.client.log_dict(self.run_id, config, "config.json")
        except BaseException:
            self.client.set_terminated(self.run_id, "FAILED")  # not left showing as running
            raise

    def log(self, step: int, row: dict) -> None:
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now_ms, step) for key, value in row.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _mlflow_store(run_dir: Path) -> tuple[str, str | None]:
    """(tracking URI, artifact location for a new experiment): MLFLOW_TRACKING_URI's, or SQLite under the run."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None  # the server decides where artifacts go
    store = (run_dir / "mlruns").resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}", (store / "artifacts").as_uri()


_BACKENDS = {"tensorboard": _TensorBoard, "wandb": _WandB, "mlflow": _MLflow}


def _stays_local(backend: str) -> None:
    """Turn off the error reports and telemetry a backend sends home even when its data stays here."""
    if backend == "wandb" and os.environ.get("WANDB_MODE", "offline") in ("offline", "disabled"):
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    if backend == "mlflow" and not os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # read when mlflow is imported, so set it before


def _import(backend: str) -> None:
    """Import what ``backend`` needs, so that a missing package fails before any backend has started."""
    modules = _MODULES[backend]
    if backend == "mlflow" and not os.environ.get("MLFLOW_TRACKING_URI"):
        modules += _MLFLOW_LOCAL_STORE_MODULES
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise InputError(
                f"report_to {backend} needs the {module} package: pip install 'veriloop[{backend}]'"
            ) from e


class Tracker:
    """Sends each metrics row to every backend it holds; with none, does nothing."""

    def __init__(self, backends=()):
        self._backends = list(backends)

    def log(self, step: int, metrics: dict) -> None:
        """Log the numbers in ``metrics`` (see ``numeric_row``) at ``step``."""
        row = numeric_row(metrics)
        if row:
            for backend in self._backends:
                backend.log(step, row)

    def close(self) -> None:
        """Flush and close every backend (each one, even if another fails); closing twice does nothing."""
        backends, self._backends = self._backends, []
        failure = None
        for backend in backends:
            try:
                backend.close()
            except Exception as e:  # re-raised below, once the others are closed
                failure = failure or e
        if failure is not None:
            raise failure


def check_installed(report_to: str) -> tuple[str, ...]:
    """The backends of ``report_to``, each importable (else an InputError naming its extra); nothing is started."""
    names = _parse(report_to)
    for name in names:
        _stays_local(name)
        _import(name)
    return names


def build_tracker(report_to: str, run_dir: Path, config: dict, run_name: str) -> Tracker:
    """A Tracker over the backends named in ``report_to``, each of which has logged ``config``."""
    names = check_installed(report_to)
    if not names:
        return Tracker()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = _plain(config)
    backends = []
    try:
        for name in names:
            backends.append(_BACKENDS[name](run_dir, config, run_name))
    except BaseException:
        Tracker(backends).close()  # the ones already started
        raise
    return Tracker(backends)
