"""The sandbox's isolation layers: what this machine allows (probed once per process), the read-only view a
run in namespaces sees, the read roots the audit hook allows, and each run's pids cgroup (made by the
supervisor, removed here in the background).

``VERILOOP_SANDBOX=auto`` (default) takes the strongest layers that work: namespaces (user, mount, pid, net,
ipc, uts; a read-only ``pivot_root`` view; no capabilities), a seccomp filter, a pids cgroup per run, resource
limits and the audit hook; where the kernel layer cannot be had it refuses untrusted code (``SandboxError``,
saying what is missing).  ``process`` is the explicit, logged opt-in to every layer short of namespaces that
works here;
``namespaces`` requires the kernel layer.

The seccomp filter is compiled by libseccomp (the maintained C library, ``libseccomp2`` on Debian), called
through ctypes here, once per process (libseccomp's own Python binding is a distribution package, not on PyPI);
the child loads the BPF program it exported with ``prctl(PR_SET_SECCOMP)``.  Default allow; the calls below fail
with EPERM (clone3 with ENOSYS, so that the C library falls back to clone, whose flags a filter can read).  It is
loaded after the view is made and the capabilities dropped, with no_new_privs set, and a run inherits it: no
nested namespaces, no ptrace, no socket but a Unix one, no kernel keyring, BPF, perf, io_uring, module or clock
call.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from veriloop.errors import InputError

log = logging.getLogger(__name__)

SECCOMP_EPERM = (
    # other processes' memory and namespaces; the file system's shape
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_by_handle_at",
    "name_to_handle_at",
    # the kernel's rarer surfaces: BPF, perf, userfaultfd, io_uring, key rings, modules, kexec
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    # the machine's settings
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "vhangup",
    "uselib",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "fanotify_init",
    # programs: the run is the interpreter that started it, nothing else (a static binary written to the run's
    # directory, or one the view holds); loaded after the interpreter started, so it does not refuse that exec
    "execve",
    "execveat",
)
SECCOMP_ENOSYS = ("clone3",)  # its flags lie in memory, unreadable to a filter: glibc then uses clone
# clone with any namespace flag: CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
SECCOMP_CLONE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
AF_UNIX = 1

_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers
_NAMESPACES = ["--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]


@dataclass(frozen=True)
class Isolation:
    """The layers every run gets on this machine, strongest first; ``why`` says why a stronger one is missing."""

    namespaces: bool  # user, mount, pid, net, ipc, uts namespaces and a read-only view of the file system
    pids_cgroup: str  # the cgroup directory under which each run gets its own pids.max, or ""
    why: str = ""
    seccomp: str = ""  # the libseccomp library the child loads its syscall filter with, or "" (no filter)
    memory_cgroup: str = ""  # the cgroup directory under which each run gets its own memory limit, or ""

    @property
    def layers(self) -> str:
        parts = (["namespaces"] if self.namespaces else []) + (["seccomp"] if self.seccomp else [])
        parts += ["pids-cgroup"] if self.pids_cgroup else []
        parts += ["memory-cgroup"] if self.memory_cgroup else []
        return "+".join(parts + ["rlimits", "audit-hook"])

    def describe(self) -> str:
        kernel = (
            (
                "user, mount, pid, net, ipc and uts namespaces; a read-only view of the interpreter's library "
                "directories and the run's own directory (a size-limited tmpfs), nothing else; no network device; "
                f"no capabilities; {dict(USER_NAMESPACE_LIMITS)['max_inotify_instances']} inotify instances and no "
                "namespace of its own"
            )
            if self.namespaces
            else ("no namespaces")
        )
        seccomp = (
            (
                f"; a seccomp filter (libseccomp): {len(SECCOMP_EPERM) + 1} calls refused, no namespace flag to "
                "clone, no socket but a Unix one"
            )
            if self.seccomp
            else "; no seccomp filter"
        )
        pids = f"; at most {PIDS_MAX} processes and threads (pids cgroup)" if self.pids_cgroup else ""
        pids += (
            ("; the run's memory limit holds for all its processes, shared memory and memfd included (memory cgroup)")
            if self.memory_cgroup
            else ""
        )
        return f"sandbox layers: {self.layers}: {kernel}{seccomp}{pids}; resource limits; the audit hook" + (
            f" ({self.why})" if self.why else ""
        )

    def seccomp_spec(self) -> bytes | None:
        """The filter the child loads, as a BPF program (None: no filter); compiled once per process."""
        return seccomp_bpf(self.seccomp) if self.seccomp else None


PIDS_MAX = 64
# /proc/sys/user/ in each run's user namespace (the kernel counts these per namespace and up the chain, so a run
# cannot take the host user's inotify instances): few inotify instances and watches, no namespace of its own
# (the seccomp filter refuses unshare and clone flags too; these hold where the filter is missing)
USER_NAMESPACE_LIMITS = (
    ("max_inotify_instances", 8),
    ("max_inotify_watches", 1024),
    ("max_fanotify_groups", 0),
    ("max_fanotify_marks", 0),
) + tuple((f"max_{kind}_namespaces", 0) for kind in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"))
_ISOLATION: Isolation | None = None
_ISOLATION_LOCK = threading.Lock()


def isolation() -> Isolation:
    """The strongest isolation this machine allows, probed once per process.  ``VERILOOP_SANDBOX=process`` does
    without namespaces; ``namespaces`` requires the kernel layer (an error where it cannot be had)."""
    global _ISOLATION
    with _ISOLATION_LOCK:
        if _ISOLATION is None:
            _ISOLATION = _probe_isolation(os.environ.get("VERILOOP_SANDBOX", "auto"))
        return _ISOLATION


def _probe_isolation(mode: str) -> Isolation:
    if mode not in ("auto", "process", "namespaces"):
        raise InputError(f"VERILOOP_SANDBOX must be auto, process or namespaces, got {mode!r}")
    if mode == "process":  # the explicit opt-in: loud, and every verdict's layers say it
        iso = _process_layers("VERILOOP_SANDBOX=process")
        log.warning(
            "VERILOOP_SANDBOX=process: untrusted code runs without the kernel layer (namespaces), "
            f"which a hostile program can defeat; verdicts say 'sandbox: {iso.layers}'"
        )
        return iso
    cgroup = _pids_cgroup_root()
    library, why_no_seccomp = _seccomp_library()
    why = ""
    if not sys.platform.startswith("linux") or os.uname().machine not in _PIVOT_ROOT:
        why = f"no namespaces on {sys.platform}/{os.uname().machine}"
    elif shutil.which("unshare") is None:
        why = "no unshare command (util-linux)"
    else:
        # the strongest first: the cgroup may refuse us, the filter may fail to load
        candidates = [
            Isolation(True, cg, "", lib) for lib in dict.fromkeys([library, ""]) for cg in dict.fromkeys([cgroup, ""])
        ]
        for candidate in candidates:
            ok, why = _works(candidate)
            if ok:
                if library and not candidate.seccomp:  # the filter failed where the namespaces worked: say why
                    why_no_seccomp = f"the seccomp filter failed to load: {_works(candidates[0])[1]}"
                memory = _memory_cgroup_root()
                why_no_memory = "" if memory else "no memory cgroup this process may make"
                return Isolation(
                    True,
                    candidate.pids_cgroup,
                    "; ".join(w for w in (why_no_seccomp, why_no_memory) if w),
                    candidate.seccomp,
                    memory,
                )
        why = f"namespaces unavailable: {why}"
    if mode == "namespaces":
        raise SandboxError(f"VERILOOP_SANDBOX=namespaces, but {why}")
    # Without the kernel layer untrusted code is refused by default: the process layers alone have been
    # patched, escaped and made to leak by hostile programs (docs/security.md).  Running without it is an
    # explicit opt-in.
    raise SandboxError(
        f"the sandbox's kernel layer is unavailable here ({why}), so untrusted code is refused. It needs Linux "
        "user namespaces (unprivileged user namespaces allowed: sysctl kernel.unprivileged_userns_clone=1 or "
        "user.max_user_namespaces > 0; in a container, a profile that permits unshare) and util-linux's "
        "'unshare'. To run anyway without it (the seccomp filter and cgroups where they work, resource limits and an "
        "audit hook, which a hostile program can defeat), set VERILOOP_SANDBOX=process: every verdict then says so."
    )


def _process_layers(why: str) -> Isolation:
    """The strongest layers short of namespaces that work here: the seccomp filter (no socket but a Unix one, no
    exec), the run's pids and memory cgroups (every process it leaves behind is killed with the cgroup), resource
    limits and the audit hook."""
    library, _ = _seccomp_library()
    pids, memory = _pids_cgroup_root(), _memory_cgroup_root()
    candidates = [
        Isolation(False, cg, why, lib, mem)
        for lib in dict.fromkeys([library, ""])
        for cg, mem in dict.fromkeys([(pids, memory), ("", "")])
    ]
    for candidate in candidates[:-1]:
        if _works(candidate)[0]:
            return candidate
    return candidates[-1]


def _seccomp_library() -> tuple[str, str]:
    """libseccomp's shared library (by its soname, for the child's loader), or "" and why not."""
    if not sys.platform.startswith("linux"):
        return "", f"no seccomp on {sys.platform}"
    import ctypes.util

    name = ctypes.util.find_library("seccomp")
    return (name, "") if name else ("", "no seccomp filter: libseccomp is not installed (Debian: libseccomp2)")


@functools.cache
def seccomp_bpf(library: str) -> bytes:
    """The syscall filter, compiled by libseccomp (``library``) into a classic BPF program for this machine's
    architecture: the raw ``struct sock_filter`` array the child hands to ``prctl(PR_SET_SECCOMP)``.  Compiled here
    once, not in every run: a run only hands the kernel the compiled program.

    Default allow; SECCOMP_EPERM fail with EPERM, clone3 with ENOSYS (the C library then uses clone, whose flags
    the filter reads); clone with a namespace flag and socket(family != AF_UNIX) fail with EPERM."""
    import ctypes

    class Cmp(ctypes.Structure):  # struct scmp_arg_cmp
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    lib = ctypes.CDLL(library, use_errno=True)
    lib.seccomp_init.restype, lib.seccomp_init.argtypes = ctypes.c_void_p, [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(Cmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38  # SCMP_ACT_ERRNO(errno)
    ne, masked_eq = 1, 7  # enum scmp_compare: SCMP_CMP_NE, SCMP_CMP_MASKED_EQ
    ctx = lib.seccomp_init(0x7FFF0000)  # SCMP_ACT_ALLOW
    if not ctx:
        raise OSError("seccomp_init failed")

    def rule(action: int, name: str, *cmps: tuple) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # no such call on this architecture
        rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), (Cmp * max(1, len(cmps)))(*[Cmp(*c) for c in cmps]))
        if rc != 0:
            raise OSError(-rc, f"seccomp rule for {name}: {os.strerror(-rc)}")

    try:
        for name in SECCOMP_EPERM:
            rule(eperm, name)
        for name in SECCOMP_ENOSYS:
            rule(enosys, name)
        for flag in SECCOMP_CLONE_FLAGS:
            rule(eperm, "clone", (0, masked_eq, flag, flag))
        rule(eperm, "socket", (0, ne, AF_UNIX, 0))
        with tempfile.TemporaryFile() as fh:
            rc = lib.seccomp_export_bpf(ctx, fh.fileno())
            if rc != 0:
                raise OSError(-rc, f"seccomp_export_bpf: {os.strerror(-rc)}")
            fh.seek(0)
            program = fh.read()
    finally:
        lib.seccomp_release(ctx)
    if not program or len(program) % 8 or len(program) // 8 > 4096:  # 8 bytes an instruction; BPF_MAXINSNS
        raise OSError(f"libseccomp exported a filter of {len(program)} bytes")
    return program


def _works(candidate: Isolation) -> tuple[bool, str]:
    """Does a trivial program run, and print what it should, under ``candidate``?"""
    from veriloop.verifiers.sandbox import SandboxLimits, run_program  # the supervisor imports this module

    try:
        res = run_program("print(sum(range(10)))", limits=SandboxLimits(wall_seconds=20), isolation_=candidate)
    except (OSError, subprocess.SubprocessError, SandboxError) as e:  # SubprocessError: preexec_fn (the cgroup)
        return False, f"{type(e).__name__}: {e}"
    if res.status == "ok" and res.stdout.strip() == "45":
        return True, ""
    return False, f"{res.status} {res.detail}".strip()


MEMORY_LIMIT_FILES = ("memory.limit_in_bytes", "memory.max")  # cgroup v1, v2


def _pids_cgroup_root() -> str:
    """A directory where this process may make cgroups with a ``pids.max`` (cgroup v1 or v2), or ""."""
    return _cgroup_root("pids", ("pids.max",))


def _memory_cgroup_root() -> str:
    """A directory where this process may make cgroups with a memory limit (cgroup v1 or v2), or ""."""
    return _cgroup_root("memory", MEMORY_LIMIT_FILES)


def _cgroup_root(controller: str, limit_files: tuple[str, ...]) -> str:
    """``veriloop-sandbox`` under the ``controller``'s hierarchy (v1) or the unified one (v2, where the controller
    is enabled for children), if this process may make a cgroup there that has one of ``limit_files``; else ""."""
    for base in (f"/sys/fs/cgroup/{controller}", "/sys/fs/cgroup"):
        if not os.path.isfile(os.path.join(base, "cgroup.procs")):
            continue
        if base == "/sys/fs/cgroup" and controller not in _read_text(os.path.join(base, "cgroup.subtree_control")):
            continue
        root = os.path.join(base, "veriloop-sandbox")
        try:
            os.makedirs(root, exist_ok=True)
            probe = tempfile.mkdtemp(dir=root)
            ok = any(os.path.isfile(os.path.join(probe, name)) for name in limit_files)
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


# Computed once per process (each is a few realpath calls, and every run asks).


@functools.cache
def _denied_roots() -> tuple[str, ...]:
    """The grader's own files (the veriloop package), even where they lie under a readable root
    (an installed package in site-packages).  Everything outside the readable roots, other runs'
    temporary directories included, is denied anyway."""
    return (os.path.dirname(os.path.dirname(os.path.realpath(__file__))),)


@functools.cache
def _prefixes() -> frozenset[str]:
    return frozenset(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix))


@functools.cache
def _view_paths() -> tuple[str, ...]:
    """What a run in namespaces sees, read-only: the library directories of the interpreter's prefixes (its
    standard library, extension modules and site-packages; not its ``bin``), the system's shared libraries (the
    interpreter's extension modules load them), and the device files a program may open."""
    paths = {os.path.realpath(os.path.join(p, lib)) for p in _prefixes() for lib in ("lib", "lib64")}
    paths |= {os.path.realpath(p) for p in ("/lib", "/lib64", "/usr/lib", "/usr/lib64")}
    paths = {p for p in paths if os.path.isdir(p)}
    paths |= {p for p in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random") if os.path.exists(p)}
    # a path inside another one is bound with it
    return tuple(sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths)))


@functools.cache
def _read_roots() -> tuple[str, ...]:
    """What the audit hook lets a program read outside its directory: the interpreter's prefixes, 3 devices."""
    return tuple(sorted(_prefixes() | {"/dev/null", "/dev/urandom", "/dev/zero"}))


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


CGROUP_REAPER = _CgroupReaper()
