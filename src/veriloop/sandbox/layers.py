"""The sandbox's isolation layers: what every run gets (``Isolation``: which layers, and why a stronger one is
missing), the seccomp filter, the read-only view a run in namespaces sees, the read roots the audit hook allows,
and the removal of each run's cgroups (made by the supervisor, removed here in the background).  What this machine
allows is probed in ``probe.py``; how the namespaces are made (bubblewrap, or unshare), in ``namespaces.py``.

The layers, strongest first: namespaces (user, mount, pid, net, ipc, uts; a read-only view of the file system; no
capabilities), made by bubblewrap (``bwrap``) where it works here, else by util-linux's ``unshare``; a seccomp
filter; a pids cgroup and a memory cgroup per run; resource limits; the audit hook.

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
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Isolation:
    """The layers every run gets on this machine, strongest first; ``why`` says why a stronger one is missing."""

    namespaces: bool  # user, mount, pid, net, ipc, uts namespaces and a read-only view of the file system
    pids_cgroup: str  # the cgroup directory under which each run gets its own pids.max, or ""
    why: str = ""
    seccomp: str = ""  # the libseccomp library the child loads its syscall filter with, or "" (no filter)
    memory_cgroup: str = ""  # the cgroup directory under which each run gets its own memory limit, or ""
    bwrap: str = ""  # the bubblewrap command that makes the namespaces and the view, or "" (unshare makes them)

    @property
    def layers(self) -> str:
        parts = (["namespaces"] + (["bwrap"] if self.bwrap else [])) if self.namespaces else []
        parts += ["seccomp"] if self.seccomp else []
        parts += ["pids-cgroup"] if self.pids_cgroup else []
        parts += ["memory-cgroup"] if self.memory_cgroup else []
        return "+".join(parts + ["rlimits", "audit-hook"])

    def describe(self) -> str:
        return (
            f"sandbox layers: {self.layers}: {self._kernel()}{self._filter()}{self._cgroups()}; resource limits; the "
            "audit hook" + (f" ({self.why})" if self.why else "")
        )

    def _kernel(self) -> str:
        if not self.namespaces:
            return "no namespaces"
        made_by = f"bubblewrap ({self.bwrap})" if self.bwrap else "util-linux's unshare"
        return (
            f"user, mount, pid, net, ipc and uts namespaces, made by {made_by}; a read-only view of the interpreter's "
            "library directories and the run's own directory (a size-limited tmpfs), nothing else; no network "
            f"device; no capabilities; {dict(USER_NAMESPACE_LIMITS)['max_inotify_instances']} inotify instances and "
            "no namespace of its own"
        )

    def _filter(self) -> str:
        if not self.seccomp:
            return "; no seccomp filter"
        return (
            f"; a seccomp filter (libseccomp): {len(SECCOMP_EPERM) + 1} calls refused, no namespace flag to clone, "
            "no socket but a Unix one"
        )

    def _cgroups(self) -> str:
        pids = f"; at most {PIDS_MAX} processes and threads (pids cgroup)" if self.pids_cgroup else ""
        memory = (
            "; the run's memory limit holds for all its processes, shared memory and memfd included (memory cgroup)"
        )
        return pids + (memory if self.memory_cgroup else "")

    def seccomp_spec(self) -> bytes | None:
        """The filter the child loads, as a BPF program (None: no filter); compiled once per process."""
        return seccomp_bpf(self.seccomp) if self.seccomp else None


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up: no judgement was made (never a score)."""


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

MEMORY_LIMIT_FILES = ("memory.limit_in_bytes", "memory.max")  # cgroup v1, v2


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


def read_text(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


@functools.cache
def denied_roots() -> tuple[str, ...]:
    """The grader's own files (the veriloop package), even where they lie under a readable root
    (an installed package in site-packages).  Everything outside the readable roots, other runs'
    temporary directories included, is denied anyway."""
    return (os.path.dirname(os.path.dirname(os.path.realpath(__file__))),)


@functools.cache
def _prefixes() -> frozenset[str]:
    return frozenset(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix))


@functools.cache
def view_paths() -> tuple[str, ...]:
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
def read_roots() -> tuple[str, ...]:
    """What the audit hook lets a program read outside its directory: the interpreter's prefixes, 3 devices."""
    return tuple(sorted(_prefixes() | {"/dev/null", "/dev/urandom", "/dev/zero"}))


STALE_CGROUP_S = 120.0  # an empty run cgroup this old is a leftover (a run's process joins it within milliseconds)


class _CgroupReaper:
    """Removes run cgroups in the background: the kernel frees one only once its last process is reaped, a few
    milliseconds after the kill, and a run should not wait for that.  At exit, what is left is removed (bounded)."""

    def __init__(self):
        self.pending: list[str] = []
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.swept = False
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

    def sweep_once(self, roots: tuple[str, ...], min_age_s: float = STALE_CGROUP_S) -> None:
        """Once per process: remove the empty run cgroups under ``roots`` older than ``min_age_s``, left by a process
        that was killed (or ended without its exit handlers) before removing them.  A cgroup that still holds a
        process cannot be removed (the kernel refuses), and one younger than the bound may be a run being set up."""
        with self.cond:
            if self.swept:
                return
            self.swept = True
        now = time.time()
        for root in roots:
            try:
                entries = list(os.scandir(root)) if root else []
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False) and now - entry.stat().st_mtime > min_age_s:
                        self._try(entry.path)
                except OSError:
                    pass

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with self.cond:
                self.pending = [p for p in self.pending if not self._try(p)]
                if not self.pending:
                    return
            time.sleep(0.02)


CGROUP_REAPER = _CgroupReaper()
