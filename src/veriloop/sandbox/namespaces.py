"""How a run's namespaces and its view of the file system are made: the command that starts the harness in them,
and the ``view`` of its bundle (what the harness still has to do).

Two ways, the same namespaces (user, mount, pid, net, ipc, uts; the run's user root in them) and the same view: a
fresh tmpfs (``<the run's directory>/root``) that becomes ``/`` by ``pivot_root``, the ``view_paths`` bound
read-only at their own paths in it, the run's directory a size-limited tmpfs, no capability.  Either way the
interpreter starts on the host's file system (its start-up reads what it reads anywhere: its ``.pth`` files, the
C library's configuration), and the program only ever sees the view.

* **bubblewrap** (``bwrap``, Debian's ``bubblewrap``), where it is installed and can make the namespaces here
  (``probe.py`` tries it first): bwrap makes the namespaces, the host's ``/`` read-only as the interpreter's root
  while it starts, a procfs of the run's pid namespace on ``/proc``, and the view: its tmpfs, the read-only binds
  (the device files bound with their device) and the run directory's mount point.  It starts the interpreter with
  CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_NET_ADMIN and CAP_SETPCAP in the namespace, no other capability.  The
  harness then sets the namespace's counts, takes down the loopback device bwrap brought up, makes the device
  files read-only, mounts the run's tmpfs, moves into the view and drops every capability (``_enter_view``).
* **unshare** (util-linux), the fall-back where bwrap is missing or cannot make the namespaces here: it makes the
  namespaces and starts the interpreter as root in them; the harness makes the view itself (the tmpfs, the binds)
  and all the rest (``_enter_view``).

The seccomp filter is loaded by the harness last, after the view is made and the capabilities dropped.
"""

from __future__ import annotations

import os

from veriloop.sandbox.layers import USER_NAMESPACE_LIMITS, Isolation, view_paths
from veriloop.sandbox.limits import SandboxLimits

PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers: the machines the namespaces are made on
UNSHARE = ["--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]
BWRAP = [
    *("--unshare-user", "--uid", "0", "--gid", "0"),
    *("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"),
    "--die-with-parent",
    *("--cap-drop", "ALL"),
    # what the harness needs for its last steps (mounts, the namespace's counts, the loopback device down, dropping
    # the bounding set); it then drops them all
    *("--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SYS_RESOURCE", "--cap-add", "CAP_NET_ADMIN"),
    *("--cap-add", "CAP_SETPCAP"),
    *("--ro-bind", "/", "/", "--proc", "/proc"),
]
VIEW_ROOT = "size=64k,mode=755"  # the view's own tmpfs (read-only once the view is made)


def launcher(iso: Isolation, base: str, workdir: str, limits: SandboxLimits) -> tuple[list[str], dict]:
    """What starts the interpreter in the run's namespaces (the command before ``python``), and the bundle's
    ``view``.  ``base``: the run's own temporary directory; ``workdir``: the run's directory in it."""
    root = os.path.join(os.path.realpath(base), "root")
    os.mkdir(root, 0o700)
    view = {
        "root": root,
        "work": workdir,
        "read_only": view_paths(),
        "pivot_root": PIVOT_ROOT[os.uname().machine],
        "scratch": f"size={limits.disk_bytes},nr_inodes={limits.disk_files},mode=700",
        "user_limits": USER_NAMESPACE_LIMITS,
    }
    if iso.bwrap:
        view["bwrap"] = True
        return _bwrap(iso.bwrap, view), view
    view["view_root"] = VIEW_ROOT
    return ["unshare", *UNSHARE], view


def _bwrap(bwrap: str, view: dict) -> list[str]:
    """bwrap's command: the namespaces, and the view made at ``view["root"]`` (the harness moves into it)."""
    root = view["root"]
    argv = [bwrap, *BWRAP, "--size", str(64 << 10), "--perms", "0755", "--tmpfs", root]
    for path in view["read_only"]:  # the device files with their device: the harness makes them read-only
        argv += ["--dev-bind" if path.startswith("/dev/") else "--ro-bind", path, root + path]
    return [*argv, "--dir", root + view["work"], "--chdir", view["work"], "--"]
