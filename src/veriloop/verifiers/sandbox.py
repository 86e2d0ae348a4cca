"""Run model-written Python in a separate, limited process, and say exactly how it ended.

Every run is a fresh ``python -I`` process in its own session, with

* resource limits set before the interpreter starts: CPU seconds, address space, file size,
  open files, and (where the kernel honours it for this user) the process count;
* a fresh temporary working directory, removed afterwards;
* a wall-clock limit enforced by the parent (the whole process group is killed);
* a cap on what it may print (the parent stops reading and kills it past the cap);
* an audit hook (PEP 578) installed before the program runs that ends the process at the
  first forbidden act and reports it: reading outside the standard library and its working
  directory (the tests and the grader's files included), writing or deleting outside its
  directory, sockets, new processes (fork, exec, spawn, subprocess), signals, ``ctypes``,
  ``gc`` object walks.

**The verdict is the parent's.**  In ``stdio`` mode the parent feeds the input and compares
what was printed.  In ``assert`` mode an ``assert A == B`` test is split: only ``A`` (the call)
is sent to the child, which reports the value through a strict encoder (built-in types only,
so an object whose ``__eq__`` always says yes is not a value); ``B`` never leaves the parent,
which compares.  Printing "PASS", exiting early with status 0, or patching the assert
machinery therefore passes nothing.  Other asserts (``assert is_prime(7)``) run in the child,
which reports each result tagged with a per-run random token; a program that digs the token
out of the harness's frames could forge those (documented limit; prefer ``==`` tests).

Outcomes: ``pass``, ``fail`` (wrong output or a failed assert), ``timeout``, ``crash``
(an exception, a non-zero exit, memory exhausted, early exit), ``violation`` (a forbidden
act), ``output_limit``.
"""

from __future__ import annotations

import ast
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from veriloop.errors import InputError

OUTCOMES = ("pass", "fail", "timeout", "crash", "violation", "output_limit")


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0  # per run, enforced by the parent
    cpu_seconds: int = 5
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    output_bytes: int = 1 << 20  # stdout + stderr
    file_bytes: int = 16 << 20  # largest file the program may write
    open_files: int = 64

    def __post_init__(self):
        if self.wall_seconds <= 0 or self.cpu_seconds < 1 or self.memory_mb < 64 or self.output_bytes < 1:
            raise InputError(f"bad sandbox limits: {self}")


@dataclass(frozen=True)
class RunResult:
    """How one run ended: ``ok`` (the harness finished) or a failure outcome, before any test is judged."""

    status: str  # ok | timeout | crash | violation | output_limit
    stdout: str = ""
    detail: str = ""
    wall_seconds: float = 0.0
    reports: list = field(default_factory=list)  # (kind, text) from the harness, token-checked


