"""Starting and ending a sandboxed process: what the forked child does before the exec (dies with its grader,
joins the run's cgroups, sets its resource limits), the run's cgroups, waiting and killing, and removing the
run's directory however deep.  The supervisor (``supervisor.py``) calls these; none of them reads what the
program says."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

from veriloop.sandbox.layers import CGROUP_REAPER, MEMORY_LIMIT_FILES, PIDS_MAX, Isolation
from veriloop.sandbox.limits import SandboxLimits

# prctl(2) from the C library, looked up here: the forked child only calls it (no import between fork and exec)
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def preexec(limits: SandboxLimits, cgroup: str = "", memory: str = ""):
    grader = os.getpid()

    def apply() -> None:
        import resource

        # The sandboxed process dies with its grader: SIGKILL when the thread that started it ends (the grader
        # killed, say), and under unshare --kill-child or bwrap --die-with-parent the namespace's processes go with
        # it.  A grader that died before this line leaves the child an orphan already: it stops here.
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != grader:
                os._exit(1)

        for group in (cgroup, memory):  # this process (and all it starts) joins the run's cgroups before the exec
            if group:
                with open(os.path.join(group, "cgroup.procs"), "w") as fh:
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


def run_cgroups(iso: Isolation, limits: SandboxLimits, name: str) -> tuple[str, str]:
    """The run's own pids cgroup (``pids.max``) and memory cgroup (its memory limit for all its processes, shmem
    and memfd pages included), where the machine has them; "" where not."""
    pids = memory = ""
    CGROUP_REAPER.sweep_once((iso.pids_cgroup, iso.memory_cgroup))  # leftovers of killed processes
    if iso.pids_cgroup:
        pids = os.path.join(iso.pids_cgroup, name)
        os.mkdir(pids)
        with open(os.path.join(pids, "pids.max"), "w") as fh:
            fh.write(str(PIDS_MAX))
    if iso.memory_cgroup:
        memory = os.path.join(iso.memory_cgroup, name)
        os.mkdir(memory)
        limit = next(n for n in MEMORY_LIMIT_FILES if os.path.isfile(os.path.join(memory, n)))
        with open(os.path.join(memory, limit), "w") as fh:
            fh.write(str(limits.memory_mb << 20))
    return pids, memory


def _unlink_files(fd: int) -> list[str]:
    """Unlink what in the directory ``fd`` is not a directory; the subdirectories, to visit."""
    subdirs = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    else:
                        os.unlink(entry.name, dir_fd=fd)
                except OSError:
                    pass
    except OSError:  # an unreadable directory: left, the walk goes on
        pass
    return subdirs


def remove_tree(top: str) -> None:
    """Remove the directory ``top`` and everything in it, however deep: one descriptor open at a time, no
    recursion and no long paths (``shutil.rmtree`` raised ``RecursionError`` on 1,500 nested directories a
    program made, and the run's directory and cgroup stayed behind).  Symbolic links are removed, never
    followed; what cannot be removed is left and the walk goes on."""
    flags, scan = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, _unlink_files
    try:
        fd = os.open(top, flags)
    except OSError:
        return
    pending, names = [scan(fd)], []  # per level: subdirectories still to visit; the names walked down
    try:
        while True:
            if pending[-1]:
                name = pending[-1].pop()
                try:
                    child = os.open(name, flags, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                pending.append(scan(fd))
                continue
            if not names:
                break
            try:
                parent = os.open("..", flags, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = parent
            pending.pop()
            try:
                os.rmdir(names.pop(), dir_fd=fd)
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        os.rmdir(top)
    except OSError:
        pass


def write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        _, ready, _ = select.select([], [fd], [], left)
        if ready:  # a writable pipe has room for PIPE_BUF bytes: this write cannot block past the deadline
            view = view[os.write(fd, view[: select.PIPE_BUF]) :]


def wait_exit(proc: subprocess.Popen, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``proc`` to end (and reap it); False if it is still running.

    ``Popen.wait(timeout)`` polls with sleeps that double up to 50 ms, so a short run is seen ending late
    (``benchmarks/sandbox_layers.py`` compares the two).  A pidfd (Linux 5.3+) becomes readable the moment the
    process exits; elsewhere, or for a process already reaped, ``Popen.wait`` does."""
    seconds = max(seconds, 0.0)
    fd = -1
    if proc.returncode is None and hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:  # reaped meanwhile (ProcessLookupError), or a kernel without pidfds
            fd = -1
    if fd >= 0:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(seconds * 1000.0):
                return False
        finally:
            os.close(fd)
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    wait_exit(proc, 5.0)  # False only for a process that ignores SIGKILL
