"""Run model-written Python in a separate, limited process, and say exactly how it ended.

Every run is a fresh ``python -I`` process in its own session, with

* resource limits set before the interpreter starts: CPU seconds, address space, file size,
  open files, and (where the kernel honours it for this user) the process count;
* a fresh working directory (in the namespaces a size-limited tmpfs of its own), removed afterwards;
* a wall-clock limit enforced by the parent (the whole process group is killed);
* a cap on what it may print (the parent stops reading and kills it past the cap);
* an audit hook (PEP 578) installed before the program runs that ends the process at the
  first forbidden act and reports it: reading outside the standard library and its working
  directory (the tests and the grader's files included), writing or deleting outside its
  directory, sockets, new processes (fork, exec, spawn, subprocess), signals, ``ctypes``,
  ``gc`` object walks.

**The verdict is the grader's; the program only answers.**  In ``stdio`` mode the parent feeds the
input and compares what was printed.  With assert-style tests (``run_tests``) the test code never
enters the sandbox: it runs in the grader, where each name the program defined is a proxy; a call,
attribute, iteration, ``len``, ``[]``, ``in`` or truth test on it is one request to the sandboxed
process, which answers with a strictly encoded built-in value (exact built-in types, so an object whose
``__eq__`` always says yes is not a value), a handle to any other object (equal only to itself), or the
exception raised.  Every ``assert`` and comparison is evaluated by the grader, so walking the frames to
the harness, writing fake result lines to any descriptor, exiting early, patching builtins or installing
signal handlers in the program's process decides nothing (``tests/forgers.py``).  A program's name that
shadows a built-in (``abs``) is not the tests' ``abs``, and a standard-library module it imported is the
grader's own import of it.

Outcomes: ``pass``, ``fail`` (wrong output or a failed assert), ``timeout``, ``crash``
(an exception, a non-zero exit, memory exhausted, early exit), ``violation`` (a forbidden
act), ``output_limit``.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from veriloop.errors import InputError
from veriloop.verifiers.sandbox_harness import HARNESS
from veriloop.verifiers.sandbox_isolation import (  # noqa: F401 - Isolation, isolation, SandboxError, _probe_isolation: this module's API too
    _NAMESPACES,
    _PIVOT_ROOT,
    CGROUP_REAPER,
    USER_NAMESPACE_LIMITS,
    Isolation,
    SandboxError,
    _denied_roots,
    _probe_isolation,
    _read_roots,
    _read_text,
    _view_paths,
    isolation,
)
from veriloop.verifiers.sandbox_process import (  # noqa: F401 - remove_tree, _wait_exit: this module's API too
    _kill_group,
    _preexec,
    _run_cgroups,
    _wait_exit,
    _write_all,
    remove_tree,
)

OUTCOMES = ("pass", "fail", "timeout", "crash", "violation", "output_limit")


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0  # per run, enforced by the parent
    cpu_seconds: int = 5
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    output_bytes: int = 1 << 20  # stdout + stderr
    file_bytes: int = 16 << 20  # largest file the program may write
    open_files: int = 64  # per process (RLIMIT_NOFILE); a run has at most PIDS_MAX processes
    disk_bytes: int = 64 << 20  # all the run writes (its directory is a tmpfs of this size, in namespaces)
    disk_files: int = 4096  # files and directories in it (the tmpfs's inodes)

    def __post_init__(self):
        if (
            self.wall_seconds <= 0
            or self.cpu_seconds < 1
            or self.memory_mb < 64
            or self.output_bytes < 1
            or self.disk_bytes < 1 << 20
            or self.disk_files < 16
        ):
            raise InputError(f"bad sandbox limits: {self}")


@dataclass(frozen=True)
class RunResult:
    """How one run ended: ``ok`` (the harness finished) or a failure outcome, before any test is judged."""

    status: str  # ok | timeout | crash | violation | output_limit
    stdout: str = ""
    detail: str = ""
    wall_seconds: float = 0.0
    layers: str = ""  # the isolation it ran under (``Isolation.layers``)


class _SessionOver(BaseException):  # noqa: N818 - not an error of a test: the run ended (test code cannot catch it)
    """The program stopped answering (it ended, timed out, broke a rule or sent what is not a value)."""


def run_program(
    program: str,
    *,
    stdin: str = "",
    limits: SandboxLimits = SandboxLimits(),
    isolation_: Isolation | None = None,
    audit_hook: bool = True,
) -> RunResult:
    """Run ``program`` once in the sandbox, feeding ``stdin``.  Returns how it ended and what it printed
    (the caller judges the output).  ``audit_hook=False`` leaves the process layer's hook out (tests of the
    kernel layer only)."""
    child = _Child(program, "run", limits, stdin, isolation_, audit_hook)
    try:
        control = bytearray()

        def read_control():
            while True:
                chunk = os.read(child.ctrl_out, 65536)
                if not chunk:
                    return
                if len(control) < (4 << 20):
                    control.extend(chunk)

        reader = threading.Thread(target=read_control, daemon=True)
        reader.start()
        timed_out = not child.wait(limits.wall_seconds)
        child.join_threads()
        reader.join(timeout=2)
        reports = [r for r in (child.parse(line) for line in control.splitlines()) if r is not None]
        return child.ending(reports, timed_out, finished="DONE" in {k for k, _ in reports})
    finally:
        child.close()


_MAX_REPLY = 1 << 20  # bytes of one answer from the sandbox
_MAX_VALUES = 100_000  # values in one answer: parsing costs the grader about 1 KB a value
_MAX_READ = 4 * _MAX_REPLY  # bytes the grader reads for one request, lines of the program's included (a flood)


def parse_answer(text: str):
    """One answer of the harness, parsed as a literal: refused (``OverflowError``) past ``_MAX_VALUES`` values, so
    a program's ``[0] * 1300000`` costs the grader no gigabyte (``ast.literal_eval`` builds a node per value)."""
    if text.count(",") > _MAX_VALUES:
        raise OverflowError(f"an answer of over {_MAX_VALUES} values")
    return ast.literal_eval(text)


