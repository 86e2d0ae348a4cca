"""Warm sandboxed interpreters (``sandbox/warm.py``): the same verdicts as a fresh sandboxed run, nothing of one
request in the next, an interpreter that ends is replaced, and nothing is left behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from veriloop.sandbox import SandboxLimits, isolation, run_program
from veriloop.sandbox.probe import probe_isolation
from veriloop.sandbox.warm import WarmInterpreter, WarmPool

pytestmark = pytest.mark.timeout(240)

# short limits: the endless programs wait them out, warm and fresh, under each isolation
LIMITS = SandboxLimits(wall_seconds=2, cpu_seconds=1, memory_mb=512, output_bytes=1 << 16)
# The unbounded allocation must end at the memory limit.  A memory cgroup's reclaim near its limit is charged to
# the program's CPU time, and twice in a full suite that reached the 1 s CPU limit first ('timeout', not 'crash'):
# that program alone gets CPU time to spare, so what ends it is the limit under test.
OWN_LIMITS = {"allocates without bound": dataclasses.replace(LIMITS, wall_seconds=6, cpu_seconds=5)}

# program: the outcome a fresh run gives it (and the warm one must give too)
PROGRAMS = {
    "prints": ("print(2 + 3)", "ok"),
    "imports a preloaded module": ("import math\nprint(math.sqrt(16))", "ok"),
    "imports another": ("import textwrap\nprint(textwrap.dedent('  a'))", "ok"),
    "prints to stderr": ("import sys\nprint('e', file=sys.stderr)\nprint('o')", "ok"),
    "writes inside": ("open('f.txt', 'w').write('hi')\nprint(open('f.txt').read())", "ok"),
    "raises": ("raise ValueError('boom')", "crash"),
    "exits non-zero": ("import sys\nsys.exit(3)", "crash"),
    "does not parse": ("def f(:\n    pass", "crash"),
    "reads the tests": ("print(open('/proc/self/cmdline').read())", "violation"),
    "reads the grader": ("import veriloop", "violation"),
    "lists the host": ("import os\nprint(os.listdir('/'))", "violation"),
    "writes outside": ("open('/tmp/veriloop-warm-pwned', 'w').write('x')", "violation"),
    "opens a socket": ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "violation"),
    "forks": ("import os\nwhile True:\n    os.fork()", "violation"),
    "runs a subprocess": ("import subprocess\nsubprocess.run(['sh', '-c', 'echo hi'])", "violation"),
    "uses ctypes": ("import ctypes\nctypes.CDLL(None).kill(1, 9)", "violation"),
    "kills its parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "violation"),
    "kills its group": ("import os, signal\nos.killpg(0, signal.SIGKILL)", "violation"),
    "walks the heap": ("import gc\nprint(len(gc.get_objects()))", "violation"),
    "allocates without bound": ("x = []\nwhile True:\n    x.append(' ' * 10**7)", "crash"),
    "loops forever": ("while True:\n    pass", "timeout"),
    "sleeps forever": ("import time\ntime.sleep(1000)", "timeout"),
    "prints without bound": ("while True:\n    print('x' * 100000)", "output_limit"),
}


MACHINE = isolation()
# the machine's isolation (bwrap makes the namespaces where it works here), unshare's fall-back, the process layer
ISOLATIONS = {
    "machine": MACHINE,
    "unshare": dataclasses.replace(MACHINE, bwrap=""),
    "process": probe_isolation("process"),
}
LAYER_MARKS = {
    "machine": pytest.mark.sandbox_layer("namespaces", "bwrap"),
    "unshare": pytest.mark.sandbox_layer("namespaces"),
    "process": pytest.mark.sandbox_layer("audit-hook"),
}
_POOLS: dict[str, WarmPool] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    for p in _POOLS.values():
        p.close()


@pytest.mark.sandbox_layer("audit-hook", "rlimits")
@pytest.mark.parametrize("under", [pytest.param(k, marks=m) for k, m in LAYER_MARKS.items()])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_warm_run_ends_as_a_fresh_run_does(name, under):
    program, outcome = PROGRAMS[name]
    iso, limits = ISOLATIONS[under], OWN_LIMITS.get(name, LIMITS)
    key = f"{under}/{name}" if name in OWN_LIMITS else under
    if key not in _POOLS:
        _POOLS[key] = WarmPool(limits, iso)
    warm, fresh = _POOLS[key].run(program), run_program(program, limits=limits, isolation_=iso)
    assert fresh.status == outcome, fresh
    assert (warm.status, warm.stdout) == (fresh.status, fresh.stdout), (warm, fresh)
    assert warm.layers == fresh.layers == iso.layers
    assert not Path("/tmp/veriloop-warm-pwned").exists()


def test_nothing_of_one_request_reaches_the_next():
    w = WarmInterpreter(LIMITS, isolation())
    try:
        pid = w.child.proc.pid
        leave = (
            "import math, builtins, os, sys, random\n"
            "math.pi = 3\n"
            "builtins.print = lambda *a, **k: None\n"
            "os.environ['LEFT'] = 'yes'\n"
            "sys.path.insert(0, '/nowhere')\n"
            "random.seed(7)\n"
            "open('left.txt', 'w').write('x')\n"
            "os.mkdir('left-dir')\n"
            "LEFT = 1\n"
        )
        assert w.run(leave).status == "ok"
        check = (
            "import math, os, sys\n"
            "print(math.pi, os.environ.get('LEFT'), '/nowhere' in sys.path, sorted(os.listdir('.')),\n"
            "      'LEFT' in globals())\n"
        )
        r = w.run(check)
        assert r.status == "ok", r
        assert r.stdout == "3.141592653589793 None False [] False\n"
        # the same interpreter served both (nothing was replaced)
        assert w.alive and w.child.proc.pid == pid and w.runs == 2
        # each child's random stream is seeded afresh (random reseeds at fork), as each fresh process's is: two
        # children of the same copy do not draw the same numbers, and a seed set in one is not the next one's
        draw = "import random\nprint(random.random())"
        draws = {w.run(draw).stdout for _ in range(3)}
        assert len(draws) == 3 and w.run("import random\nrandom.seed(7)\nprint(random.random())").stdout not in draws
    finally:
        w.close()


def test_a_timeout_ends_the_program_not_the_interpreter():
    w = WarmInterpreter(SandboxLimits(wall_seconds=1, cpu_seconds=3, memory_mb=512), isolation())
    try:
        assert w.run("import time\ntime.sleep(100)").status == "timeout"
        assert w.run("while True:\n    pass").status == "timeout"
        assert w.run("x = [0] * 10**9").status == "crash"  # its address space limit, not the interpreter's end
        started = time.monotonic()
        r = w.run("print('after')")
        assert (r.status, r.stdout, w.alive, w.runs) == ("ok", "after\n", True, 4)
        assert time.monotonic() - started < 1.0
    finally:
        w.close()


def test_an_interpreter_that_ended_is_replaced_and_the_request_runs():
    pool = WarmPool(LIMITS)
    try:
        assert pool.run("print(1)").stdout == "1\n"
        (first,) = pool.idle
        os.killpg(first.child.proc.pid, signal.SIGKILL)  # ended while idle (its memory, say)
        first.child.proc.wait(timeout=10)
        assert pool.run("print(2)").stdout == "2\n"
        assert (pool.started, pool.replaced) == (2, 1) and pool.idle[0] is not first
    finally:
        pool.close()


def test_an_interpreter_near_its_cpu_limit_retires_before_running_anything():
    w = WarmInterpreter(LIMITS, isolation(), retire_cpu_seconds=0.0)
    try:
        assert w.run("print(1)") is None and not w.alive
    finally:
        w.close()


def test_closing_leaves_no_directory_and_no_process(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pool = WarmPool(LIMITS)
    assert pool.run("open('x.txt', 'w').write('x' * 1000)\nprint(1)").status == "ok"
    assert pool.run("import time\ntime.sleep(100)").status == "timeout"
    procs = [w.child.proc for w in pool.idle]
    assert list(tmp_path.glob("veriloop-sandbox-*"))
    pool.close()
    assert not list(tmp_path.glob("veriloop-sandbox-*"))
    assert all(p.poll() is not None for p in procs)


@pytest.mark.parametrize("interpreter", ["warm", "fresh"])
def test_tool_blocks_show_the_same_output_either_way(interpreter):
    from veriloop.tasks.base import ToolFormat
    from veriloop.verifiers.tools import ToolSettings, run_block

    fmt = ToolFormat("t", "<code>", "</code>", "<out>", "</out>")
    settings = ToolSettings(fmt, run_block, wall_seconds=4.0, interpreter=interpreter)
    assert run_block(["a = 2 + 3\nprint('hidden')"], "a * 2", settings)[:2] == ("ok", "10")
    assert run_block([], "1 / 0", settings)[:2] == ("crash", "crash: ZeroDivisionError: division by zero")
    assert run_block([], "import os\nos.listdir('/')", settings)[0] == "violation"


def test_an_interpreter_killed_while_it_runs_a_program_takes_the_program_with_it():
    """Under the process layer (no pid namespace to end with it) too: the program dies with its interpreter."""
    import threading

    w = WarmInterpreter(SandboxLimits(wall_seconds=60, cpu_seconds=3, memory_mb=512), ISOLATIONS["process"])
    got = []
    t = threading.Thread(target=lambda: got.append(w.run("import time\ntime.sleep(60)")), daemon=True)
    t.start()
    zygote = w.child.proc.pid
    children: list[int] = []
    deadline = time.monotonic() + 10
    while not children and time.monotonic() < deadline:
        for task in Path(f"/proc/{zygote}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
        time.sleep(0.01)
    assert children, "the program never started"
    os.killpg(zygote, signal.SIGKILL)
    t.join(timeout=10)
    assert got and got[0].status == "crash" and not w.alive, got
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{c}").exists() and _state(c) != "Z" for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(not Path(f"/proc/{c}").exists() or _state(c) == "Z" for c in children)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_leftover_run_cgroups_are_swept_once_per_process(tmp_path):
    """A process killed before removing its runs' cgroups (or a warm pool whose process ended without its exit
    handlers) leaves them empty; the next process that starts a run removes those older than the bound, never a
    young one (a run being set up) nor one that holds something (the kernel refuses: here a file stands in)."""
    from veriloop.sandbox.layers import _CgroupReaper

    old, young, busy = (tmp_path / n for n in ("old", "young", "busy"))
    for d in (old, young, busy):
        d.mkdir()
    (busy / "cgroup.procs").write_text("123")
    past = time.time() - 3600
    for d in (old, busy):
        os.utime(d, (past, past))
    reaper = _CgroupReaper()
    reaper.sweep_once((str(tmp_path), ""))
    assert (not old.exists(), young.exists(), busy.exists()) == (True, True, True)
    young.rmdir()
    os.utime(tmp_path, (past, past))
    (tmp_path / "later").mkdir()
    os.utime(tmp_path / "later", (past, past))
    reaper.sweep_once((str(tmp_path),))  # once per process: a second call does nothing
    assert (tmp_path / "later").exists()
