"""A pool of worker processes with a hard wall-clock limit per call.

Signal-based time limits (``signal.alarm``, what math-verify uses) only work in a process's
main thread and cannot interrupt a long C-level computation; a trainer that grades from a
thread, or a sympy call that expands ``10**10**10``, would hang or crash.  Here every call
runs in a persistent worker process; the parent waits with a deadline and, when it passes,
kills that worker and starts a fresh one.  A crashed worker is replaced the same way.  The
caller always gets one ``CallResult`` per item, in order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait


@dataclass(frozen=True)
class CallResult:
    """``status``: ``ok`` (``value`` holds the return), ``timeout``, or ``error`` (``error`` says why)."""

    status: str
    value: object = None
    error: str = ""


def _worker_main(conn) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        fn, args = message
        try:
            conn.send(("ok", fn(*args), ""))
        except Exception as e:  # noqa: BLE001 - any failure of the call is reported, the worker lives on
            conn.send(("error", None, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    """``WorkerPool(workers=0)`` uses every core; ``map(fn, [args, ...], timeout)`` -> ``[CallResult]``.

    ``fn`` must be importable by name (a module-level function).  Use as a context manager or
    call ``close()``; workers are daemons, so they also end with the parent.
    """

    def __init__(self, workers: int = 0, start_method: str = "forkserver"):
        self.size = workers if workers > 0 else (os.cpu_count() or 1)
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker] = []

    def _ensure(self) -> None:
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self._ctx))

    def map(self, fn: Callable, items: Sequence[tuple], timeout: float) -> list[CallResult]:
        self._ensure()
        results: list[CallResult | None] = [None] * len(items)
        queue = list(range(len(items)))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (item index, deadline)
        while queue or busy:
            for w in range(len(self._workers)):
                if w not in busy and queue:
                    i = queue.pop()
                    try:
                        self._workers[w].conn.send((fn, tuple(items[i])))
                    except (BrokenPipeError, OSError):
                        self._replace(w)
                        self._workers[w].conn.send((fn, tuple(items[i])))
                    busy[w] = (i, time.monotonic() + timeout)
            next_deadline = min(d for _, d in busy.values())
            ready = wait([self._workers[w].conn for w in busy], timeout=max(0.0, next_deadline - time.monotonic()))
            for w in list(busy):
                i, deadline = busy[w]
                conn = self._workers[w].conn
                if conn in ready:
                    try:
                        status, value, error = conn.recv()
                        results[i] = CallResult(status, value, error)
                    except (EOFError, OSError):  # the worker died (crash, OOM kill): replace it
                        results[i] = CallResult("error", None, "worker process died")
                        self._replace(w)
                    except Exception as e:  # noqa: BLE001 - e.g. a result that cannot be unpickled
                        results[i] = CallResult("error", None, f"unreadable result: {type(e).__name__}: {e}")
                        self._replace(w)
                    del busy[w]
                elif time.monotonic() >= deadline:
                    results[i] = CallResult("timeout", None, f"no result within {timeout:g} s")
                    self._replace(w)
                    del busy[w]
        return results  # type: ignore[return-value]

    def _replace(self, w: int) -> None:
        self._workers[w].kill()
        self._workers[w] = _Worker(self._ctx)

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            worker.process.join(timeout=1)
            if worker.process.is_alive():
                worker.process.kill()
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