# The child's program.  It runs with -I (no user site, no PYTHONPATH, no cwd on sys.path).
_HARNESS = r"""
import sys, os, builtins
def _main(_read=os.read, _write=os.write, _exit=os._exit, _exec=exec, _eval=eval, _compile=compile,
          _type=type, _isinstance=isinstance, _str=str, _repr=repr, _len=len, _tuple=tuple, _list=list,
          _dict=dict, _set=set, _frozenset=frozenset, _sorted=sorted, _any=any, _float=float):
    ctrl_in, ctrl_out = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        b = _read(ctrl_in, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(ctrl_in)
    import ast
    bundle = ast.literal_eval(b"".join(chunks).decode())
    token, mode, program, tests = bundle["token"], bundle["mode"], bundle["program"], bundle["tests"]
    read_roots, denied = _tuple(bundle["read_roots"]), _tuple(bundle["denied_roots"])
    home = os.path.realpath(os.getcwd())
    realpath, fspath, join, sep = os.path.realpath, os.fspath, os.path.join, os.sep
    def report(kind, text):
        line = token + " " + kind + " " + _str(text).replace(chr(10), " ")[:100000] + chr(10)
        _write(ctrl_out, line.encode())
    def inside(path, roots):
        p = realpath(join(home, fspath(path)))
        return _any(p == r or p.startswith(r + sep) for r in roots)
    def violation(what):
        report("VIOLATION", what)
        _exit(86)
    forbidden_imports = {"ctypes", "_ctypes", "_posixsubprocess", "multiprocessing", "_multiprocessing",
                         "socket", "_socket", "ssl", "_ssl", "pty", "resource", "_xxsubinterpreters"}
    writes = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod", "os.chown",
              "os.truncate", "os.utime", "os.link", "os.symlink", "os.chflags", "os.lchown", "os.mkfifo",
              "os.mknod", "shutil.move", "shutil.copyfile"}
    processes = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
                 "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "os.setsid",
                 "os.setpgid", "os.setuid", "os.setgid"}
    walks = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.addaudithook"}
    def hook(event, args):
        if event == "open":
            path = args[0]
            if path is None or _isinstance(path, int):
                return  # a descriptor the process already holds
            mode = args[1] if _len(args) > 1 and _isinstance(args[1], _str) else "r"
            flags = args[2] if _len(args) > 2 and _isinstance(args[2], int) else 0
            if inside(path, (home,)):
                return
            if _any(c in mode for c in "wax+") or flags & 3:
                violation("write outside the working directory: " + _str(path))
            if inside(path, denied) or not inside(path, read_roots):
                violation("read outside the working directory: " + _str(path))
        elif event in ("os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk"):
            target = args[0] if args and args[0] is not None else "."
            if not _isinstance(target, int) and not inside(target, (home,)) and not (
                    inside(target, read_roots) and not inside(target, denied)):
                violation(event + " outside the working directory: " + _str(target))
        elif event in writes:
            paths = [a for a in args[:2] if _isinstance(a, (_str, bytes))]
            if _any(not inside(a, (home,)) for a in paths):
                violation(event + " outside the working directory: " + _repr(paths))
        elif event in processes or event in walks:
            violation(event)
        elif event.startswith("socket.") or event.startswith("ctypes."):
            violation(event)
        elif event == "import" and args[0].split(".")[0] in forbidden_imports:
            violation("import " + args[0])
    def encode(v, depth=0):
        # built-in values only; anything else (a user class, a function) is not a test value
        t = _type(v)
        if depth > 50:
            raise TypeError("value nested too deeply")
        if v is None or t is bool or t is int or t is _str or t is bytes:
            return v
        if t is _float:
            return ("float", _repr(v))
        if t is _list or t is _tuple:
            return (t.__name__, [encode(x, depth + 1) for x in v])
        if t is _set or t is _frozenset:
            return (t.__name__, _sorted([encode(x, depth + 1) for x in v], key=_repr))
        if t is _dict:
            return ("dict", [(encode(k, depth + 1), encode(x, depth + 1)) for k, x in v.items()])
        raise TypeError("a test value must be a built-in value, got " + _repr(t.__name__))
    try:
        code = _compile(program, "<program>", "exec")
        compiled = [(kind, _compile(src, "<test>", "eval" if kind == "value" else "exec")) for kind, src in tests]
    except SyntaxError as e:
        report("CRASH", "SyntaxError: " + _str(e))
        _exit(0)
    del bundle, chunks, program, tests, b
    sys.addaudithook(hook)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        _exec(code, namespace)
    except SystemExit as e:
        if e.code not in (None, 0):
            report("CRASH", "SystemExit " + _repr(e.code))
            _exit(0)
    except BaseException as e:
        report("CRASH", _type(e).__name__ + ": " + _str(e))
        _exit(0)
    for i, (kind, test) in enumerate(compiled):
        try:
            if kind == "value":
                report("VALUE", _str(i) + " " + _repr(encode(_eval(test, namespace))))
            else:
                _exec(test, namespace)
                report("PASS", i)
        except BaseException as e:
            report("FAIL", _str(i) + " " + _type(e).__name__ + ": " + _str(e))
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    report("DONE", "")
    _exit(0)
_main()
"""


