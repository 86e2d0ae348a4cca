"""The sandbox's kernel layer (issue 17): each claim tested with the process layer's audit hook switched off, so
that what stops the act is the kernel.  Each test names the layers it exercises (``sandbox_layer``): where the machine
lacks one, tests/sandbox_layers_plugin.py skips it, saying which and why, and the run's summary line counts it.

Each test of the kernel layer runs twice (issue 40): with the namespaces and the view made by bubblewrap (the
``bwrap`` layer, where it is installed and works here), and with the unshare fall-back, forced."""

import dataclasses
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from veriloop.sandbox import Isolation, SandboxError, SandboxLimits, isolation, namespaces, probe, run_program
from veriloop.sandbox.layers import view_paths
from veriloop.sandbox.probe import probe_isolation

pytestmark = pytest.mark.timeout(300)  # every run is a sandboxed process with its own wall-clock limit

MACHINE = ISO = isolation()  # ISO: the isolation a test runs under (a kernel test's launcher's)
LAUNCHERS = [pytest.param("bwrap", marks=pytest.mark.sandbox_layer("bwrap")), "unshare"]
seccomp = pytest.mark.sandbox_layer("seccomp")


def kernel(test):
    """A test of the kernel layer, once per way the namespaces are made (``launcher``)."""
    return pytest.mark.sandbox_layer("namespaces")(pytest.mark.parametrize("launcher", LAUNCHERS, indirect=True)(test))


@pytest.fixture(autouse=True)
def launcher(request, monkeypatch):
    """In a kernel test, ``ISO`` and what ``run_program`` runs under by default are this machine's isolation with
    the namespaces made by bwrap, or by unshare even where bwrap is there (the fall-back)."""
    which = getattr(request, "param", None)
    if which is not None:
        iso = dataclasses.replace(MACHINE, bwrap=MACHINE.bwrap if which == "bwrap" else "")
        assert (which == "bwrap") == bool(iso.bwrap), iso  # where there is no bwrap, the plugin skips the test
        monkeypatch.setattr(probe, "_ISOLATION", iso)
        monkeypatch.setitem(globals(), "ISO", iso)
    return which


LIMITS = SandboxLimits(wall_seconds=8, cpu_seconds=4)


def bare(program: str, **kw):
    """A run with the kernel layer only (no audit hook)."""
    return run_program(program, limits=LIMITS, audit_hook=False, **kw)


@kernel
def test_a_read_outside_the_run_directory_finds_nothing(tmp_path):
    secret = tmp_path / "secret.txt"  # under /tmp, like the run's own directory
    secret.write_text("grader-only")
    for path in (str(secret), __file__, "/etc/hostname", "/proc/self/cmdline", str(Path.home())):
        res = bare(f"print(open({path!r}).read())")
        assert res.status == "crash" and ("FileNotFoundError" in res.detail or "IsADirectoryError" in res.detail), (
            path,
            res,
        )
    res = bare("import os\nprint(sorted(os.listdir('/')))")
    assert res.status == "ok", res
    # the top of the view is where the bound paths start (the interpreter's prefixes lie wherever the checkout is:
    # /work/..., /check/..., /opt/...), plus the run's own directory under /tmp
    tops = {Path(p).parts[1] for p in view_paths()} | {"dev", "tmp"}
    assert set(eval(res.stdout)) <= tops, (res.stdout, tops)
    assert "etc" not in eval(res.stdout) and "proc" not in eval(res.stdout), res.stdout
    assert "secret.txt" not in bare(f"import os\nprint(os.listdir({str(tmp_path)!r}))").stdout


@kernel
def test_nothing_outside_the_run_directory_can_be_written(tmp_path):
    res = bare(f"open({str(tmp_path / 'pwned')!r}, 'w').write('x')")
    assert res.status == "crash" and not (tmp_path / "pwned").exists(), res
    res = bare(f"open({sys.prefix + '/pwned'!r}, 'w').write('x')")
    assert res.status == "crash" and "Read-only file system" in res.detail, res
    assert not Path(sys.prefix, "pwned").exists()
    assert bare("open('scratch', 'w').write('x')\nprint(open('scratch').read())").stdout == "x\n"  # its own is fine


