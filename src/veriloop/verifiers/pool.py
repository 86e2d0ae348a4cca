"""A pool of worker processes with a hard wall-clock limit per call.

Signal-based time limits (``signal.alarm``, what math-verify uses) only work in a process's
main thread and cannot interrupt a long C-level computation; a trainer that grades from a
thread, or a sympy call that expands ``10**10**10``, would hang or crash.  Here every call
runs in a persistent worker process; the parent waits with a deadline and, when it passes,
kills that worker and starts a fresh one.  The caller gets one ``CallResult`` per item, in order.

Workers are fresh interpreters (``python -m veriloop.verifiers.pool_worker``, see that module)
speaking over pipes, not ``multiprocessing`` children: they never re-import the parent's
``__main__``, so the pool works from ``python -``, ``python -c``, a notebook and any thread.

Failures of the machinery are never results that look like verdicts:

* a call that raises -> ``CallResult("error")`` naming the exception (the worker lives on);
* a worker that dies during a call (crash, ``kill -9``, out of memory) -> ``CallResult("error")``
  saying it died and how; the worker is replaced (the call is not retried: it may be the cause);
* a pool that cannot keep workers alive raises ``WorkerPoolError``: ``max_start_failures``
  workers in a row that die or hang before they are ready, or ``max_deaths_in_a_row`` calls in a
  row that kill their worker (any call that returns resets the count).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path


class WorkerPoolError(RuntimeError):
    """The pool cannot start or keep its workers alive: an infrastructure failure, never a verdict."""


@dataclass(frozen=True)
class CallResult:
    """``status``: ``ok`` (``value`` holds the return), ``timeout``, or ``error`` (``error`` says why)."""

    status: str
    value: object = None
    error: str = ""


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds `veriloop`


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """One worker process and its two pipe ends; ``ready`` once it has answered the start-up message."""

    def __init__(self, python: str, preload: Sequence[str], start_timeout: float):
        self.stderr = tempfile.TemporaryFile()
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            # -P: the working directory is not put first on sys.path (a stray file cannot shadow a module)
            self.process = subprocess.Popen(
                [python, "-P", "-m", "veriloop.verifiers.pool_worker"],
                stdin=child_in,
                stdout=child_out,
                stderr=self.stderr,
                env=env,
                close_fds=True,
            )
        except OSError as e:
            for fd in (child_in, to_child, from_child, child_out):
                os.close(fd)
            self.stderr.close()
            raise WorkerPoolError(f"cannot start a worker process with {python!r}: {e}") from e
        os.close(child_in)
        os.close(child_out)
        self.tx = Connection(to_child, readable=False)
        self.rx = Connection(from_child, writable=False)
        self.ready = False
        self.deadline = time.monotonic() + start_timeout  # for start-up; then per call
        self.item: int | None = None  # the item it is working on
        try:
            self.tx.send({"sys_path": [p for p in sys.path if p], "preload": list(preload)})
        except OSError:  # it died at once: reported as a start-up failure by the pool
            pass

    def stderr_tail(self, chars: int = 600) -> str:
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - chars))
            return self.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def ended(self) -> str:
        """How the process ended (waits briefly for it), plus the end of what it wrote to stderr."""
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        tail = self.stderr_tail()
        return _how_it_ended(self.process.poll()) + (f"; its stderr ends: {tail}" if tail else "")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for closable in (self.tx, self.rx, self.stderr):
            closable.close()


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


class WorkerPool:
    """``WorkerPool(workers=0)`` uses every core; ``map(fn, [args, ...], timeout)`` -> ``[CallResult]``.

    ``fn`` must be importable by name in a fresh interpreter (a module-level function of an
    importable module, not of ``__main__``).  ``preload``: modules each worker imports before it
    counts as ready, so their import time is not charged to the first call's time limit.  Use as
    a context manager or call ``close()``; workers also exit when the parent process dies.  One
    ``map`` at a time (callers serialise; ``MathAnswer`` holds a lock).
    """

    def __init__(
        self,
        workers: int = 0,
        preload: Sequence[str] = (),
        start_timeout: float = 60.0,
        max_start_failures: int = 2,
        max_deaths_in_a_row: int = 3,
        python: str = sys.executable,
    ):
        if start_timeout <= 0 or max_start_failures < 1 or max_deaths_in_a_row < 1:
            raise ValueError("start_timeout must be > 0, max_start_failures and max_deaths_in_a_row >= 1")
        self.size = workers if workers > 0 else (os.cpu_count() or 1)
        self.preload, self.start_timeout, self.python = tuple(preload), start_timeout, python
        self.max_start_failures, self.max_deaths_in_a_row = max_start_failures, max_deaths_in_a_row
        self._workers: list[_Worker] = []
        self._start_failures = 0  # workers in a row that did not become ready
        self._deaths_in_a_row = 0  # calls in a row that killed their worker
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)

    def pids(self) -> list[int]:
        """Process ids of the current workers (for tests and diagnostics)."""
        return [w.process.pid for w in self._workers]

    def _start(self) -> _Worker:
        return _Worker(self.python, self.preload, self.start_timeout)

    def _fail(self, message: str) -> None:
        _kill_all(self._workers)  # a later map starts afresh
        self._start_failures = self._deaths_in_a_row = 0
        raise WorkerPoolError(message)

    def _start_failed(self, w: int, why: str) -> None:
        self._start_failures += 1
        self._workers[w].kill()
        if self._start_failures >= self.max_start_failures:
            self._fail(f"worker processes cannot start ({self._start_failures} failed in a row); last: {why}")
        self._workers[w] = self._start()

    def _died(self, w: int) -> str:
        why = f"worker process died during the call ({self._workers[w].ended()})"
        self._deaths_in_a_row += 1
        self._workers[w].kill()
        if self._deaths_in_a_row >= self.max_deaths_in_a_row:
            self._fail(f"{self._deaths_in_a_row} calls in a row killed their worker process; last: {why}")
        self._workers[w] = self._start()
        return why

    def map(self, fn: Callable, items: Sequence[tuple], timeout: float) -> list[CallResult]:
        if getattr(fn, "__module__", None) == "__main__":
            raise ValueError(f"{fn.__name__} is defined in __main__: a worker can only call an importable function")
        while len(self._workers) < self.size:
            self._workers.append(self._start())
        results: list[CallResult | None] = [None] * len(items)
        queue = deque(range(len(items)))
        while queue or any(w.item is not None for w in self._workers):
            for k, worker in enumerate(self._workers):  # hand out work to idle, ready workers
                if worker.ready and worker.item is None and queue:
                    i = queue.popleft()
                    try:
                        worker.tx.send((fn, tuple(items[i])))
                    except OSError:  # it died while idle: the call never ran; try it elsewhere
                        queue.appendleft(i)
                        self._died(k)
                        continue
                    worker.item, worker.deadline = i, time.monotonic() + timeout
            waiting = [w for w in self._workers if w.item is not None or not w.ready]
            ready = wait([w.rx for w in waiting], timeout=max(0.0, min(w.deadline for w in waiting) - time.monotonic()))
            for k, worker in enumerate(list(self._workers)):
                if worker not in waiting:
                    continue
                if worker.rx in ready:
                    self._receive(k, worker, results, timeout)
                elif time.monotonic() >= worker.deadline:
                    if worker.ready:  # a call ran past its limit: kill the worker, start a fresh one
                        results[worker.item] = CallResult("timeout", None, f"no result within {timeout:g} s")
                        worker.kill()
                        self._workers[k] = self._start()
                    else:
                        self._start_failed(k, f"not ready within {self.start_timeout:g} s")
        return results  # type: ignore[return-value]

    def _receive(self, k: int, worker: _Worker, results: list, timeout: float) -> None:
        try:
            message = worker.rx.recv()
        except (EOFError, OSError):  # the process ended
            if not worker.ready:
                self._start_failed(k, f"worker exited during start-up ({worker.ended()})")
            else:
                i = worker.item
                results[i] = CallResult("error", None, self._died(k))
            return
        except Exception as e:  # noqa: BLE001 - e.g. a result this process cannot unpickle
            results[worker.item] = CallResult("error", None, f"unreadable result: {type(e).__name__}: {e}")
            worker.kill()
            self._workers[k] = self._start()
            return
        if not worker.ready:  # ("ready", pid)
            worker.ready, self._start_failures = True, 0
            return
        status, value, error = message
        results[worker.item] = CallResult(status, value, error)
        worker.item, self._deaths_in_a_row = None, 0

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.tx.send(None)
            except OSError:
                pass
        for worker in self._workers:
            try:
                worker.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            worker.kill()
        self._workers.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
