"""The supervisor of one sandboxed process (``Child``): it starts the harness (``harness.py``) with the run's limits,
in its namespaces (``namespaces.py``) and cgroups where this machine has them, drains its output under a cap, talks
to it on the control pipes, enforces the wall-clock limit, kills its process group and removes its directory and
cgroups; and says how the run ended (``RunResult``).  ``run_under`` is one run of a program under a given
``Isolation``; ``run.run_program`` runs one under this machine's, ``grader.run_tests`` judges assert-style tests.
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

from veriloop.sandbox.harness import HARNESS
from veriloop.sandbox.layers import CGROUP_REAPER, Isolation, SandboxError, denied_roots, read_roots, read_text
from veriloop.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from veriloop.sandbox.namespaces import launcher
from veriloop.sandbox.process import kill_group, preexec, remove_tree, run_cgroups, wait_exit, write_all

OUTCOMES = ("pass", "fail", "timeout", "crash", "violation", "output_limit")


@dataclass(frozen=True)
class RunResult:
    """How one run ended: ``ok`` (the harness finished) or a failure outcome, before any test is judged."""

    status: str  # ok | timeout | crash | violation | output_limit
    stdout: str = ""
    detail: str = ""
    wall_seconds: float = 0.0
    layers: str = ""  # the isolation it ran under (``Isolation.layers``)


class SessionOver(BaseException):  # noqa: N818 - not an error of a test: the run ended (test code cannot catch it)
    """The program stopped answering (it ended, timed out, broke a rule or sent what is not a value)."""


def run_under(
    iso: Isolation, program: str, *, stdin: str = "", limits: SandboxLimits = DEFAULT_LIMITS, audit_hook: bool = True
) -> RunResult:
    """Run ``program`` once in the sandbox under ``iso``, feeding ``stdin``.  Returns how it ended and what it printed
    (the caller judges the output).  ``audit_hook=False`` leaves the process layer's hook out (tests of the kernel
    layer only)."""
    child = Child(program, "run", limits, stdin, iso, audit_hook)
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


_LAUNCHER_ERROR = 2000  # bytes of the process's stderr kept: what bwrap or unshare said when it could not start
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


class Child:
    """One sandboxed process: started with its limits (in its namespaces and pids cgroup where the machine has
    them), its output drained under a cap, talked to on the control pipes, killed with its process group, its
    directory (and cgroup) removed."""

    def __init__(
        self,
        program: str,
        mode: str,
        limits: SandboxLimits,
        stdin: str | None,
        iso: Isolation,
        audit_hook: bool = True,
        extra: dict | None = None,
    ):
        self.limits, self.token, self.isolation = limits, secrets.token_hex(16), iso
        seccomp = iso.seccomp_spec()  # before anything is made: an error here leaves nothing behind
        argv, bundle = self._make_run(program, mode, audit_hook)
        bundle.update(extra or {})  # what a mode reads besides (a warm interpreter's preload and CPU limit)
        if seccomp:
            bundle["seccomp"] = seccomp
        self.cgroup, self.memory = run_cgroups(iso, limits, self.token[:16])
        self._spawn(argv)
        self.out, self.err, self.printed, self.lock = bytearray(), bytearray(), 0, threading.Lock()
        self.overflow, self.closed_in = threading.Event(), False
        self.buffer, self.reports, self.over, self.read = b"", [], "", 0
        bundle = repr(bundle).encode() + b"\n"
        self.threads = [
            threading.Thread(target=self._feed, args=(bundle, stdin, mode in ("serve", "warm")), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stdout, self.out, None), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self.err, _LAUNCHER_ERROR), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _make_run(self, program: str, mode: str, audit_hook: bool) -> tuple[list[str], dict]:
        """The run's directory (and, in namespaces, its view's mount point), the command that starts the harness,
        and the bundle the harness reads first."""
        self.base = tempfile.mkdtemp(prefix="veriloop-sandbox-")
        os.chmod(self.base, 0o700)
        self.workdir = os.path.join(os.path.realpath(self.base), "work")
        os.mkdir(self.workdir, 0o700)
        bundle = {
            "token": self.token,
            "mode": mode,
            "program": program,
            "read_roots": read_roots(),
            "denied_roots": denied_roots(),
            "hook": audit_hook,
        }
        argv = [sys.executable, "-I", "-c", HARNESS]
        if self.isolation.namespaces:
            command, bundle["view"] = launcher(self.isolation, self.base, self.workdir, self.limits)
            argv = [*command, *argv]
        return argv, bundle

    def _spawn(self, argv: list[str]) -> None:
        """Start the process with its control pipes (its descriptors 3 and 4 by number in ``argv``)."""
        ctrl_in_r, self.ctrl_in = os.pipe()
        self.ctrl_out, ctrl_out_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        self.started = time.monotonic()
        self.deadline = self.started + self.limits.wall_seconds
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
                preexec_fn=preexec(self.limits, self.cgroup, self.memory),
            )
        except (OSError, subprocess.SubprocessError):  # SubprocessError: the preexec_fn (rlimits, cgroup) failed
            for fd in (self.ctrl_in, self.ctrl_out):
                os.close(fd)
            self._remove()
            raise
        finally:
            os.close(ctrl_in_r)
            os.close(ctrl_out_w)

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

    def _drain(self, stream, kept: bytearray, keep: int | None) -> None:
        """Read ``stream`` to its end, counting it against the output limit; ``kept`` gets all of it (``keep``
        None) or its first ``keep`` bytes."""
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            with self.lock:
                self.printed += len(chunk)
                kept.extend(chunk if keep is None else chunk[: max(keep - len(kept), 0)])
                if self.printed > self.limits.output_bytes:
                    self.overflow.set()
            if self.overflow.is_set():
                kill_group(self.proc)
                return

    def wait(self, seconds: float) -> bool:
        if wait_exit(self.proc, seconds):
            return True
        kill_group(self.proc)
        return False

    def join_threads(self) -> None:
        for t in self.threads:
            t.join(timeout=2)

    def close(self) -> None:
        kill_group(self.proc)
        self._close_in()
        os.close(self.ctrl_out)
        self._remove()

    def _remove(self) -> None:
        remove_tree(self.base)
        for group in (self.cgroup, self.memory):
            if not group:
                continue
            for pid in read_text(os.path.join(group, "cgroup.procs")).split():
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
        if self.isolation.namespaces and not reports and not timed_out:
            self._launcher_failed()
        if self.isolation.namespaces and rc is not None and rc > 128:  # the run's signal, through its first process
            rc = -(rc - 128)
        result = _ending(
            rc,
            reports,
            self.out,
            self.overflow.is_set(),
            timed_out,
            finished,
            self.limits,
            time.monotonic() - self.started,
        )
        return dataclasses.replace(result, layers=self.isolation.layers)

    def _launcher_failed(self) -> None:
        """No line of the harness at all: where bwrap or unshare said why it could not start it, the sandbox could
        not be set up (an error, never a verdict: the program never ran, so nothing it printed is here)."""
        said = bytes(self.err).decode("utf-8", errors="replace").strip()
        if said.startswith("bwrap: " if self.isolation.bwrap else "unshare: "):
            raise SandboxError(f"the sandbox could not be set up: {' '.join(said.split())}")

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
        """Send one request; the harness's answer ``(kind, text)``.  Raises ``SessionOver`` when the run is over."""
        if self.over:
            raise SessionOver(self.over)
        self.read = 0
        try:
            write_all(self.ctrl_in, repr((op, target, payload)).encode() + b"\n", self.deadline)
        except (OSError, TimeoutError) as e:
            self.over = "timeout" if isinstance(e, TimeoutError) else "ended"
            raise SessionOver(self.over) from None
        report = self._next_report()
        if report is None:
            raise SessionOver(self.over)
        return report

    def protocol_error(self, why: str = "protocol"):
        """The program sent what is not an answer (or one too large): the run is over."""
        self.over = why
        raise SessionOver(self.over)

    def end_session(self) -> RunResult:
        finished = not self.over and ("READY", "") in self.reports
        if not self.over:
            try:
                write_all(self.ctrl_in, repr(("end", None, None)).encode() + b"\n", self.deadline)
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
    if overflow:
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
