"""Red team, round 3 (issue 37): submissions that try to forge the grader's verdict or harm the grader.

Each test is a hostile submission of one class the issue names; each failed before its fix.  Beside
them, the honest twin of each passes, so a fix that rejects honest programs fails here too.  Every
submission runs under the code verifier's wall-clock limit, so a hang fails instead of blocking.
"""

import pytest

from veriloop.verifiers import get

LIMIT_S = 4.0
AREA_TESTS = "assert abs(area(2, 3) - 6) < 1e-9\nassert abs(area(1.5, 2) - 3) < 1e-9"
HONEST_AREA = "def area(w, h):\n    return w * h\n"


@pytest.fixture(scope="module")
def code():
    return get("code", wall_seconds=LIMIT_S, cpu_seconds=2, memory_mb=512, output_bytes=100_000, workers=2)


# A name the harness reports for the program is a str subclass whose startswith() says it is no dunder
# and whose repr() says "__builtins__": the grader used to bind "__builtins__" to a proxy of the program's
# dict, so every builtin the tests call (abs, range, zip, all ...) was the program's.
FORGED_BUILTINS = """
class Name(str):
    def startswith(self, *a):
        return False
    def __repr__(self):
        return "'__builtins__'"
class Builtins(dict):
    pass
fake = Builtins(abs=lambda x: 0, range=lambda *a: [], zip=lambda *a: [], all=lambda *a: True,
                len=lambda x: 0, map=lambda *a: [1], AssertionError=AssertionError)
globals()[Name("zzz")] = fake
def area(w, h):
    return -1
"""


def test_the_program_cannot_become_the_tests_builtins(code):
    assert code.verify(HONEST_AREA, AREA_TESTS).score == 1.0
    v = code.verify(FORGED_BUILTINS, AREA_TESTS)
    assert (v.score, v.outcome) == (0.0, "fail"), v
    loops = "total = 0\nfor i in range(3):\n    total += area(i, 1)\nassert total == 3\nassert all(map(area, [1], [1]))"
    assert code.verify(HONEST_AREA, loops).score == 1.0
    assert code.verify(FORGED_BUILTINS, loops).score == 0.0


# The grader imported every standard module the program named: "this" prints the Zen into the
# grader's output, "antigravity" opens a web browser, "venv.__main__" exits the grader.
@pytest.mark.parametrize("module", ["this", "venv.__main__"])
def test_the_grader_imports_nothing_the_program_names(code, module, capfd):
    program = f"import types\nm = types.ModuleType({module!r})\n" + HONEST_AREA
    v = code.verify(program, AREA_TESTS)
    out, err = capfd.readouterr()
    assert "Beautiful is better than ugly" not in out + err
    assert v.score == 1.0, v  # the program is right; its module object is simply not the tests' business


def test_the_tests_module_is_the_graders_own_import(code):
    # an ordinary module the program imported stays usable by the tests, as the grader's own import
    program = "import math\ndef half(x):\n    return x / 2\n"
    assert code.verify(program, "assert math.isclose(half(3), 1.5)").score == 1.0


# The program reads its harness's token from the stack and writes a "setup failed" line on the control
# pipe: the supervisor raised SandboxError and the whole batch stopped.
FORGED_SETUP = """
import os, sys
frame = sys._getframe(1)
token = frame.f_locals["token"]
os.write(int(sys.argv[2]), (token + " SETUP OSError: forged\\n").encode())
def area(w, h):
    return w * h
"""


def test_a_forged_setup_report_is_that_submissions_verdict(code):
    verdicts = code.verify_batch([FORGED_SETUP, HONEST_AREA], [AREA_TESTS, AREA_TESTS])
    assert verdicts[0].score == 0.0 and verdicts[0].outcome != "pass", verdicts[0]
    assert "forged" in verdicts[0].details or "protocol" in verdicts[0].details, verdicts[0]
    assert verdicts[1].score == 1.0, verdicts[1]  # the batch goes on


@pytest.mark.parametrize("status", [160, 193, 255])
def test_an_exit_status_that_looks_like_a_signal_is_a_crash(code, status):
    v = code.verify(f"import os\nos._exit({status})\n", AREA_TESTS)
    assert (v.score, v.outcome) == (0.0, "crash"), v
    stdio = '[{"input": "", "output": "1\\n"}]'
    v = code.verify(f"import os\nprint(1, flush=True)\nos._exit({status})\n", stdio)
    assert v.score == 0.0 and v.outcome == "crash", v


