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
import atexit
import builtins
import dataclasses
import importlib
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

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
    layers: str = ""  # the isolation it ran under (``Isolation.layers``)


# The child's program.  It runs with -I (no user site, no PYTHONPATH, no cwd on sys.path).  One line in on the
# control pipe (the bundle), then: run the program; in "run" mode report how it ended; in "serve" mode report the
# program's names and answer the grader's requests (calls in, strictly encoded built-in values or exceptions out)
# until the grader ends.  Nothing the child sends is a verdict: the grader evaluates every test itself.
_HARNESS = r"""
import sys, os, builtins
def _enter_view(view):
    # A fresh tmpfs becomes "/": the interpreter's own directories and a few device files bound read-only at their
    # own paths, the run's directory read-write, nothing else (no /proc, /tmp, /home, the grader's files, other
    # runs).  pivot_root and detaching the old root leave no path back to it.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
    def mount(src, target, fs, flags, data=None):
        enc = lambda x: None if x is None else x.encode()
        if libc.mount(enc(src), enc(target), enc(fs), flags, enc(data)) != 0:
            raise OSError(ctypes.get_errno(), "mount " + target + ": " + os.strerror(ctypes.get_errno()))
    root, work = view["root"], view["work"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
    for path in view["read_only"]:
        target = root + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        mount(path, target, None, MS_BIND | MS_REC)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + work, exist_ok=True)
    mount(work, root + work, None, MS_BIND)
    mount(None, root + work, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    os.mkdir(root + "/.old")
    if libc.syscall(view["pivot_root"], root.encode(), (root + "/.old").encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root: " + os.strerror(ctypes.get_errno()))
    os.chdir("/")
    if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH
        raise OSError(ctypes.get_errno(), "umount old root: " + os.strerror(ctypes.get_errno()))
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(work)
    # Root of its namespace, the run keeps no capability: no mount, chroot, raw socket or namespace of its own.
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last capability)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: empty (two 32-bit words each)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset: " + os.strerror(ctypes.get_errno()))
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]  # an import of a cached module raises no audit event: make the program's import a new one
def _main(_read=os.read, _write=os.write, _exit=os._exit, _exec=exec, _compile=compile, _type=type,
          _isinstance=isinstance, _str=str, _repr=repr, _len=len, _tuple=tuple, _list=list, _dict=dict, _set=set,
          _frozenset=frozenset, _sorted=sorted, _any=any, _float=float, _getattr=getattr, _iter=iter, _next=next,
          _bool=bool, _BaseException=BaseException, _StopIteration=StopIteration, _bytes=bytes, _int=int):
    ctrl_in, ctrl_out = int(sys.argv[1]), int(sys.argv[2])
    pending = [b""]
    def readline():
        while b"\n" not in pending[0]:
            b = _read(ctrl_in, 1 << 16)
            if not b:
                line, pending[0] = pending[0], b""
                return line
            pending[0] += b
        line, _, pending[0] = pending[0].partition(b"\n")
        return line
    import ast
    literal = ast.literal_eval
    bundle = literal(readline().decode())
    token, mode, program = bundle["token"], bundle["mode"], bundle["program"]
    read_roots, denied = _tuple(bundle["read_roots"]), _tuple(bundle["denied_roots"])
    realpath, fspath, join, sep = os.path.realpath, os.fspath, os.path.join, os.sep
    def report(kind, text):
        line = token + " " + kind + " " + _str(text).replace(chr(10), " ") + chr(10)
        data = line.encode()
        while data:
            data = data[_write(ctrl_out, data):]
    def inside(path, roots):
        p = realpath(join(home, fspath(path)))
        return _any(p == r or p.startswith(r + sep) for r in roots)
    view = bundle.get("view")
    if view:  # kernel layer: in new user/mount/pid/net/ipc/uts namespaces, make the file system this run's view
        try:
            _enter_view(view)
        except BaseException as e:
            report("SETUP", _type(e).__name__ + ": " + _str(e))
            _exit(0)
        # The namespace's first process ignores signals it has no handler for (SIGXCPU at the CPU limit among
        # them): it only waits, and the run is its child, which ends as any process does.
        pid = os.fork()
        if pid:
            os.close(ctrl_in)
            os.close(ctrl_out)
            status = os.waitpid(pid, 0)[1]
            _exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    home = realpath(os.getcwd())  # after the view: the run directory at its own path
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
    handles = []  # objects that are not values, named to the grader by their index
    def encode(v, depth=0):
        # built-in values only (exact types: a subclass of int may carry any __eq__); anything else is a handle
        t = _type(v)
        if depth > 50:
            raise TypeError("value nested too deeply")
        if v is None or t is _bool or t is _int or t is _str or t is _bytes:
            return v
        if t is _float:
            return ("float", _repr(v))
        if t is _list or t is _tuple:
            return (t.__name__, [encode(x, depth + 1) for x in v])
        if t is _set or t is _frozenset:
            return (t.__name__, _sorted([encode(x, depth + 1) for x in v], key=_repr))
        if t is _dict:
            return ("dict", [(encode(k, depth + 1), encode(x, depth + 1)) for k, x in v.items()])
        raise TypeError("not a built-in value")
    def decode(x):
        if _type(x) is _tuple and _len(x) == 2 and _type(x[0]) is _str:
            kind, body = x
            if kind == "float":
                return _float(body)
            if kind == "list":
                return [decode(e) for e in body]
            if kind == "tuple":
                return _tuple(decode(e) for e in body)
            if kind == "set":
                return {decode(e) for e in body}
            if kind == "frozenset":
                return _frozenset(decode(e) for e in body)
            if kind == "dict":
                return {decode(k): decode(v) for k, v in body}
            if kind == "ref":
                return resolve(body)
        return x
    def resolve(target):
        kind, key = target
        return namespace[key] if kind == "name" else handles[key]
    def answer(v):
        try:
            report("VALUE", _repr(encode(v)))
        except (TypeError, ValueError):
            handles.append(v)
            report("HANDLE", _repr((_len(handles) - 1, _str(_type(v).__name__))))
    try:
        code = _compile(program, "<program>", "exec")
    except SyntaxError as e:
        report("CRASH", "SyntaxError: " + _str(e))
        _exit(0)
    hook_on = bundle.get("hook", True)
    del bundle, program
    if hook_on:
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
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    if mode == "run":
        report("DONE", "")
        _exit(0)
    names = []
    for name, v in _list(namespace.items()):
        if name.startswith("__"):
            continue
        if _type(v) is _type(sys):
            names.append((name, ("module", _str(v.__name__))))
            continue
        try:
            names.append((name, ("value", encode(v))))
        except (TypeError, ValueError):
            names.append((name, ("object", _str(_type(v).__name__))))
    report("READY", _repr(names))
    while True:
        line = readline()
        if not line:
            break
        op, target, payload = literal(line.decode())
        if op == "end":
            break
        try:
            obj = resolve(target)
            if op == "call":
                result = obj(*decode(payload[0]), **decode(payload[1]))
            elif op == "getattr":
                result = _getattr(obj, payload)
            elif op == "iter":
                result = _iter(obj)
            elif op == "next":
                try:
                    result = _next(obj)
                except _StopIteration:
                    report("STOP", "")
                    continue
            elif op == "len":
                result = _len(obj)
            elif op == "getitem":
                result = obj[decode(payload)]
            elif op == "contains":
                result = decode(payload) in obj
            elif op == "bool":
                result = _bool(obj)
            else:
                raise TypeError("unknown request " + _repr(op))
            answer(result)
        except _BaseException as e:
            try:
                why = _str(e)[:2000]
            except _BaseException:
                why = ""
            report("RAISE", _repr((_str(_type(e).__name__), why)))
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    _exit(0)
_main()
"""