def split_assert_tests(source: str) -> list[tuple[str, str, object]]:
    """Assert-style test code -> ``[(kind, child_source, expected)]``.

    ``assert A == B`` with ``B`` a literal becomes ``("value", A, B)``: the child evaluates ``A``
    and the parent compares with ``B``.  Anything else becomes ``("assert", statement, None)``.
    Non-assert statements (imports, helper definitions) are prepended to every child test.
    """
    tree = ast.parse(source)
    setup = [node for node in tree.body if not isinstance(node, ast.Assert)]
    prefix = "".join(ast.unparse(n) + "\n" for n in setup)
    out = []
    for node in tree.body:
        if not isinstance(node, ast.Assert):
            continue
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and not setup:
            try:
                expected = ast.literal_eval(t.comparators[0])
            except ValueError:
                expected = _NO_LITERAL
            if expected is not _NO_LITERAL:
                out.append(("value", ast.unparse(t.left), expected))
                continue
        out.append(("assert", prefix + ast.unparse(node), None))
    if not out:
        raise ValueError("the test code has no assert statements")
    return out


_NO_LITERAL = object()


def decode_value(encoded):
    """Inverse of the child's strict encoder (from its ``repr``)."""
    if isinstance(encoded, tuple) and len(encoded) == 2 and isinstance(encoded[0], str):
        kind, body = encoded
        if kind == "float":
            return float(body)
        if kind in ("list", "tuple"):
            items = [decode_value(x) for x in body]
            return items if kind == "list" else tuple(items)
        if kind in ("set", "frozenset"):
            items = {decode_value(x) for x in body}
            return items if kind == "set" else frozenset(items)
        if kind == "dict":
            return {decode_value(k): decode_value(v) for k, v in body}
    return encoded


def values_equal(actual, expected) -> bool:
    """Python's ``==`` on built-in values, with container types kept apart (``[1] != (1,)``)."""
    if isinstance(expected, (list, tuple)) or isinstance(actual, (list, tuple)):
        return (type(actual) is type(expected) and len(actual) == len(expected)
                and all(values_equal(a, e) for a, e in zip(actual, expected)))  # fmt: skip
    if isinstance(expected, dict) or isinstance(actual, dict):
        return (isinstance(actual, dict) and isinstance(expected, dict) and actual.keys() == expected.keys()
                and all(values_equal(actual[k], expected[k]) for k in expected))  # fmt: skip
    return actual == expected


def _preexec(limits: SandboxLimits):
    def apply() -> None:
        import resource

        def cap(which, value, hard=None):
            try:
                resource.setrlimit(which, (value, value if hard is None else hard))
            except (ValueError, OSError):
                pass

        # SIGXCPU at the soft limit (reported as a timeout), SIGKILL a second later if ignored
        cap(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1)
        cap(resource.RLIMIT_AS, limits.memory_mb << 20)
        cap(resource.RLIMIT_FSIZE, limits.file_bytes)
        cap(resource.RLIMIT_NOFILE, limits.open_files)
        cap(resource.RLIMIT_CORE, 0)
        if hasattr(resource, "RLIMIT_NPROC") and os.getuid() != 0:  # root is not bound by it
            cap(resource.RLIMIT_NPROC, 64)

    return apply


def _denied_roots() -> list[str]:
    """The grader's own files (the veriloop package), even where they lie under a readable root
    (an installed package in site-packages).  Everything outside the readable roots, other runs'
    temporary directories included, is denied anyway."""
    return [os.path.dirname(os.path.dirname(os.path.realpath(__file__)))]


def _read_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(roots | {"/dev/null", "/dev/urandom", "/dev/zero"})