def test_the_tests_namespace_is_the_graders_whatever_names_the_program_reports():
    import builtins
    import math

    from veriloop.sandbox.grader import test_namespace

    names = [
        ("__builtins__", ("object", "Builtins")),
        ("abs", ("object", "function")),
        ("x y", ("value", 1)),
        ("this", ("module", "this")),
        ("math", ("module", "math")),
        ("venv", ("module", "venv.__main__")),
        ("class", ("value", 2)),
        ("N", ("value", 5)),
        ("f", ("object", "function")),
        ("g", ("weird", 0)),
    ]
    namespace = test_namespace(None, names)
    assert namespace["__builtins__"] is builtins and namespace["math"] is math and namespace["N"] == 5
    assert set(namespace) == {"__builtins__", "__name__", "math", "N", "f"}


# Found by reading the code: resuming loaded rng.pt and critic.pt with a full unpickle, so someone else's run
# directory could run code on resume.
class _Boom:
    def __reduce__(self):
        import os

        return (os.system, ("touch boom-from-a-checkpoint",))


@pytest.mark.parametrize("name", ["rng.pt", "critic.pt"])
def test_a_run_directory_is_read_as_data_only(tmp_path, monkeypatch, name):
    import json

    import torch

    from veriloop.errors import InputError
    from veriloop.training.run.checkpoint import load_checkpoint

    monkeypatch.chdir(tmp_path)
    step = tmp_path / "step-1"
    step.mkdir()
    (step / "trainer_state.json").write_text(json.dumps({"step": 1}))
    torch.save({"torch": torch.get_rng_state(), "python": __import__("random").getstate()}, step / "rng.pt")
    torch.save({"weight": torch.zeros(2)}, step / "critic.pt")
    critic = torch.nn.Module()
    critic.weight = torch.nn.Parameter(torch.ones(2))
    learner = type(
        "Learner",
        (),
        {
            "critic": critic,
            "load": lambda self, path: None,
            "load_critic_state_dict": lambda self, s: critic.load_state_dict(s),
        },
    )()
    load_checkpoint(step, learner)  # an honest checkpoint loads
    assert critic.weight.sum().item() == 0.0
    torch.save(
        {"torch": torch.get_rng_state(), "python": _Boom()} if name == "rng.pt" else {"weight": _Boom()}, step / name
    )
    with pytest.raises(InputError, match=rf"{name} holds more than tensors and plain values"):
        load_checkpoint(step, learner)
    assert not (tmp_path / "boom-from-a-checkpoint").exists()


# Nothing tied a sandboxed program's life to its grader's: a SIGKILLed grader left it running.
GRADER = """
import time
from veriloop.sandbox import SandboxLimits, isolation
from veriloop.sandbox.supervisor import Child
child = Child("import time\\ntime.sleep(60)", "run", SandboxLimits(wall_seconds=120, cpu_seconds=100), "", isolation())
print(child.proc.pid, child.cgroup or "-", child.memory or "-", flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_the_sandboxed_program_dies_with_its_grader():
    import os
    import signal
    import subprocess
    import sys
    import time

    grader = subprocess.Popen([sys.executable, "-c", GRADER], stdout=subprocess.PIPE, text=True)
    groups = []
    try:
        pid, *groups = grader.stdout.readline().split()
        groups = [g for g in groups if g != "-"]
        cgroup = groups[0] if groups and "pids" in groups[0] else ""
        time.sleep(1.0)  # the program is running
        assert _running(int(pid))
        os.kill(grader.pid, signal.SIGKILL)
        grader.wait(timeout=10)
        deadline = time.monotonic() + 10
        procs = os.path.join(cgroup, "cgroup.procs") if cgroup else ""
        while time.monotonic() < deadline and (_running(int(pid)) or (procs and open(procs).read().strip())):
            time.sleep(0.1)
        assert not _running(int(pid)), "the sandbox outlived its grader"
        if procs:
            assert not open(procs).read().strip(), "a process of the run outlived its grader"
    finally:
        grader.kill()
        for group in groups:  # what the killed grader's reaper would have removed
            if not os.path.isdir(group):
                continue
            for left in open(os.path.join(group, "cgroup.procs")).read().split():
                os.kill(int(left), signal.SIGKILL)
            for _ in range(50):
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.1)


# Fall-back mode (process layers only): the audit hook resolved a relative path against the run's directory,
# not the real working directory, so os.chdir into a readable directory and a relative write escaped it.
ESCAPE = """
import os
os.chdir(os.path.dirname(os.__file__))
with open("veriloop-red-team-probe.txt", "w") as fh:
    fh.write("escaped")