@kernel
@pytest.mark.parametrize("layer", ["network namespace", pytest.param("seccomp filter", marks=seccomp)])
def test_a_connection_to_the_host_fails(layer):
    # the namespace alone: a socket, but no device that reaches the host; the filter: no AF_INET socket at all
    iso = ISO if layer == "seccomp filter" else Isolation(True, ISO.pids_cgroup, "", "", bwrap=ISO.bwrap)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    t.start()
    res = run_program(
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')",
        limits=LIMITS,
        audit_hook=False,
        isolation_=iso,
    )
    t.join(timeout=5)
    server.close()
    assert res.status == "crash" and "connected" not in res.stdout, res
    why = "Operation not permitted" if layer == "seccomp filter" else "unreachable"
    assert why in res.detail, res
    assert accepted == [None]  # nothing reached the server


def _accept(server):
    try:
        return server.accept()
    except OSError:
        return None


# without the pids cgroup, a fork bomb without the audit hook would be bounded by the wall-clock limit only
@kernel
@pytest.mark.sandbox_layer("pids-cgroup")
def test_a_fork_bomb_is_bounded_and_leaves_nothing(monkeypatch):
    import veriloop.sandbox.supervisor as supervisor

    made = []  # the cgroups of this run (other processes' sandboxes, warm interpreters among them, live on)

    def recorded(*args):
        groups = real(*args)
        made.extend(g for g in groups if g)
        return groups

    real = supervisor.run_cgroups
    monkeypatch.setattr(supervisor, "run_cgroups", recorded)
    start = time.monotonic()
    res = bare("import os\nwhile True:\n    os.fork()")
    assert res.status in ("crash", "timeout") and time.monotonic() - start < LIMITS.wall_seconds + 5, res
    assert "Resource temporarily unavailable" in res.detail, res  # fork failed at pids.max
    # the run's cgroups are removed in the background: gone within seconds
    left = {Path(p) for p in made}
    assert any(p.parent == Path(ISO.pids_cgroup) for p in left), made
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if p.exists()}
    # ...and a cgroup is removable only once no process is left in it: every process of the bomb is gone (a count
    # of the machine's processes would see the other test files' runs)
    assert not left


@kernel
def test_no_other_program_can_be_started():
    res = bare("import subprocess\nsubprocess.run(['sh', '-c', 'echo hi'])")
    # no sh in the view; and where the filter is loaded, execve itself is refused
    assert res.status == "crash" and ("PermissionError" if ISO.seccomp else "FileNotFoundError") in res.detail, res


def test_the_layers_are_recorded_in_every_verdict_and_in_the_audit():
    from veriloop.verifiers import get

    v = get("code", workers=1).verify("def add(a, b):\n    return a + b", "assert add(1, 2) == 3")
    assert v.outcome == "pass" and f"sandbox: {ISO.layers}" in v.details, v
    assert ISO.layers.endswith("rlimits+audit-hook")
    out = subprocess.run(
        [sys.executable, "-m", "veriloop.cli", "audit", "code"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and f"sandbox layers: {ISO.layers}" in out.stdout, out.stdout[-500:]


@pytest.mark.sandbox_layer("audit-hook")
def test_the_process_layer_is_the_fallback():
    process = probe_isolation("process")  # every layer short of namespaces that works here
    assert not process.namespaces and process.layers.endswith("rlimits+audit-hook")
    assert ("seccomp" in process.layers) == bool(ISO.seccomp), process
    res = run_program("print(6 * 7)", isolation_=process)
    assert (res.status, res.stdout, res.layers) == ("ok", "42\n", process.layers)
    res = run_program("print(open('/etc/hostname').read())", isolation_=process)
    assert res.status == "violation", res  # the audit hook alone stops it there
    with pytest.raises(ValueError, match="VERILOOP_SANDBOX"):
        probe_isolation("container")


@pytest.mark.sandbox_layer("audit-hook")
def test_the_hostile_suite_holds_under_every_layer():
    """The process layer's own guarantees hold with the kernel layer under it (its messages are the hook's)."""
    for program, status in [
        ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "violation"),
        ("import os\nos.fork()", "violation"),
        ("import ctypes", "violation"),
        ("print(open('/etc/hostname').read())", "violation"),
    ]:
        assert run_program(program, limits=LIMITS).status == status, program


@kernel
def test_the_run_holds_no_capability_in_its_namespaces():
    for program in (
        "import os\nos.chroot('.')",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_RAW, 1)",
        "import os\nos.mknod('dev', 0o600 | 0o020000, os.makedev(1, 3))",
    ):
        res = bare(program)
        assert res.status == "crash" and "PermissionError" in res.detail, (program, res)