def _preexec(limits: SandboxLimits, cgroup: str = ""):
    def apply() -> None:
        import resource

        if cgroup:  # this process (and everything it starts) joins the run's pids cgroup before the exec
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
                fh.write("0")

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


# ---------------------------------------------------------------- isolation layers

_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers
_NAMESPACES = ["--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]


@dataclass(frozen=True)
class Isolation:
    """The layers every run gets on this machine, strongest first; ``why`` says why a stronger one is missing."""

    namespaces: bool  # user, mount, pid, net, ipc, uts namespaces and a read-only view of the file system
    pids_cgroup: str  # the cgroup directory under which each run gets its own pids.max, or ""
    why: str = ""

    @property
    def layers(self) -> str:
        parts = (["namespaces"] if self.namespaces else []) + (["pids-cgroup"] if self.pids_cgroup else [])
        return "+".join(parts + ["rlimits", "audit-hook"])

    def describe(self) -> str:
        kernel = ("user, mount, pid, net, ipc and uts namespaces; a read-only view of the interpreter's files and "
                  "the run's own directory, nothing else; no network device; no capabilities") if self.namespaces else (
                  "no kernel boundary")  # fmt: skip
        pids = f"; at most {PIDS_MAX} processes and threads (pids cgroup)" if self.pids_cgroup else ""
        return (f"sandbox layers: {self.layers}: {kernel}{pids}; resource limits; the audit hook"
                + (f" ({self.why})" if self.why else ""))  # fmt: skip


PIDS_MAX = 64
_ISOLATION: Isolation | None = None
_ISOLATION_LOCK = threading.Lock()


def isolation() -> Isolation:
    """The strongest isolation this machine allows, probed once per process.  ``VERILOOP_SANDBOX=process`` keeps
    the process layers only; ``namespaces`` requires the kernel layer (an error where it cannot be had)."""
    global _ISOLATION
    with _ISOLATION_LOCK:
        if _ISOLATION is None:
            _ISOLATION = _probe_isolation(os.environ.get("VERILOOP_SANDBOX", "auto"))
        return _ISOLATION


def _probe_isolation(mode: str) -> Isolation:
    if mode not in ("auto", "process", "namespaces"):
        raise InputError(f"VERILOOP_SANDBOX must be auto, process or namespaces, got {mode!r}")
    if mode == "process":
        return Isolation(False, "", "VERILOOP_SANDBOX=process")
    cgroup = _pids_cgroup_root()
    why = ""
    if not sys.platform.startswith("linux") or os.uname().machine not in _PIVOT_ROOT:
        why = f"no namespaces on {sys.platform}/{os.uname().machine}"
    elif shutil.which("unshare") is None:
        why = "no unshare command (util-linux)"
    else:
        for candidate in dict.fromkeys([Isolation(True, cgroup), Isolation(True, "")]):  # the cgroup may refuse us
            ok, why = _works(candidate)
            if ok:
                return candidate
        why = f"namespaces unavailable: {why}"
    if mode == "namespaces":
        raise SandboxError(f"VERILOOP_SANDBOX=namespaces, but {why}")
    if cgroup and not _works(Isolation(False, cgroup))[0]:
        cgroup = ""
    return Isolation(False, cgroup, why)


def _works(candidate: Isolation) -> tuple[bool, str]:
    """Does a trivial program run, and print what it should, under ``candidate``?"""
    try:
        res = run_program("print(sum(range(10)))", limits=SandboxLimits(wall_seconds=20), isolation_=candidate)
    except (OSError, subprocess.SubprocessError, SandboxError) as e:  # SubprocessError: preexec_fn (the cgroup)
        return False, f"{type(e).__name__}: {e}"
    if res.status == "ok" and res.stdout.strip() == "45":
        return True, ""
    return False, f"{res.status} {res.detail}".strip()


def _pids_cgroup_root() -> str:
    """A directory where this process may make cgroups with a ``pids.max`` (cgroup v1 or v2), or ""."""
    for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        if not os.path.isfile(os.path.join(base, "cgroup.procs")):
            continue
        if base == "/sys/fs/cgroup" and "pids" not in _read_text(os.path.join(base, "cgroup.subtree_control")):
            continue
        root = os.path.join(base, "veriloop-sandbox")
        try:
            os.makedirs(root, exist_ok=True)
            probe = tempfile.mkdtemp(dir=root)
            ok = os.path.isfile(os.path.join(probe, "pids.max"))
            os.rmdir(probe)
            if ok:
                return root
        except OSError:
            continue
    return ""


def _read_text(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up: no judgement was made (never a score)."""


def _denied_roots() -> list[str]:
    """The grader's own files (the veriloop package), even where they lie under a readable root
    (an installed package in site-packages).  Everything outside the readable roots, other runs'
    temporary directories included, is denied anyway."""
    return [os.path.dirname(os.path.dirname(os.path.realpath(__file__)))]


def _view_paths() -> list[str]:
    """What a run in namespaces sees, read-only: the interpreter's prefixes, the system's shared libraries (the
    interpreter's extension modules load them), and the device files a program may open."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths |= {os.path.realpath(p) for p in ("/lib", "/lib64", "/usr/lib", "/usr/lib64") if os.path.isdir(p)}
    paths |= {p for p in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random") if os.path.exists(p)}
    # a path inside another one is bound with it
    return sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths))


def _read_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(roots | {"/dev/null", "/dev/urandom", "/dev/zero"})


def run_program(program: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
                isolation_: Isolation | None = None, audit_hook: bool = True) -> RunResult:  # fmt: skip
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


# ---------------------------------------------------------------- assert-style tests, judged by the grader


class RemoteError(Exception):
    """An exception the program raised that is not one of Python's built-in ``Exception`` classes."""


class _SessionOver(BaseException):  # noqa: N818 - not an error of a test: the run ended (test code cannot catch it)
    """The program stopped answering (it ended, timed out, broke a rule or sent what is not a value)."""


@dataclass(frozen=True)
class TestRun:
    """How an assert-style run ended (``status`` as in ``RunResult``) and what the grader found."""

    __test__ = False  # not a pytest class
    status: str
    passed: int
    total: int
    first_fail: str = ""
    detail: str = ""
    wall_seconds: float = 0.0
    layers: str = ""


_SETUP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign,
          ast.AugAssign, ast.Pass)  # fmt: skip


def parse_tests(source: str) -> list[tuple[bool, object, str]]:
    """Assert-style test code -> ``[(is_test, code, text)]``, one entry per top-level statement, in order.

    Definitions, imports and assignments set up; every other statement (``assert``, a call such as
    HumanEval's ``check(candidate)``, ``try``/``if``/``for`` blocks) is one test, passed when it runs to its
    end.  Raises ``SyntaxError`` or ``ValueError`` (no test at all)."""
    tree = ast.parse(source)
    out = [(not isinstance(node, _SETUP), compile(ast.Module([node], []), "<test>", "exec"), ast.unparse(node))
           for node in tree.body]  # fmt: skip
    if not any(is_test for is_test, _, _ in out):
        raise ValueError("the test code has no test statement (assert, or a call such as check(candidate))")
    return out


def run_tests(program: str, tests: list[tuple[bool, object, str]],
              limits: SandboxLimits = SandboxLimits()) -> TestRun:  # fmt: skip
    """Run ``program`` in the sandbox, then evaluate ``tests`` (``parse_tests``) here, in the grader.

    The test code never enters the sandbox.  Each name the program defined is, in the tests' namespace, its
    value when it is a built-in value (``N = 5``) and otherwise a proxy: calling it, reading an attribute,
    iterating, ``len``, ``[]``, ``in`` and truth send one request to the sandbox, which answers with a
    strictly encoded built-in value, a handle to an object that is not one (a proxy again, equal only to
    itself), or the exception raised (re-raised here as the built-in class of that name, or ``RemoteError``).
    So every comparison and every ``assert`` is the grader's: what the program prints, exits with or patches
    in its own process decides nothing.  The test code is the grader's own code (it comes with the reference):
    it runs in this process, unsandboxed, and only its calls into the program cross the boundary."""
    child = _Child(program, "serve", limits, None)
    passed, total, first_fail = 0, sum(is_test for is_test, _, _ in tests), ""
    try:
        names = child.start_session()
        if names is not None:
            namespace = {"__name__": "__veriloop_test__", "__builtins__": builtins}
            for name, (kind, body) in names:
                bound = _test_binding(child, name, kind, body)
                if bound is not _UNBOUND:
                    namespace[name] = bound
            for is_test, code, text in tests:
                try:
                    exec(code, namespace)  # noqa: S102 - the reference's own test code, with proxies
                except _SessionOver:
                    break
                except (Exception, SystemExit) as e:  # a failed assert, or the program's exception re-raised
                    if not first_fail:
                        first_fail = f"{'test' if is_test else 'setup'} {text[:200]!r} failed: " + (
                            f"{type(e).__name__}: {e}"[:300])
                    continue
                if child.over:  # the run ended inside this statement (and the test code caught it): no pass
                    break
                passed += is_test
        run = child.end_session()
        return TestRun(run.status, passed, total, first_fail or run.detail, run.detail, run.wall_seconds, run.layers)
    finally:
        child.close()


def _test_binding(child, name: str, kind: str, body):
    """What a name the program defined is in the tests' namespace.  A built-in's name (``abs``, ``sorted``) is
    never the program's: a test's ``abs(f(x) - y) < 1e-9`` must not call the program's ``abs``.  A standard
    library module the program imported is the grader's own import of it, not the program's (patched) one."""
    if hasattr(builtins, name):
        return _UNBOUND
    if kind == "value":
        return _decode(body)
    if kind == "module":
        if str(body).partition(".")[0] not in sys.stdlib_module_names:
            return _UNBOUND
        try:
            return importlib.import_module(str(body))
        except ImportError:
            return _UNBOUND
    return _Remote(child, ("name", name), body)


_UNBOUND = object()  # the name stays unbound in the tests' namespace


def _encode(v, depth: int = 0):
    """The grader's side of the strict encoding (built-in values, and proxies by reference)."""
    t = type(v)
    if depth > 50:
        raise TypeError("value nested too deeply")
    if v is None or t in (bool, int, str, bytes):
        return v
    if t is float:
        return ("float", repr(v))
    if t in (list, tuple):
        return (t.__name__, [_encode(x, depth + 1) for x in v])
    if t in (set, frozenset):
        return (t.__name__, sorted((_encode(x, depth + 1) for x in v), key=repr))
    if t is dict:
        return ("dict", [(_encode(k, depth + 1), _encode(x, depth + 1)) for k, x in v.items()])
    if t is _Remote:
        return ("ref", object.__getattribute__(v, "_ref"))
    raise TypeError(f"only built-in values and the program's own objects can be passed to it, not {t.__name__}")


def _decode(encoded):
    """Inverse of the strict encoder: built-in values only."""
    if isinstance(encoded, tuple):
        if len(encoded) != 2 or not isinstance(encoded[0], str):
            raise ValueError("not an encoded value")
        kind, body = encoded
        if kind == "float":
            return float(body)
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [_decode(x) for x in body]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            return {_decode(k): _decode(x) for k, x in body}
        raise ValueError(f"not an encoded value: {kind!r}")
    if encoded is None or type(encoded) in (bool, int, str, bytes):
        return encoded
    raise ValueError("not an encoded value")


def _remote_exception(name: str, message: str) -> Exception:
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not StopIteration:
        try:
            return cls(message)
        except Exception:  # an exception class with other required arguments (UnicodeDecodeError)
            pass
    return RemoteError(f"{name}: {message}")


class _Remote:
    """A name or object of the program, in the grader's test namespace.  Equal only to itself."""

    __slots__ = ("_child", "_ref", "_type")

    def __init__(self, child, ref, type_name):
        object.__setattr__(self, "_child", child)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_type", type_name)

    def _ask(self, op, payload=None):
        return object.__getattribute__(self, "_child").request(op, object.__getattribute__(self, "_ref"), payload)

    def __call__(self, *args, **kwargs):
        return self._ask("call", (_encode(list(args)), _encode(dict(kwargs))))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name, value):
        raise TypeError("the tests cannot set attributes of the program's objects")

    def __iter__(self):
        it = self._ask("iter")
        return it if isinstance(it, _Remote) else iter(it)

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len")

    def __getitem__(self, key):
        return self._ask("getitem", _encode(key))

    def __contains__(self, item):
        return self._ask("contains", _encode(item))

    def __bool__(self):
        return self._ask("bool")

    def __repr__(self):
        return f"<the program's {object.__getattribute__(self, '_type')}>"


