"""Warm sandboxed interpreters for tool calls (``rollout/tools.py``): a tool call costs a fork, not a process start.

A fresh sandboxed run (``run.run_program``) starts a process: the namespaces and the view, the interpreter, the
harness, the imports (about 20 runs a second on one core here: ``benchmarks/sandbox_throughput.py``), most of a
tool call.  A ``WarmInterpreter`` is one sandboxed process made the same way (``supervisor.Child`` in the harness's
``warm`` mode: the same namespaces, view, seccomp filter, cgroups, resource limits), which imports the modules tool
code reaches for (``PRELOAD``, standard library only: what a fresh run may import) and then runs no program
itself.  For each request it forks a
child, a copy of itself taken before any program ran: the child takes an empty directory of its own, installs the
audit hook and runs the program as a fresh run's harness would, under the same limits (its CPU time counts from
zero; the address space, file size and open-file limits are inherited).  The warm process drains what the child
prints under the output cap, kills it at the wall clock, then kills its whole process group and empties the run
directory: state is reset between requests by construction (each child starts from the same untouched copy), so
no module patched, file written or process left by one program reaches the next.

It is replaced, never repaired: when it dies (its memory, a crash), hangs (no answer past the wall clock and a
grace), cannot empty its directory, or its own CPU time nears its limit (it says so before running anything),
its supervisor kills it, removes its directory and cgroups, and the next request starts a new one.  A request
whose interpreter ended before running it goes to a new one; one whose interpreter died while running it is a
``crash`` (the program's doing, as in a fresh run).

``WarmPool`` keeps idle interpreters for the threads that call tools (one per concurrent caller: a rollout
worker's tool threads); ``run_warm`` is the pool of this process for a set of limits.  Every interpreter is started
from one long-lived thread: the sandboxed process dies with the thread that started it (``PR_SET_PDEATHSIG``), and a
tool thread of one rollout call ends with it.
"""

from __future__ import annotations

import ast
import atexit
import os
import select
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from veriloop.sandbox.layers import Isolation, SandboxError
from veriloop.sandbox.limits import SandboxLimits
from veriloop.sandbox.probe import isolation
from veriloop.sandbox.process import write_all
from veriloop.sandbox.supervisor import Child, RunResult, _ending

# Imported once in the warm process, so that a program's ``import math`` costs nothing.  Standard library modules
# only, each one a fresh run may import too (the audit hook reads the interpreter's prefixes only); the harness
# drops from its module cache any module the hook forbids that one of these pulled in.
PRELOAD = (
    "math",
    "cmath",
    "fractions",
    "decimal",
    "numbers",
    "itertools",
    "functools",
    "operator",
    "collections",
    "heapq",
    "bisect",
    "statistics",
    "random",
    "re",
    "string",
    "datetime",
    "json",
)
START_SECONDS = 30.0  # a warm process that has not said it is ready by then could not be set up
GRACE_SECONDS = 2.0  # past a request's wall clock: the warm process itself should have answered by then