"""


@pytest.mark.sandbox_layer("audit-hook")
def test_the_audit_hook_resolves_relative_paths_where_the_process_is():
    import os

    from veriloop.sandbox import Isolation, run_program

    probe = os.path.join(os.path.dirname(os.__file__), "veriloop-red-team-probe.txt")
    try:
        res = run_program(ESCAPE, isolation_=Isolation(False, "", "", ""))
        assert res.status == "violation" and "write outside the working directory" in res.detail, res
        assert not os.path.exists(probe)
        honest = run_program(
            'with open("notes.txt", "w") as fh:\n    fh.write("x")\nprint(open("notes.txt").read())',
            isolation_=Isolation(False, "", "", ""),
        )
        assert (honest.status, honest.stdout) == ("ok", "x\n"), honest
    finally:
        if os.path.exists(probe):
            os.remove(probe)


# Honest programs rejected: in the namespaces mode /dev/null and /dev/urandom could not be opened (a device
# file bound with nodev), and the audit hook refused a write to /dev/null.
DEVICES = """
import os
with open("/dev/null", "w") as fh:
    fh.write("discarded")
print(len(open("/dev/urandom", "rb").read(4)), len(open("/dev/zero", "rb").read(3)), len(os.urandom(5)))
"""


def test_the_device_files_a_program_may_use_work():
    from veriloop.sandbox import Isolation, run_program

    for iso in (None, Isolation(False, "", "", "")):
        res = run_program(DEVICES, isolation_=iso)
        assert (res.status, res.stdout) == ("ok", "4 3 5\n"), res
    res = run_program('open("/dev/zero", "w").write("x")')
    assert res.status == "violation", res  # only /dev/null takes writes


# Exhaustion: a normal-looking answer of 1.3 million values took the grader from 24 MB to 1.24 GB (a parse
# node per value); a flood of lines on the control pipe cost it seconds and memory.
# the peak is VmHWM of this process's own memory map (ru_maxrss would count the forking test worker's pages)
MEMORY_PROBE = """
import re, sys
from veriloop.sandbox import SandboxLimits, parse_tests, run_tests
run = run_tests(sys.argv[1], parse_tests(sys.argv[2]), SandboxLimits(wall_seconds=20, cpu_seconds=10, memory_mb=1024))
peak_kb = int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1))
print(run.status, run.passed, peak_kb // 1024, run.detail)
"""
FLOOD = """
import os, sys
def f():
    line = b"x" * 1000 + b"\\n"
    for _ in range(50000):
        os.write(int(sys.argv[2]), line)
    return 1
"""


@pytest.mark.parametrize(
    "program, tests, says",
    [
        ("def f():\n    return [0] * 300000\n", "assert f() == []", "an answer of over 100000 values"),
        ("def f():\n    return [0] * 1300000\n", "assert f() == []", "an answer over 1048576 bytes"),
        ("def f():\n    return 'x' * 3000000\n", "assert f() == ''", "an answer over 1048576 bytes"),
        (FLOOD, "assert f() == 1", "flooded the control pipe"),
    ],
    ids=["many-values", "1.3-million-values", "long-string", "flood"],
)
def test_an_answer_too_large_is_that_submissions_crash_and_costs_the_grader_little(program, tests, says):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, program, tests], capture_output=True, text=True, timeout=60
    ).stdout.split(maxsplit=3)
    status, passed, peak_mb, detail = out[0], int(out[1]), int(out[2]), out[3]
    assert (status, passed) == ("crash", 0) and says in detail, out
    assert peak_mb < 300, f"the grader peaked at {peak_mb} MB"


def test_an_honest_answer_of_many_values_still_passes(code):
    v = code.verify(
        "def squares(n):\n    return [i * i for i in range(n)]\n",
        "assert squares(50000)[-1] == 49999 ** 2\nassert len(squares(50000)) == 50000",
    )
    assert v.score == 1.0, v


# Fall-back modes were silent: where the kernel layer was missing, untrusted code ran under the process layers.
def test_without_the_kernel_layer_untrusted_code_is_refused_unless_opted_in(monkeypatch, caplog):
    from veriloop.sandbox import SandboxError, probe
    from veriloop.sandbox.probe import probe_isolation

    monkeypatch.setattr(probe.shutil, "which", lambda name: None)  # no unshare here, nor bwrap
    with pytest.raises(
        SandboxError,
        match=r"kernel layer is unavailable here \(no unshare command.*refused.*"
        r"VERILOOP_SANDBOX=process",
    ):
        probe_isolation("auto")
    process = probe_isolation("process")
    assert not process.namespaces and process.layers.endswith("rlimits+audit-hook"), process
    assert "VERILOOP_SANDBOX=process" in process.why
    assert "untrusted code runs without the kernel layer" in caplog.text  # a warning, through logging


# Exhaustion: 1,500 nested directories made cleanup raise RecursionError, leaving the run's directory (and its
# cgroup) behind for good.
DEEP = """
import os
fd = os.open(".", os.O_RDONLY)
for _ in range(1500):
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
print("deep")
"""


def test_cleanup_removes_any_depth(monkeypatch):
    import os
    import tempfile

    from veriloop.sandbox import run_program, supervisor

    made, original = [], tempfile.mkdtemp

    def mkdtemp(**kw):
        made.append(original(**kw))
        return made[-1]

    monkeypatch.setattr(supervisor.tempfile, "mkdtemp", mkdtemp)
    res = run_program(DEEP)
    assert (res.status, res.stdout) == ("ok", "deep\n"), res
    assert made and not os.path.exists(made[0]), "the run's directory was left behind"


def test_remove_tree_removes_links_and_never_follows_them(tmp_path):
    import os

    from veriloop.sandbox.process import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    run = tmp_path / "run"
    (run / "a" / "b").mkdir(parents=True)
    (run / "a" / "b" / "f.txt").write_text("x")
    os.symlink(outside, run / "a" / "to-outside")
    os.symlink(tmp_path, run / "a" / "b" / "loop")
    remove_tree(str(run))
    assert not run.exists() and (outside / "keep.txt").read_text() == "keep"
    remove_tree(str(tmp_path / "no-such-directory"))  # nothing to do, no error


# Exhaustion: memfd_create held 800 MB outside the memory limit (RLIMIT_AS counts address space, not shared
# memory written through a descriptor), and forked children each had a limit of their own.
MEMFD = """
import os
chunk, held, fds = b"x" * (1 << 20), 0, []
while held < 600 and len(fds) < 50:  # each memfd stays under the file-size limit; together they do not
    fds.append(os.memfd_create("hoard"))
    try:
        while True:
            os.write(fds[-1], chunk)
            held += 1
    except OSError:
        pass
print("held", held, "MB")
"""


@pytest.mark.sandbox_layer("memory-cgroup")
def test_the_memory_limit_holds_for_the_whole_run():
    from veriloop.sandbox import SandboxLimits, run_program

    limits = SandboxLimits(wall_seconds=20, cpu_seconds=10, memory_mb=256)
    res = run_program(MEMFD, limits=limits)
    assert res.status == "crash" and "held" not in res.stdout, res
    assert run_program("x = bytearray(64 << 20)\nprint(len(x) >> 20)", limits=limits).stdout == "64\n"


# Exhaustion: a run wrote 1 GB of disk in 2 s (no quota; only each file was bounded), made files until the disk's
# inodes ran out, and could take every inotify instance of the host's user.  Run with the kernel layer alone (no
# audit hook: ctypes is how a program reaches inotify).  Each prints how far it got and the errno that stopped it.
DISK_FLOOD = """
total = 0
try:
    for i in range(70):
        with open(f"f{i}", "wb") as fh:
            for _ in range(15):  # each file under the per-file limit (16 MiB)
                fh.write(b"x" * (1 << 20))
                fh.flush()
                total += 1
except OSError as e:
    print(total, e.errno)
"""
FILE_FLOOD = """
n = 0
try:
    while n < 100_000:
        open(f"f{n}", "w").close()
        n += 1
except OSError as e:
    print(n, e.errno)
"""
INOTIFY_FLOOD = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
held = [fd for fd in (libc.inotify_init1(0) for _ in range(200)) if fd >= 0]
print(len(held), ctypes.get_errno())
"""


@pytest.mark.sandbox_layer("namespaces")
def test_what_a_run_writes_and_watches_is_bounded_for_the_whole_run():
    from veriloop.sandbox import SandboxLimits, run_program

    limits = SandboxLimits(wall_seconds=20, cpu_seconds=10, disk_bytes=32 << 20, disk_files=500)
    written, errno = map(int, run_program(DISK_FLOOD, limits=limits, audit_hook=False).stdout.split())
    assert written <= 32 and errno == 28, (written, errno)  # ENOSPC at the run's 32 MiB, not the disk's
    made, errno = map(int, run_program(FILE_FLOOD, limits=limits, audit_hook=False).stdout.split())
    assert made < 500 and errno == 28, (made, errno)
    held, errno = map(int, run_program(INOTIFY_FLOOD, limits=limits, audit_hook=False).stdout.split())
    assert held == 8 and errno == 24, (held, errno)  # EMFILE at the run's own count
    # an honest program that writes a little and reads it back is untouched
    res = run_program("open('notes.txt', 'w').write('x' * 100000)\nprint(len(open('notes.txt').read()))", limits=limits)
    assert (res.status, res.stdout) == ("ok", "100000\n"), res


# The view: only the library directories of the interpreter are bound (no bin/), and execve is refused, so neither
# a program of the view nor a static binary the run writes can be started (noexec on the run's directory too).
EXEC_SELF = """
import os, sys
try:
    python = os.path.realpath(sys.executable)  # the base interpreter, past the venv's link
    os.execv(python, [python, "-c", "print('started')"])
except OSError as e:
    print("refused", e.errno)
"""


@pytest.mark.sandbox_layer("namespaces")
@pytest.mark.sandbox_layer("seccomp")
def test_no_program_but_the_interpreter_runs():
    from veriloop.sandbox import run_program

    res = run_program(EXEC_SELF, audit_hook=False)
    # EPERM: refused as an exec (before, ENOENT: only the view's missing /lib64 loader link stopped a dynamic
    # binary, and nothing stopped a static one)
    assert (res.status, res.stdout) == ("ok", "refused 1\n"), res
    res = run_program(
        "import os, sys\nprint([p for p in (sys.executable, '/usr/bin', '/bin', "
        "os.path.dirname(sys.executable)) if os.path.exists(p)])",
        audit_hook=False,
    )
    assert (res.status, res.stdout) == ("ok", "[]\n"), res


# Fall-back mode: with the audit hook patched away (the red team did it in three lines; here it is off), a
# double-forked orphan outlived the run and a TCP connection to 127.0.0.1 went through.  The opted-in process
# mode now takes every layer short of namespaces that works here: the run's cgroups (whatever is left in them
# is killed with the run) and the seccomp filter (no socket but a Unix one).
ORPHAN = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()  # out of the run's process group and session: killing the group does not reach it
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
print(os.read(r, 32).decode())
"""


@pytest.mark.sandbox_layer("pids-cgroup")
@pytest.mark.sandbox_layer("seccomp")
def test_the_opted_in_process_mode_takes_every_layer_short_of_namespaces(caplog):
    import socket
    import time

    from veriloop.sandbox import run_program
    from veriloop.sandbox.probe import probe_isolation

    process = probe_isolation("process")
    assert not process.namespaces and process.seccomp and process.pids_cgroup, process
    assert f"verdicts say 'sandbox: {process.layers}'" in caplog.text  # a warning, through logging
    res = run_program(ORPHAN, audit_hook=False, isolation_=process)
    assert res.status == "ok" and res.stdout.strip().isdigit(), res
    orphan = res.stdout.strip()
    deadline = time.monotonic() + 10  # every process left in the run's cgroup is killed when the run ends
    while time.monotonic() < deadline and _alive(orphan):
        time.sleep(0.1)
    assert not _alive(orphan), f"the double-forked orphan {orphan} outlived the run"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        res = run_program(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('in')",
            audit_hook=False,
            isolation_=process,
        )
    assert res.status == "crash" and "PermissionError" in res.detail and "in" not in res.stdout, res


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