_MAX_REPLY = 4 << 20  # bytes of one answer from the sandbox


# ---------------------------------------------------------------- one sandboxed process


class _CgroupReaper:
    """Removes run cgroups in the background: the kernel frees one only once its last process is reaped, a few
    milliseconds after the kill, and a run should not wait for that.  At exit, what is left is removed (bounded)."""

    def __init__(self):
        self.pending: list[str] = []
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        atexit.register(self.drain, 2.0)

    def remove(self, path: str) -> None:
        if self._try(path):
            return
        with self.cond:
            self.pending.append(path)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="veriloop-cgroup-reaper", daemon=True)
                self.thread.start()
            self.cond.notify()

    @staticmethod
    def _try(path: str) -> bool:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
                batch, self.pending = self.pending, []
            time.sleep(0.02)
            left = [p for p in batch if not self._try(p)]
            with self.cond:
                self.pending = left + self.pending

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with self.cond:
                self.pending = [p for p in self.pending if not self._try(p)]
                if not self.pending:
                    return
            time.sleep(0.02)


_CGROUP_REAPER = _CgroupReaper()


class _Child:
    """One sandboxed process: started with its limits (in its namespaces and pids cgroup where the machine has
    them), its output drained under a cap, talked to on the control pipes, killed with its process group, its
    directory (and cgroup) removed."""

    def __init__(self, program: str, mode: str, limits: SandboxLimits, stdin: str | None,
                 isolation_: Isolation | None = None, audit_hook: bool = True):  # fmt: skip
        self.limits, self.token = limits, secrets.token_hex(16)
        self.isolation = iso = isolation_ or isolation()
        self.base = tempfile.mkdtemp(prefix="veriloop-sandbox-")
        os.chmod(self.base, 0o700)
        self.workdir = os.path.join(os.path.realpath(self.base), "work")
        os.mkdir(self.workdir, 0o700)
        bundle = {"token": self.token, "mode": mode, "program": program, "read_roots": _read_roots(),
                  "denied_roots": _denied_roots(), "hook": audit_hook}  # fmt: skip
        argv = [sys.executable, "-I", "-c", _HARNESS]
        if iso.namespaces:
            os.mkdir(os.path.join(self.base, "root"), 0o700)
            bundle["view"] = {"root": os.path.join(os.path.realpath(self.base), "root"), "work": self.workdir,
                              "read_only": _view_paths(), "pivot_root": _PIVOT_ROOT[os.uname().machine]}  # fmt: skip
            argv = ["unshare", *_NAMESPACES, *argv]
        self.cgroup = ""
        if iso.pids_cgroup:
            self.cgroup = os.path.join(iso.pids_cgroup, self.token[:16])
            os.mkdir(self.cgroup)
            with open(os.path.join(self.cgroup, "pids.max"), "w") as fh:
                fh.write(str(PIDS_MAX))
        ctrl_in_r, self.ctrl_in = os.pipe()
        self.ctrl_out, ctrl_out_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        self.started = time.monotonic()
        self.deadline = self.started + limits.wall_seconds
        try:
            self.proc = subprocess.Popen(
                [*argv, str(ctrl_in_r), str(ctrl_out_w)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.workdir, env=env,
                pass_fds=(ctrl_in_r, ctrl_out_w), start_new_session=True, preexec_fn=_preexec(limits, self.cgroup),
            )  # fmt: skip
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
        self.buffer, self.reports, self.over = b"", [], ""
        keep_in = mode == "serve"
        self.threads = [threading.Thread(target=self._feed, args=(bundle, stdin, keep_in), daemon=True),
                        threading.Thread(target=self._drain, args=(self.proc.stdout, True), daemon=True),
                        threading.Thread(target=self._drain, args=(self.proc.stderr, False), daemon=True)]  # fmt: skip
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
        try:
            self.proc.wait(timeout=max(seconds, 0.0))
            return True
        except subprocess.TimeoutExpired:
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
        shutil.rmtree(self.base, ignore_errors=True)
        if self.cgroup:
            for pid in _read_text(os.path.join(self.cgroup, "cgroup.procs")).split():
                try:  # anything still in it (a process that left the killed group) goes with the run
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass
            _CGROUP_REAPER.remove(self.cgroup)

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
        result = _ending(rc, reports, self.out, self.overflow, timed_out, finished, self.limits,
                         time.monotonic() - self.started)  # fmt: skip
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
                if report[0] in ("VIOLATION", "CRASH", "SETUP"):
                    self.reports.append(report)
                    self.over = report[0].lower()
                    return None
                return report
            if len(self.buffer) > _MAX_REPLY:
                self.over = f"an answer over {_MAX_REPLY} bytes"
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
            return [(str(n), (str(k), body)) for n, (k, body) in ast.literal_eval(report[1])]
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            self.over = "protocol"
            return None

    def request(self, op: str, target, payload):
        if self.over:
            raise _SessionOver(self.over)
        try:
            _write_all(self.ctrl_in, repr((op, target, payload)).encode() + b"\n", self.deadline)
        except (OSError, TimeoutError) as e:
            self.over = "timeout" if isinstance(e, TimeoutError) else "ended"
            raise _SessionOver(self.over) from None
        report = self._next_report()
        if report is None:
            raise _SessionOver(self.over)
        kind, text = report
        try:
            if kind == "VALUE":
                return _decode(ast.literal_eval(text))
            if kind == "HANDLE":
                index, type_name = ast.literal_eval(text)
                return _Remote(self, ("handle", int(index)), str(type_name))
            if kind == "RAISE":
                name, message = ast.literal_eval(text)
                error = _remote_exception(str(name), str(message))
            elif kind == "STOP":
                error = StopIteration()
            else:
                raise ValueError(kind)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            self.over = "protocol"
            raise _SessionOver(self.over) from None
        raise error

    def end_session(self) -> RunResult:
        finished = not self.over and ("READY", "") in self.reports
        if not self.over:
            try:
                _write_all(self.ctrl_in, repr(("end", None, None)).encode() + b"\n", self.deadline)
            except (OSError, TimeoutError):
                pass
        self._close_in()
        timed_out = self.over == "timeout" or not self.wait(min(1.0, max(self.deadline - time.monotonic(), 0.0)))
        if finished:
            timed_out = False  # every test was judged; a program that lingers after "end" is killed, not failed
        self.join_threads()
        result = self.ending(self.reports, timed_out, finished)
        if result.status == "crash" and (self.over == "protocol" or self.over.startswith("an answer over")):
            detail = "the program sent what is not an answer" if self.over == "protocol" else self.over
            return RunResult("crash", result.stdout, detail, result.wall_seconds, result.layers)
        return result


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        _, ready, _ = select.select([], [fd], [], left)
        if ready:  # a writable pipe has room for PIPE_BUF bytes: this write cannot block past the deadline
            view = view[os.write(fd, view[: select.PIPE_BUF]) :]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
        pass


def _ending(rc, reports, out, overflow, timed_out, finished, limits, wall) -> RunResult:
    """How the run ended: what the harness reported (the first report of each kind), the limits it hit,
    and the exit status."""
    stdout = bytes(out[: limits.output_bytes]).decode("utf-8", errors="replace")
    first = {kind: text for kind, text in reversed(reports)}
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
            why = f"killed by signal {signal.Signals(-rc).name}"
            if -rc in (signal.SIGKILL, signal.SIGSEGV):
                why += " (memory or CPU limit?)"
        else:
            why = f"exited with status {rc} before the harness finished"
        return RunResult("crash", stdout, why, wall)
    return RunResult("ok", stdout, "", wall)