@kernel
def test_a_view_that_cannot_be_set_up_is_an_error_never_a_score(monkeypatch):
    monkeypatch.setattr(namespaces, "view_paths", lambda: ("/nonexistent-veriloop-path",))
    with pytest.raises(SandboxError, match="could not be set up"):
        run_program("print(1)", isolation_=Isolation(True, "", bwrap=ISO.bwrap))


# Each of these succeeds in the namespaces alone (PTRACE_TRACEME, an AF_INET socket with no device to reach): the
# filter is what refuses them.  A nested user namespace is refused by both (the run's namespace counts are 0).
FILTERED = {
    "unshare(CLONE_NEWUSER)": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.unshare(0x10000000), ctypes.get_errno())",
    "ptrace(PTRACE_TRACEME)": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())",
    "socket(AF_INET)": "import socket, errno\ntry:\n    socket.socket()\n    print(0, 0)\n"
    "except OSError as e:\n    print(-1, e.errno)",
}


@kernel
@seccomp
def test_the_seccomp_filter_refuses_what_the_namespaces_allow():
    unfiltered = Isolation(True, ISO.pids_cgroup, "", "", bwrap=ISO.bwrap)
    for what, program in FILTERED.items():
        assert bare(program).stdout == "-1 1\n", what  # EPERM
        res = run_program(program, limits=LIMITS, audit_hook=False, isolation_=unfiltered)
        if what.startswith("unshare"):  # without the filter, the run's user-namespace count (0) refuses it
            assert res.stdout == "-1 28\n", (what, res)  # ENOSPC
            continue
        assert res.stdout.split()[:1] == ["0"], (what, res)  # succeeded
    # what a program needs still works: threads (clone3 refused with ENOSYS, so glibc falls back to clone), a fork,
    # a Unix socket pair
    res = bare(
        "import os, socket, threading\nr = []\nt = threading.Thread(target=lambda: r.append(1))\nt.start()\n"
        "t.join()\npid = os.fork()\nif pid == 0:\n    os._exit(3)\na, b = socket.socketpair()\na.send(b'x')\n"
        "print(r, os.waitpid(pid, 0)[1] >> 8, b.recv(1))"
    )
    assert (res.status, res.stdout) == ("ok", "[1] 3 b'x'\n"), res
    assert "seccomp" in ISO.layers and "seccomp filter (libseccomp)" in ISO.describe()


@seccomp
def test_without_namespaces_the_filter_still_applies():
    """A container that refuses user namespaces still gets the filter under the process layer."""
    alone = Isolation(False, "", "", ISO.seccomp)
    assert alone.layers == "seccomp+rlimits+audit-hook"
    for what, program in FILTERED.items():
        res = run_program(program, limits=LIMITS, audit_hook=False, isolation_=alone)
        assert res.stdout == "-1 1\n", (what, res)