def run_program(program: str, *, tests: list[tuple[str, str]] | None = None, stdin: str = "",
                limits: SandboxLimits = SandboxLimits()) -> RunResult:  # fmt: skip
    """Run ``program`` once in the sandbox, feeding ``stdin``; then the child ``tests``
    (``[(kind, source)]``, kind ``value`` or ``assert``).  Returns how it ended, what it printed
    and the child's per-test reports in ``reports`` (the caller judges them)."""
    token = secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="veriloop-sandbox-")
    os.chmod(workdir, 0o700)
    bundle = repr({"token": token, "mode": "tests" if tests else "stdio", "program": program,
                   "tests": list(tests or []), "read_roots": _read_roots(),
                   "denied_roots": _denied_roots()}).encode()  # fmt: skip
    ctrl_in_r, ctrl_in_w = os.pipe()
    ctrl_out_r, ctrl_out_w = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _HARNESS, str(ctrl_in_r), str(ctrl_out_w)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=env,
            pass_fds=(ctrl_in_r, ctrl_out_w), start_new_session=True, preexec_fn=_preexec(limits),
        )  # fmt: skip
    except OSError:
        for fd in (ctrl_in_w, ctrl_out_r):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    finally:
        os.close(ctrl_in_r)
        os.close(ctrl_out_w)
    try:
        return _supervise(proc, token, bundle, ctrl_in_w, ctrl_out_r, stdin, limits, started)
    finally:
        _kill_group(proc)
        os.close(ctrl_out_r)
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
        pass


def _supervise(proc, token, bundle, ctrl_in_w, ctrl_out_r, stdin, limits, started) -> RunResult:
    out, printed, control = bytearray(), [0], bytearray()
    overflow = threading.Event()
    lock = threading.Lock()

    def feed():
        try:
            view = memoryview(bundle)
            while view:
                view = view[os.write(ctrl_in_w, view) :]
        except OSError:
            pass
        finally:
            os.close(ctrl_in_w)
        try:
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def drain(stream, keep: bool):
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            with lock:
                printed[0] += len(chunk)
                if keep:
                    out.extend(chunk)
                if printed[0] > limits.output_bytes:
                    overflow.set()
            if overflow.is_set():
                _kill_group(proc)
                return

    def read_control():
        while True:
            chunk = os.read(ctrl_out_r, 65536)
            if not chunk:
                return
            if len(control) < (4 << 20):
                control.extend(chunk)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=read_control, daemon=True),
               threading.Thread(target=drain, args=(proc.stdout, True), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, False), daemon=True)]  # fmt: skip
    for t in threads:
        t.start()
    try:
        proc.wait(timeout=limits.wall_seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    for t in threads:
        t.join(timeout=2)
    return _ending(proc, token, out, control, overflow, timed_out, limits, time.monotonic() - started)


def _ending(proc, token, out, control, overflow, timed_out, limits, wall) -> RunResult:
    """How the run ended: what the harness reported on the control pipe (the first report of each
    kind), the limits it hit, and the exit status."""
    stdout = bytes(out[: limits.output_bytes]).decode("utf-8", errors="replace")
    reports = [ln[len(token) + 1 :].split(" ", 1) for ln in control.decode("utf-8", errors="replace").splitlines()
               if ln.startswith(token + " ")]  # fmt: skip
    reports = [(r[0], r[1] if len(r) > 1 else "") for r in reports]
    first = {kind: text for kind, text in reversed(reports)}
    if "VIOLATION" in first:
        return RunResult("violation", stdout, first["VIOLATION"], wall, reports)
    if overflow.is_set():
        return RunResult("output_limit", stdout, f"printed over {limits.output_bytes} bytes", wall, reports)
    if timed_out:
        return RunResult("timeout", stdout, f"no exit within {limits.wall_seconds:g} s", wall, reports)
    if "CRASH" in first:
        return RunResult("crash", stdout, first["CRASH"], wall, reports)
    rc = proc.returncode
    if rc == -signal.SIGXCPU:
        return RunResult("timeout", stdout, f"CPU time limit ({limits.cpu_seconds} s) reached", wall, reports)
    if "DONE" not in first or rc != 0:
        if rc is not None and rc < 0:
            why = f"killed by signal {signal.Signals(-rc).name}"
            if -rc in (signal.SIGKILL, signal.SIGSEGV):
                why += " (memory or CPU limit?)"
        else:
            why = f"exited with status {rc} before the harness finished"
        return RunResult("crash", stdout, why, wall, reports)
    return RunResult("ok", stdout, "", wall, reports)
