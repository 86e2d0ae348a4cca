"""The worker pool behind the maths verifiers: fresh interpreters over pipes, hard time limits, and
infrastructure failures that surface as errors (a verdict's ``error`` outcome, or an exception),
never as a score.  Every test is bounded in wall-clock time: a hang fails, it does not block."""

import operator
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from veriloop.verifiers import get
from veriloop.verifiers.pool import WorkerPool, WorkerPoolError

SNIPPET = 'from veriloop.verifiers import get; print(get("math").verify("\\\\boxed{\\\\frac{1}{2}}", "\\\\frac{1}{2}"))'


def bounded(fn, seconds: float):
    """Run ``fn()`` in a thread; fail (not hang) if it takes longer than ``seconds``."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def slow_judge(reference, spans, options):  # stands in for mathequiv.judge: a comparison that takes long
    time.sleep(60)
    return "correct", ""


def kill_soon(pid: int, after: float = 0.5) -> threading.Timer:
    timer = threading.Timer(after, os.kill, (pid, signal.SIGKILL))
    timer.start()
    return timer


@pytest.mark.parametrize("how", ["stdin", "-c"])
def test_math_verifier_works_when_main_is_stdin_or_a_command(how):
    # The old forkserver workers died at start-up here (runpy looked for '/tmp/<stdin>'): score 0, parse_error.
    args, stdin = ([sys.executable, "-"], SNIPPET) if how == "stdin" else ([sys.executable, "-c", SNIPPET], "")
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "score=1.0" in done.stdout and "outcome='correct'" in done.stdout, done.stdout + done.stderr


BATCH_SNIPPET = """
from veriloop.verifiers.batch import grade_pairs
pairs = [(f"#### {k}", f"#### {k if k % 3 else k + 1}") for k in range(150)]
graded, _ = grade_pairs("gsm8k", pairs, {}, workers=2, chunk_size=32)
print(sum(g["score"] for g in graded), len(graded))
"""


def test_batch_grading_on_several_workers_works_when_main_is_stdin():
    # `veriloop verify` grades chunks on a WorkerPool: no forkserver re-importing '<stdin>'.
    done = subprocess.run([sys.executable, "-"], input=BATCH_SNIPPET, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100.0", "150"]  # every k % 3 == 0 has a wrong reference


def test_results_in_order_and_prints_do_not_corrupt_the_pipe():
    with WorkerPool(2) as pool:
        got = bounded(lambda: pool.map(operator.add, [(k, 1) for k in range(20)], timeout=30), 60)
        assert [r.value for r in got] == list(range(1, 21))
        printed = bounded(lambda: pool.map(print, [("hello from a worker",)], timeout=30), 60)
        assert printed[0].status == "ok" and printed[0].value is None
        raised = bounded(lambda: pool.map(operator.truediv, [(1, 0)], timeout=30), 60)
        assert raised[0].status == "error" and "ZeroDivisionError" in raised[0].error


def test_a_worker_killed_mid_call_gives_error_and_is_replaced():
    with WorkerPool(1) as pool:
        bounded(lambda: pool.map(operator.add, [(1, 1)], timeout=30), 60)  # started and ready
        (pid,) = pool.pids()
        kill_soon(pid)
        res = bounded(lambda: pool.map(time.sleep, [(60,)], timeout=30), 45)
        assert res[0].status == "error" and "died" in res[0].error and "SIGKILL" in res[0].error, res[0]
        again = bounded(lambda: pool.map(operator.add, [(2, 3)], timeout=30), 60)
        assert again[0].value == 5 and pool.pids() != [pid]


def test_math_verdict_is_error_not_parse_error_when_its_worker_is_killed(monkeypatch):
    import veriloop.verifiers.maths as maths

    v = get("math", workers=1, timeout=30)
    try:
        assert bounded(lambda: v.verify("\\boxed{x^2}", "x^2").outcome, 60) == "correct"  # pool warm
        monkeypatch.setattr(maths, "judge", slow_judge)
        kill_soon(v._pool.pids()[0])
        verdict = bounded(lambda: v.verify("\\boxed{x^2}", "x^2"), 45)
        assert (verdict.outcome, verdict.score) == ("error", 0.0) and "died" in verdict.details, verdict
    finally:
        v.close()


def test_a_timeout_is_still_a_timeout():
    with WorkerPool(1) as pool:
        started = time.monotonic()
        res = bounded(lambda: pool.map(time.sleep, [(60,), (0,)], timeout=1.0), 60)
        assert [r.status for r in res] == ["timeout", "ok"]
        assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "broken", [{"preload": ("veriloop_no_such_module",)}, {"python": "/bin/false"}, {"python": "/nonexistent/python3"}]
)
def test_a_pool_whose_workers_cannot_start_raises(broken):
    pool = WorkerPool(2, **broken)
    with pytest.raises(WorkerPoolError, match="cannot start") as e:
        bounded(lambda: pool.map(operator.add, [(1, 2)], timeout=10), 60)
    if "preload" in broken:
        assert "veriloop_no_such_module" in str(e.value)  # the cause is named
    pool.close()


def test_a_call_that_keeps_killing_fresh_workers_raises():
    with WorkerPool(1, max_deaths_in_a_row=3) as pool:
        with pytest.raises(WorkerPoolError, match="3 calls in a row killed their worker"):
            bounded(lambda: pool.map(os._exit, [(3,)] * 5, timeout=30), 90)
        # one death is an error verdict, then a call that returns resets the count
        assert bounded(lambda: pool.map(os._exit, [(3,)], timeout=30), 60)[0].status == "error"
        assert bounded(lambda: pool.map(operator.add, [(1, 2)], timeout=30), 60)[0].value == 3


def test_functions_from_main_are_refused():
    def local():
        return 1

    local.__module__ = "__main__"
    with WorkerPool(1) as pool, pytest.raises(ValueError, match="__main__"):
        pool.map(local, [()], timeout=5)


def test_workers_exit_when_the_parent_dies():
    code = (
        "import operator, os, sys; from veriloop.verifiers.pool import WorkerPool; p = WorkerPool(2); "
        "p.map(operator.add, [(1, 2)], 30); print(*p.pids()); sys.stdout.flush(); os._exit(0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done.stderr
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