@pytest.mark.sandbox_layer("namespaces")  # the machine's probe, whichever way it makes the namespaces
def test_a_filter_that_cannot_load_is_dropped_and_said(monkeypatch):
    monkeypatch.setattr(probe, "_seccomp_library", lambda: ("libveriloop-no-such-seccomp.so", ""))
    iso = probe_isolation("auto")
    assert iso.namespaces and not iso.seccomp and "seccomp" not in iso.layers
    assert "seccomp filter failed to load" in iso.why and "libveriloop-no-such-seccomp" in iso.why, iso
    monkeypatch.setattr(probe, "_seccomp_library", lambda: ("", "libseccomp is not installed"))
    why = probe_isolation("auto").why.split("; ")
    assert [w for w in why if "bwrap" not in w] == ["libseccomp is not installed"], why  # and bwrap's, if missing


# The view, as the program sees it: every entry outside the bound directories (the run's own name made equal), its
# module search path and the directories it has looked in, where it is, whether "/" is read-only, its environment,
# who it is, and what a connection to the loopback address meets.
VIEW = """
import os, pwd, socket, sys
run = os.path.dirname(os.getcwd())
def tree(path):
    out = []
    for e in sorted(os.scandir(path), key=lambda e: e.name):
        out.append((e.path.replace(run, "<run>"), e.is_dir(follow_symlinks=False), e.is_symlink()))
        if e.is_dir(follow_symlinks=False) and not os.path.ismount(e.path):
            out += tree(e.path)
    return out
cache = sorted(k for k, v in sys.path_importer_cache.items() if v is not None)
try:
    socket.create_connection(("127.0.0.1", 9), timeout=2)
except OSError as e:
    net = repr(e)
me = tuple(pwd.getpwuid(os.getuid()))
print(repr((tree("/"), sys.path, cache, os.getcwd().replace(run, "<run>"), os.statvfs("/").f_flag & 1,
            dict(os.environ), me, net)))
"""


@pytest.mark.sandbox_layer("namespaces", "bwrap")
def test_bwrap_and_the_unshare_fall_back_give_a_program_the_same_view():
    """bwrap makes the view before the interpreter starts (on the host's file system, read-only), unshare after it
    started (the harness makes it); either way the harness then moves into it.  The program cannot tell them apart."""
    seen = {}
    for name, iso in (("bwrap", MACHINE), ("unshare", dataclasses.replace(MACHINE, bwrap=""))):
        unfiltered = dataclasses.replace(iso, seccomp="")  # a socket, to see what the network namespace has
        res = run_program(VIEW, limits=LIMITS, audit_hook=False, isolation_=unfiltered)
        assert res.status == "ok" and res.layers == unfiltered.layers, (name, res)
        seen[name] = eval(res.stdout)
    assert seen["bwrap"] == seen["unshare"]
    assert "unreachable" in seen["bwrap"][-1], seen["bwrap"][-1]


@pytest.mark.sandbox_layer("namespaces")
def test_where_bwrap_cannot_make_the_namespaces_unshare_does_and_the_probe_says_why(tmp_path, monkeypatch):
    """A bwrap that fails (a container that refuses it, say) or none at all: the probe falls back to unshare with
    every other layer it had, and ``why`` says what happened to bwrap."""
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    which = shutil.which
    monkeypatch.setattr(probe.shutil, "which", lambda name: str(broken) if name == "bwrap" else which(name))
    iso = probe_isolation("auto")
    assert iso.namespaces and not iso.bwrap and "bwrap" not in iso.layers, iso
    assert iso.layers == dataclasses.replace(MACHINE, bwrap="").layers  # nothing else lost
    assert "bwrap could not make the namespaces here, so unshare does" in iso.why, iso
    assert "the sandbox could not be set up: bwrap: No permissions to create new namespace" in iso.why, iso
    assert "made by util-linux's unshare" in iso.describe()
    assert run_program("print(6 * 7)", isolation_=iso).stdout == "42\n"
    monkeypatch.setattr(probe.shutil, "which", lambda name: None if name == "bwrap" else which(name))
    iso = probe_isolation("auto")
    assert not iso.bwrap and "no bwrap command (Debian: bubblewrap)" in iso.why, iso
