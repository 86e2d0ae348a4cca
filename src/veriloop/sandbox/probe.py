"""What this machine's sandbox can have, probed once per process (``isolation()``): each candidate set of layers is
tried with a trivial program, the strongest that works is taken, and ``Isolation.why`` says why a stronger one is
missing.

``VERILOOP_SANDBOX=auto`` (default) takes the strongest layers that work: namespaces (user, mount, pid, net, ipc,
uts; a read-only ``pivot_root`` view; no capabilities), made by bubblewrap (``bwrap``) where it is installed and
can make them here, else by util-linux's ``unshare`` (``namespaces.py``); a seccomp filter, a pids and a memory
cgroup per run, resource limits and the audit hook.  Where the kernel layer cannot be had it refuses untrusted code
(``SandboxError``, saying what is missing).  ``process`` is the explicit, logged opt-in to every layer short of
namespaces that works here; ``namespaces`` requires the kernel layer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from veriloop.errors import InputError
from veriloop.sandbox.layers import MEMORY_LIMIT_FILES, Isolation, SandboxError, read_text
from veriloop.sandbox.limits import SandboxLimits
from veriloop.sandbox.namespaces import PIVOT_ROOT
from veriloop.sandbox.supervisor import run_under

log = logging.getLogger(__name__)
_ISOLATION: Isolation | None = None
_ISOLATION_LOCK = threading.Lock()
# Without the kernel layer untrusted code is refused by default: the process layers alone have been patched,
# escaped and made to leak by hostile programs (docs/security.md).  Running without it is an explicit opt-in.
_REFUSED = (
    "the sandbox's kernel layer is unavailable here ({why}), so untrusted code is refused. It needs Linux user "
    "namespaces (unprivileged user namespaces allowed: sysctl kernel.unprivileged_userns_clone=1 or "
    "user.max_user_namespaces > 0; in a container, a profile that permits them) and bubblewrap's 'bwrap' (Debian: "
    "bubblewrap) or util-linux's 'unshare'. To run anyway without it (the seccomp filter and cgroups where they work, "
    "resource limits and an audit hook, which a hostile program can defeat), set VERILOOP_SANDBOX=process: every "
    "verdict then says so."
)


def isolation() -> Isolation:
    """The strongest isolation this machine allows, probed once per process.  ``VERILOOP_SANDBOX=process`` does
    without namespaces; ``namespaces`` requires the kernel layer (an error where it cannot be had)."""
    global _ISOLATION
    with _ISOLATION_LOCK:
        if _ISOLATION is None:
            _ISOLATION = probe_isolation(os.environ.get("VERILOOP_SANDBOX", "auto"))
        return _ISOLATION


def probe_isolation(mode: str) -> Isolation:
    """What ``VERILOOP_SANDBOX=mode`` gets on this machine (each call probes afresh)."""
    if mode not in ("auto", "process", "namespaces"):
        raise InputError(f"VERILOOP_SANDBOX must be auto, process or namespaces, got {mode!r}")
    if mode == "process":  # the explicit opt-in: loud, and every verdict's layers say it
        iso = process_layers("VERILOOP_SANDBOX=process")
        log.warning(
            "VERILOOP_SANDBOX=process: untrusted code runs without the kernel layer (namespaces), "
            f"which a hostile program can defeat; verdicts say 'sandbox: {iso.layers}'"
        )
        return iso
    iso, why = _namespace_layers()
    if iso is not None:
        return iso
    if mode == "namespaces":
        raise SandboxError(f"VERILOOP_SANDBOX=namespaces, but {why}")
    raise SandboxError(_REFUSED.format(why=why))


def _launchers() -> tuple[list[str], str]:
    """What can make the namespaces here, preferred first (bwrap's path; "" for unshare), and why bwrap is not
    among them."""
    bwrap = shutil.which("bwrap") or ""
    found = ([bwrap] if bwrap else []) + ([""] if shutil.which("unshare") else [])
    return found, "" if bwrap else "no bwrap command (Debian: bubblewrap): unshare makes the namespaces"


def _namespace_layers() -> tuple[Isolation | None, str]:
    """The strongest layers with namespaces that work here, or None and why there are none."""
    if not sys.platform.startswith("linux") or os.uname().machine not in PIVOT_ROOT:
        return None, f"no namespaces on {sys.platform}/{os.uname().machine}"
    launchers, why_no_bwrap = _launchers()
    if not launchers:
        return None, "no unshare command (util-linux) and no bwrap (Debian: bubblewrap)"
    cgroup = _pids_cgroup_root()
    library, why_no_seccomp = _seccomp_library()
    # the strongest first: the cgroup may refuse us, the filter may fail to load; for each, bwrap before unshare
    candidates = [
        Isolation(True, cg, "", lib, bwrap=launcher)
        for lib in dict.fromkeys([library, ""])
        for cg in dict.fromkeys([cgroup, ""])
        for launcher in launchers
    ]
    tried: dict[Isolation, str] = {}
    for candidate in candidates:
        ok, tried[candidate] = _works(candidate)
        if not ok:
            continue
        if library and not candidate.seccomp:  # the filter failed where the namespaces worked: say why
            why_no_seccomp = f"the seccomp filter failed to load: {tried[candidates[0]]}"
        if launchers[0] and not candidate.bwrap:  # bwrap is there but could not make them: say why
            failed = tried[dataclasses.replace(candidate, bwrap=launchers[0])]
            why_no_bwrap = f"bwrap could not make the namespaces here, so unshare does: {failed}"
        memory = _memory_cgroup_root()
        why_no_memory = "" if memory else "no memory cgroup this process may make"
        why = "; ".join(w for w in (why_no_bwrap, why_no_seccomp, why_no_memory) if w)
        return dataclasses.replace(candidate, why=why, memory_cgroup=memory), ""
    return None, f"namespaces unavailable: {tried[candidates[-1]]}"


def process_layers(why: str) -> Isolation:
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


def _works(candidate: Isolation) -> tuple[bool, str]:
    """Does a trivial program run, and print what it should, under ``candidate``?"""
    try:
        res = run_under(candidate, "print(sum(range(10)))", limits=SandboxLimits(wall_seconds=20))
    except (OSError, subprocess.SubprocessError, SandboxError) as e:  # SubprocessError: preexec_fn (the cgroup)
        return False, f"{type(e).__name__}: {e}"
    if res.status == "ok" and res.stdout.strip() == "45":
        return True, ""
    return False, f"{res.status} {res.detail}".strip()


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
        if base == "/sys/fs/cgroup" and controller not in read_text(os.path.join(base, "cgroup.subtree_control")):
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