# ---------------------------------------------------------------- one sandboxed process


class _Child:
    """One sandboxed process: started with its limits (in its namespaces and pids cgroup where the machine has
    them), its output drained under a cap, talked to on the control pipes, killed with its process group, its
    directory (and cgroup) removed."""

    def __init__(
        self,
        program: str,
        mode: str,
        limits: SandboxLimits,
        stdin: str | None,
        isolation_: Isolation | None = None,
        audit_hook: bool = True,
    ):
        self.limits, self.token = limits, secrets.token_hex(16)
        self.isolation = iso = isolation_ or isolation()
        seccomp = iso.seccomp_spec()  # before anything is made: an error here leaves nothing behind
        self.base = tempfile.mkdtemp(prefix="veriloop-sandbox-")
        os.chmod(self.base, 0o700)
        self.workdir = os.path.join(os.path.realpath(self.base), "work")
        os.mkdir(self.workdir, 0o700)
        bundle = {
            "token": self.token,
            "mode": mode,
            "program": program,
            "read_roots": _read_roots(),
            "denied_roots": _denied_roots(),
            "hook": audit_hook,
        }
        argv = [sys.executable, "-I", "-c", HARNESS]
        if iso.namespaces:
            os.mkdir(os.path.join(self.base, "root"), 0o700)
            bundle["view"] = {
                "root": os.path.join(os.path.realpath(self.base), "root"),
                "work": self.workdir,
                "read_only": _view_paths(),
                "pivot_root": _PIVOT_ROOT[os.uname().machine],
                "scratch": f"size={limits.disk_bytes},nr_inodes={limits.disk_files},mode=700",
                "user_limits": USER_NAMESPACE_LIMITS,
            }
            argv = ["unshare", *_NAMESPACES, *argv]
        if seccomp:
            bundle["seccomp"] = seccomp
        self.cgroup, self.memory = _run_cgroups(iso, limits, self.token[:16])
        ctrl_in_r, self.ctrl_in = os.pipe()
        self.ctrl_out, ctrl_out_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        self.started = time.monotonic()
        self.deadline = self.started + limits.wall_seconds
        try:
            self.proc = subprocess.Popen(
                [*argv, str(ctrl_in_r), str(ctrl_out_w)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=env,
                pass_fds=(ctrl_in_r, ctrl_out_w),
                start_new_session=True,
                preexec_fn=_preexec(limits, self.cgroup, self.memory),
            )
        except (OSError, subprocess.SubprocessError):  # SubprocessError: the preexec_fn (rlimits, cgroup) failed
            for fd in (self.ctrl_in, self.ctrl_out):
                os.close(fd)
            self._remove()
            raise
        finally:
            os.close(ctrl_in_r)
            os.close(ctrl_out_w)
        bundle = repr(bundle).encode() + b"\n"
        self.out, self.printed, self.lock = bytearray(), 0, threading.Lock()
        self.overflow, self.closed_in = threading.Event(), False
        self.buffer, self.reports, self.over, self.read = b"", [], "", 0
        keep_in = mode == "serve"
        self.threads = [
            threading.Thread(target=self._feed, args=(bundle, stdin, keep_in), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, False), daemon=True),
        ]
        for t in self.threads:
            t.start()

    # -- supervision
    def _feed(self, bundle: bytes, stdin: str | None, keep_in: bool) -> None:
        try:
            view = memoryview(bundle)
            while view:
                view = view[os.write(self.ctrl_in, view) :]
        except OSError:
            pass
        finally:
            if not keep_in:
                self._close_in()
        try:
            self.proc.stdin.write((stdin or "").encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def _close_in(self) -> None:
        with self.lock:
            if not self.closed_in:
                self.closed_in = True
                os.close(self.ctrl_in)

    def _drain(self, stream, keep: bool) -> None:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            with self.lock:
                self.printed += len(chunk)
                if keep:
                    self.out.extend(chunk)
                if self.printed > self.limits.output_bytes:
                    self.overflow.set()
            if self.overflow.is_set():
                _kill_group(self.proc)
                return

    def wait(self, seconds: float) -> bool:
        if _wait_exit(self.proc, seconds):
            return True
        _kill_group(self.proc)
        return False

    def join_threads(self) -> None:
        for t in self.threads:
            t.join(timeout=2)

    def close(self) -> None:
        _kill_group(self.proc)
        self._close_in()
        os.close(self.ctrl_out)
        self._remove()

    def _remove(self) -> None:
        remove_tree(self.base)
        for group in (self.cgroup, self.memory):
            if not group:
                continue
            for pid in _read_text(os.path.join(group, "cgroup.procs")).split():
                try:  # anything still in it (a process that left the killed group) goes with the run
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass
            CGROUP_REAPER.remove(group)

    def parse(self, line: bytes):
        """``(kind, text)`` of a line of the harness (it carries this run's token), else None."""
        text = line.decode("utf-8", errors="replace")
        if not text.startswith(self.token + " "):
            return None
        kind, _, rest = text[len(self.token) + 1 :].partition(" ")
        return kind, rest

    def ending(self, reports, timed_out: bool, finished: bool) -> RunResult:
        rc = self.proc.returncode
        if self.isolation.namespaces and rc is not None and rc > 128:  # the run's signal, through its first process
            rc = -(rc - 128)
        result = _ending(
            rc, reports, self.out, self.overflow, timed_out, finished, self.limits, time.monotonic() - self.started
        )
        return dataclasses.replace(result, layers=self.isolation.layers)

    # -- the session of an assert-style run
    def _next_report(self):
        """The harness's next line, or None when the run is over (the reason in ``self.over``)."""
        while True:
            if b"\n" in self.buffer:
                line, _, self.buffer = self.buffer.partition(b"\n")
                report = self.parse(line)
                if report is None:
                    continue  # not the harness's: nothing the program writes here is read as an answer
                if report[0] == "STARTED":
                    self.reports.append(report)
                    continue
                if report[0] in ("VIOLATION", "CRASH", "SETUP"):
                    self.reports.append(report)
                    self.over = report[0].lower()
                    return None
                return report
            if len(self.buffer) > _MAX_REPLY:
                self.over = f"an answer over {_MAX_REPLY} bytes"
                return None
            if self.read > _MAX_READ:  # lines that are not the harness's, one after another
                self.over = f"an answer over {_MAX_REPLY} bytes (the program flooded the control pipe)"
                return None
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.over = "timeout"
                return None
            ready, _, _ = select.select([self.ctrl_out], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.ctrl_out, 65536)
            if not chunk:
                self.over = "ended"
                return None
            self.buffer += chunk
            self.read += len(chunk)

    def start_session(self):
        """The program's names (``[(name, ("value", v) | ("object", type name))]``), or None when it did not get
        that far (it crashed, broke a rule, timed out)."""
        report = self._next_report()
        if report is None:
            return None
        if report[0] != "READY":
            self.over = "protocol"
            return None
        self.reports.append(("READY", ""))
        try:
            return [(str(n), (str(k), body)) for n, (k, body) in parse_answer(report[1])]
        except OverflowError as e:
            self.over = str(e)
            return None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            self.over = "protocol"
            return None

    def exchange(self, op: str, target, payload) -> tuple[str, str]:
        """Send one request; the harness's answer ``(kind, text)``.  Raises ``_SessionOver`` when the run is over."""
        if self.over:
            raise _SessionOver(self.over)
        self.read = 0
        try:
            _write_all(self.ctrl_in, repr((op, target, payload)).encode() + b"\n", self.deadline)
        except (OSError, TimeoutError) as e:
            self.over = "timeout" if isinstance(e, TimeoutError) else "ended"
            raise _SessionOver(self.over) from None
        report = self._next_report()
        if report is None:
            raise _SessionOver(self.over)
        return report

    def protocol_error(self, why: str = "protocol"):
        """The program sent what is not an answer (or one too large): the run is over."""
        self.over = why
        raise _SessionOver(self.over)

    def end_session(self) -> RunResult:
        finished = not self.over and ("READY", "") in self.reports
        if not self.over:
            try:
                _write_all(self.ctrl_in, repr(("end", None, None)).encode() + b"\n", self.deadline)
            except (OSError, TimeoutError):
                pass
        self._close_in()
        broke = self.over == "protocol" or self.over.startswith("an answer")  # its verdict, whatever it does next
        timed_out = self.over == "timeout" or not self.wait(min(1.0, max(self.deadline - time.monotonic(), 0.0)))
        if finished or broke:
            timed_out = False  # every test was judged; a program that lingers after "end" is killed, not failed
        self.join_threads()
        result = self.ending(self.reports, timed_out, finished)
        if broke and result.status in ("crash", "ok"):
            detail = "the program sent what is not an answer" if self.over == "protocol" else self.over
            return RunResult("crash", result.stdout, detail, result.wall_seconds, result.layers)
        return result


def _signal_name(number: int) -> str:
    """A signal's name; the program's own exit status is never trusted to be one (``os._exit(160)`` through the
    namespace's first process reads as "signal 32", which has no name)."""
    try:
        return f"signal {signal.Signals(number).name}"
    except ValueError:
        return f"signal {number} (or exit status {number + 128})"


def _ending(rc, reports, out, overflow, timed_out, finished, limits, wall) -> RunResult:
    """How the run ended: what the harness reported (the first report of each kind), the limits it hit,
    and the exit status."""
    stdout = bytes(out[: limits.output_bytes]).decode("utf-8", errors="replace")
    first = {kind: text for kind, text in reversed(reports)}
    kinds = [kind for kind, _ in reports]
    if "SETUP" in first and "STARTED" in kinds[: kinds.index("SETUP")]:  # the program wrote it: its verdict
        return RunResult("crash", stdout, "protocol: the program forged a control line (setup report)", wall)
    if "SETUP" in first:
        raise SandboxError(f"the sandbox could not be set up: {first['SETUP']}")
    if "VIOLATION" in first:
        return RunResult("violation", stdout, first["VIOLATION"], wall)
    if overflow.is_set():
        return RunResult("output_limit", stdout, f"printed over {limits.output_bytes} bytes", wall)
    if timed_out:
        return RunResult("timeout", stdout, f"no exit within {limits.wall_seconds:g} s", wall)
    if "CRASH" in first:
        return RunResult("crash", stdout, first["CRASH"], wall)
    if rc == -signal.SIGXCPU:
        return RunResult("timeout", stdout, f"CPU time limit ({limits.cpu_seconds} s) reached", wall)
    if not finished or (rc is not None and rc != 0):
        if rc is not None and rc < 0:
            why = f"killed by {_signal_name(-rc)}"
            if -rc in (signal.SIGKILL, signal.SIGSEGV):
                why += " (memory or CPU limit?)"
        else:
            why = f"exited with status {rc} before the harness finished"
        return RunResult("crash", stdout, why, wall)
    return RunResult("ok", stdout, "", wall)