class WarmInterpreter:
    """One warm sandboxed process (see the module docstring).  ``run`` one program at a time."""

    def __init__(
        self,
        limits: SandboxLimits,
        iso: Isolation,
        preload: tuple[str, ...] = PRELOAD,
        retire_cpu_seconds: float | None = None,
    ):
        self.limits, self.isolation, self.buffer, self.alive, self.runs = limits, iso, b"", True, 0
        # the warm process's own CPU time (forks, reads) counts against the RLIMIT_CPU it runs under: at half of it
        # it retires before running a request, so that the limit never ends it in the middle of one
        retire = limits.cpu_seconds / 2 if retire_cpu_seconds is None else retire_cpu_seconds
        bundle = {"preload": list(preload), "retire_cpu_seconds": retire}
        self.child = Child("", "warm", limits, None, iso, True, bundle)
        ready = self._next(time.monotonic() + START_SECONDS)
        if ready is None or ready[0] != "WARM":
            self.close()
            if ready is None or ready[0] == "ENDED":
                self.child.ending([], False, False)  # raises SandboxError where bwrap or unshare said why
            why = ready[1] if ready is not None and ready[0] == "SETUP" else f"it answered {ready!r}"
            raise SandboxError(f"a warm sandboxed interpreter could not be set up: {why}")

    def _next(self, deadline: float) -> tuple[str, str] | None:
        """The warm process's next line; ``("ENDED", "")`` when it ended, None when it said nothing by ``deadline``."""
        while True:
            if b"\n" in self.buffer:
                line, _, self.buffer = self.buffer.partition(b"\n")
                report = self.child.parse(line)
                if report is not None:
                    return report
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.child.ctrl_out], [], [], left)[0]:
                return None
            chunk = os.read(self.child.ctrl_out, 1 << 20)
            if not chunk:
                return "ENDED", ""
            self.buffer += chunk

    def run(self, program: str) -> RunResult | None:
        """How ``program`` ended, as ``run_program`` would say; None when this interpreter ended before running it
        (retired or dead: a new one should take the program)."""
        if not self.alive:
            return None
        limits = self.limits
        request = repr((program, float(limits.wall_seconds), int(limits.output_bytes))).encode() + b"\n"
        try:
            write_all(self.child.ctrl_in, request, time.monotonic() + GRACE_SECONDS)
        except (OSError, TimeoutError):  # it ended while idle
            self.close()
            return None
        started, taken = time.monotonic(), self._next(time.monotonic() + GRACE_SECONDS)
        if taken is None or taken[0] != "TAKEN":  # it ended (or retired) before taking the program
            self.close()
            return None
        report = self._next(time.monotonic() + limits.wall_seconds + GRACE_SECONDS)
        if report is None or report[0] != "RESULT":  # it hung, or ended while the program ran (the program's doing)
            self.close()
            layers = self.isolation.layers
            if report is None:
                why = f"no exit within {limits.wall_seconds:g} s"
                return RunResult("timeout", "", why, limits.wall_seconds, layers)
            why = "the warm interpreter ended while it ran (memory or CPU limit?)"
            return RunResult("crash", "", why, time.monotonic() - started, layers)
        self.runs += 1
        try:
            rc, out, lines, overflow, timed_out, seconds, retire = ast.literal_eval(report[1])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # pragma: no cover - harness bug
            self.close()
            return RunResult("crash", "", "the warm interpreter sent what is not a result", 0.0)
        if retire:
            self.close()
        reports = [r for r in (self.child.parse(line) for line in lines.splitlines()) if r is not None]
        finished = "DONE" in {kind for kind, _ in reports}
        result = _ending(rc, reports, bytearray(out), overflow, timed_out, finished, limits, seconds)
        return RunResult(result.status, result.stdout, result.detail, result.wall_seconds, self.isolation.layers)

    def close(self) -> None:
        if self.alive:
            self.alive = False
            self.child.close()


class WarmPool:
    """Idle warm interpreters under one set of limits, taken by the threads that run tool calls (a new one starts
    when none is idle, so the pool grows to the number of concurrent callers)."""

    def __init__(self, limits: SandboxLimits, iso: Isolation | None = None, preload: tuple[str, ...] = PRELOAD):
        self.limits, self.isolation, self.preload = limits, iso or isolation(), preload
        self.idle: list[WarmInterpreter] = []
        self.lock = threading.Lock()
        self.started = self.replaced = 0
        # the one thread every interpreter is started from (it lives as long as the pool; see the module docstring)
        self.spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="veriloop-warm-sandbox")

    def run(self, program: str) -> RunResult:
        for _ in range(2):
            interp = self._take()
            result = interp.run(program)
            if interp.alive:
                with self.lock:
                    self.idle.append(interp)
            else:
                with self.lock:
                    self.replaced += 1
            if result is not None:
                return result
        raise SandboxError("two warm sandboxed interpreters in a row ended before running a program")

    def _take(self) -> WarmInterpreter:
        with self.lock:
            if self.idle:
                return self.idle.pop()
            self.started += 1
        return self.spawner.submit(WarmInterpreter, self.limits, self.isolation, self.preload).result()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for interp in idle:
            interp.close()
        self.spawner.shutdown(wait=False)


_POOLS: dict[tuple[int, SandboxLimits], WarmPool] = {}
_POOLS_LOCK = threading.Lock()


def warm_pool(limits: SandboxLimits) -> WarmPool:
    """This process's pool for ``limits`` (a forked process makes its own)."""
    key = (os.getpid(), limits)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = WarmPool(limits)
    return pool


def run_warm(program: str, *, limits: SandboxLimits) -> RunResult:
    """``program`` run once in a warm sandboxed interpreter of this process's pool for ``limits``."""
    return warm_pool(limits).run(program)


@atexit.register
def close_pools() -> None:
    with _POOLS_LOCK:
        pools = [p for (pid, _), p in _POOLS.items() if pid == os.getpid()]
        _POOLS.clear()
    for pool in pools:
        pool.close()
