"""What veriloop says while it works: messages through ``logging``, progress a person can read, a log per run.

Library code logs through ``logging.getLogger(__name__)`` (the ``veriloop`` hierarchy) and shows progress with
``progress()``; it never configures the root logger nor adds a handler, so the code that embeds veriloop (a
notebook, a Ray actor, a SLURM job) decides what is shown and where.  Only the command line calls
``setup_cli_logging`` (``cli_logging``) and ``attach_run_log``:

* on a terminal (stderr is a TTY) each stage shows one live tqdm bar with its rate and ETA, and messages are
  written above it;
* off a terminal (CI, ``nohup``, a file) progress is plain lines, one every N steps (about 10 to 20 lines for a
  run, the first and the last included; ``--log_every N`` sets N), each with the key metrics, elapsed time and
  ETA, and no carriage return anywhere; other libraries' progress bars (transformers', huggingface_hub's,
  datasets', vLLM's) are switched off and their messages go through ``logging`` too;
* every run directory gets its full log (debug level, timestamps): ``RUN_DIR/train.log``, ``demo.log``, ...,
  appended to when the run is continued.

Two flags a record may carry (``log.info(msg, extra=...)``): ``FILE_ONLY`` (the line is already said on stdout;
the run's log keeps a copy) and ``run_dir_extra(path)`` (the directory a run log without a known directory is
to be written in, said by the code that chooses it, e.g. the demo's).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FILE_ONLY = {"veriloop_file_only": True}
_RUN_DIR = "veriloop_run_dir"
_FILE_FORMAT = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S")
LINES_PER_RUN = 20  # off a terminal: at most about this many progress lines (and at least half as many)
UNKNOWN_TOTAL_INTERVAL_S = 30.0  # off a terminal, with no known total and no --log_every: a line this often


class _Settings:
    every = 0  # --log_every: a progress line every this many units (0: chosen from the total)


def run_dir_extra(path) -> dict:
    """``extra=`` for the record that says which directory a run writes in (``attach_run_log(None, ...)``)."""
    return {_RUN_DIR: str(path)}


def is_terminal(stream=None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _ours(record: logging.LogRecord) -> bool:
    return record.name == "veriloop" or record.name.startswith("veriloop.")


def _no_carriage_returns(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ---------------------------------------------------------------------------------------------------- progress


def progress(
    iterable: Iterable | None = None,
    *,
    desc: str = "",
    total: float | None = None,
    unit: str = "it",
    initial: int = 0,
    enabled: bool = True,
    logger: logging.Logger | None = None,
) -> Progress:
    """A progress display with tqdm's interface (iterate it, or ``update(n)``; ``set_postfix``, ``write``,
    ``close``): a live tqdm bar on a terminal, plain lines through ``logger`` (INFO) off one, nothing shown if
    not ``enabled``.  Each update is also a DEBUG line (the run's log keeps every step).  ``total``: None reads
    ``len(iterable)``; ``math.inf`` means unknown (a run with a time budget: rate and elapsed time, no ETA)."""
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    bar = None
    if enabled and is_terminal():
        from tqdm import tqdm

        bar = tqdm(desc=desc, total=total, unit=unit, initial=initial, dynamic_ncols=True)
    return Progress(iterable, desc=desc, total=total, unit=unit, initial=initial, logger=logger, shown=enabled, bar=bar)


def nice_every(count: float, lines: int = LINES_PER_RUN) -> int:
    """The step between progress lines so that ``count`` units print between ``lines / 2`` and ``lines`` lines:
    1, 2, 5, 10, 20, 50, ... (lines at round numbers)."""
    if not count or not math.isfinite(count) or count <= lines:
        return 1
    scale = 10 ** math.floor(math.log10(count / lines))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale * lines >= count)


def format_duration(seconds: float) -> str:
    """``75`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class Progress:
    """What ``progress()`` returns.  Off a terminal (``bar`` None) it says plain lines at INFO: the first, one
    every ``every`` units, the last, each with where the stage is, its metrics (``set_postfix``), its rate,
    elapsed time and ETA, never a carriage return.  On a terminal the tqdm ``bar`` shows it instead.  Either
    way every update is a DEBUG line (only in the run's log while a bar is live), and not ``shown``: nothing but
    those DEBUG lines."""

    def __init__(
        self, iterable=None, *, desc="", total=None, unit="it", initial=0, logger=None, every=0, shown=True, bar=None
    ):
        self.iterable, self.desc, self.unit, self.n, self.initial = iterable, desc, unit, initial, initial
        self.total = total if total is not None and math.isfinite(total) else None
        self.every = every or _Settings.every or (nice_every(self.total - initial) if self.total else 0)
        self.logger = logger or logging.getLogger("veriloop.progress")
        self.shown, self.bar, self.postfix = shown, bar, {}
        self.started = self.last_time = time.monotonic()
        self.last_n, self.closed = initial, False

    def __iter__(self) -> Iterator:
        for obj in self.iterable:
            yield obj
            self.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        if self.shown and self.bar is None and self._due():
            self._say(logging.INFO)
        elif self.logger.isEnabledFor(logging.DEBUG):
            self._say(logging.DEBUG)

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs) -> None:
        self.postfix = {**(ordered_dict or {}), **kwargs}
        if self.bar is not None:
            self.bar.set_postfix(self.postfix, refresh=refresh)

    def set_description(self, desc=None, refresh=True) -> None:
        self.desc = desc or ""
        if self.bar is not None:
            self.bar.set_description(desc, refresh=refresh)

    def write(self, s: str, *args, **kwargs) -> None:
        self.logger.info(s)  # on a terminal the console handler writes it above the bar

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.shown and self.n != self.last_n:  # the last line (a run that stopped early)
            self._say(logging.INFO)

    def _due(self) -> bool:
        if self.last_n == self.initial or (self.total is not None and self.n >= self.total):
            return True  # the first line, and the last
        if self.every:
            return self.n // self.every > self.last_n // self.every
        return time.monotonic() - self.last_time >= UNKNOWN_TOTAL_INTERVAL_S

    def line(self) -> str:
        elapsed, done = time.monotonic() - self.started, self.n - self.initial
        where = f"{self.n}/{self.total} ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n}"
        parts = [f"{self.desc} {self.unit} {where}".strip()]
        if self.postfix:
            parts.append(" ".join(f"{k} {v}" for k, v in self.postfix.items()))
        rate = done / elapsed if elapsed > 0 else 0.0
        speed = f"{rate:.2f} {self.unit}/s" if rate >= 1 or not rate else f"{1 / rate:.2f} s/{self.unit}"
        timing = f"{speed}, elapsed {format_duration(elapsed)}"
        if self.total and done > 0:
            timing += f", ETA {format_duration((self.total - self.n) * elapsed / done)}"
        return _no_carriage_returns(" | ".join([*parts, timing]))

    def _say(self, level: int) -> None:
        self.logger.log(level, self.line(), extra=FILE_ONLY if self.bar is not None else None)
        if level >= logging.INFO:
            self.last_n, self.last_time = self.n, time.monotonic()


def training_postfix(row: dict) -> dict:
    """A training step's key metrics, as the progress display shows them (those the row has)."""
    shown = {
        "reward": ("reward_mean", ".3f"),
        "acc": ("accuracy", ".3f"),
        "kl": ("kl", ".4g"),
        "loss": ("loss", ".4g"),
        "tok/s": ("tokens_per_s", ".0f"),
    }
    return {name: format(row[key], spec) for name, (key, spec) in shown.items() if row.get(key) is not None}


# ---------------------------------------------------------------------------------------------------- the CLI's


# Other libraries' warnings that veriloop says in its own words: the run's log keeps them, the console does not
# show them.  transformers' "Token indices sequence length is longer than the specified maximum sequence length"
# (a tokenizer call on a long text): veriloop measures prompts against the model's context itself
# (training/run/preflight.py) and says what to change.
SAID_BY_VERILOOP = {"transformers": ("Token indices sequence length is longer than the specified maximum",)}


class _ConsoleFilter(logging.Filter):
    """veriloop's records from ``level``; other libraries' from WARNING (from INFO at debug level), but for those
    in ``SAID_BY_VERILOOP``; none marked ``FILE_ONLY``."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "veriloop_file_only", False):
            return False
        if _ours(record):
            return record.levelno >= self.level
        said = SAID_BY_VERILOOP.get(record.name.split(".")[0], ())
        if said and self.level > logging.DEBUG and record.getMessage().startswith(said):
            return False
        return record.levelno >= (logging.INFO if self.level <= logging.DEBUG else max(self.level, logging.WARNING))


class _ConsoleFormatter(logging.Formatter):
    """``message`` for veriloop's information; ``warning: ``, ``error: `` or ``debug: `` before the others, and
    another library's name in brackets (``warning: [transformers] Token indices ...``)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage().rstrip("\n")  # Python's warnings end with one
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        kind = {logging.DEBUG: "debug: ", logging.INFO: ""}.get(record.levelno)
        if kind is None:
            kind = "error: " if record.levelno >= logging.ERROR else "warning: "
        name = record.name if record.name == "py.warnings" else record.name.split(".")[0]
        source = "" if _ours(record) else f"[{name}] "
        return kind + source + text


class _ConsoleHandler(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (a test's capture, a redirected stream); through ``tqdm.write``
    on a terminal, so that a message never lands inside a live bar; off a terminal, never a carriage return."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text, stream = self.format(record), sys.stderr
            if is_terminal(stream) and "tqdm" in sys.modules:
                from tqdm import tqdm

                tqdm.write(text, file=stream)
            else:
                stream.write(_no_carriage_returns(text) + "\n")
                stream.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: a handler never raises
            self.handleError(record)


def quiet_third_party(terminal: bool | None = None) -> Callable[[], None]:
    """Switch off other libraries' progress bars off a terminal (in this process and those it starts), and make
    vLLM leave its logging to ours.  Environment first: call it before they are imported (tqdm reads
    TQDM_DISABLE once, when first imported: the command line's own process, which shows progress with
    ``progress()`` off a terminal, never tqdm).  Returns what puts the environment back (for a caller that runs
    the command line in its own process, e.g. a test)."""
    terminal = is_terminal() if terminal is None else terminal
    wanted = {"VLLM_CONFIGURE_LOGGING": "0"}  # vLLM's records reach our handlers (not its own)
    if not terminal:  # TQDM_DISABLE: read by tqdm when it is imported (vLLM's bars, datasets')
        wanted.update(HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    added = [name for name in wanted if name not in os.environ]
    os.environ.update({name: wanted[name] for name in added})
    if "huggingface_hub" in sys.modules and not terminal:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()

    def restore() -> None:
        for name in added:
            os.environ.pop(name, None)

    return restore


def _route_transformers() -> Callable[[], None]:
    """transformers' records through the root logger's handlers (not its own ``[transformers] ...`` handler),
    its progress bars off; returns what undoes the routing."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return lambda: None
    hf_logging.disable_progress_bar()  # ours show progress; theirs would interleave
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()

    def undo() -> None:
        hf_logging.disable_propagation()
        hf_logging.enable_default_handler()

    return undo


def setup_cli_logging(level: int | str = logging.INFO, *, log_every: int = 0):
    """The command line's logging: one console handler on stderr (veriloop's records from ``level``, other
    libraries' warnings), Python warnings and transformers' messages through it, veriloop's debug records
    kept for the run logs (``attach_run_log``).  Returns a function that undoes it all (for a caller that runs
    the command line in its own process, e.g. a test)."""
    level = LEVELS[level] if isinstance(level, str) else level
    root, ours = logging.getLogger(), logging.getLogger("veriloop")
    saved = (root.level, ours.level, _Settings.every)
    for h in [h for h in root.handlers if isinstance(h, _ConsoleHandler)]:  # a second setup replaces the first
        root.removeHandler(h)
    handler = _ConsoleHandler()
    handler.addFilter(_ConsoleFilter(level))
    handler.setFormatter(_ConsoleFormatter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # other libraries' information reaches the run logs, their debug does not
    ours.setLevel(logging.DEBUG)
    _Settings.every = max(0, int(log_every or 0))
    logging.captureWarnings(True)
    undo_transformers = _route_transformers()

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        ours.setLevel(saved[1])
        _Settings.every = saved[2]
        logging.captureWarnings(False)
        undo_transformers()

    return undo


@contextmanager
def cli_logging(level: int | str = logging.INFO, *, log_every: int = 0):
    undo = setup_cli_logging(level, log_every=log_every)
    try:
        yield
    finally:
        undo()


# ---------------------------------------------------------------------------------------------------- run logs


class RunLogHandler(logging.Handler):
    """Appends every record (debug level, timestamps) to ``RUN_DIR/NAME.log`` once the run has taken its
    directory (``marker`` in it, when given: the file a command writes once it has accepted the directory);
    records before that wait in memory, and are dropped if it never does (a refused directory gets no log).
    With ``run_dir`` None, the directory is the one a record says (``run_dir_extra``)."""

    def __init__(self, run_dir, name: str, marker: str | None = None):
        super().__init__(logging.DEBUG)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.filename, self.marker = f"{name}.log", marker
        self.file, self.waiting = None, []
        self.setFormatter(_FILE_FORMAT)

    @property
    def path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / self.filename

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.run_dir is None and getattr(record, _RUN_DIR, None):
                self.run_dir = Path(getattr(record, _RUN_DIR))
            self.waiting.append(_no_carriage_returns(self.format(record).rstrip("\n")) + "\n")
            self._write()
        except Exception:  # noqa: BLE001 - logging's own contract: a handler never raises
            self.handleError(record)

    def _write(self) -> None:
        if self.file is None and self.run_dir is not None and (self.run_dir / (self.marker or "")).exists():
            self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open until the run ends
        if self.file is not None:
            self.file.writelines(self.waiting)
            self.file.flush()
            self.waiting = []

    def close(self) -> None:
        self.acquire()
        try:
            self._write()  # the directory may have come with the last record
            if self.file is not None:
                self.file.close()
                self.file = None
            self.waiting = []
        finally:
            self.release()
        super().close()


@contextmanager
def attach_run_log(run_dir, name: str, *, marker: str | None = None, logger: str = ""):
    """While the block runs, ``RUN_DIR/NAME.log`` receives every record reaching ``logger`` (default: the root
    logger, where the command line's handlers are; a library caller may pass ``"veriloop"``), appended to: a
    continued run's log keeps the earlier attempts'.  An exception leaving the block is written to it too."""
    handler = RunLogHandler(run_dir, name, marker)
    target = logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield handler
    except BaseException as e:
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            said = "".join(traceback.format_exception(e)).rstrip() if isinstance(e, Exception) else repr(e)
            handler.handle(logging.LogRecord("veriloop", logging.ERROR, __file__, 0, "ended by %s", (said,), None))
        raise
    finally:
        target.removeHandler(handler)
        handler.close()
