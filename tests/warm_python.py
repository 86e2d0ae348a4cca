"""Scripts run as ``python script.py args`` would run them, each in a fork of one process that imported the heavy
modules once (torch, transformers, veriloop's trainer: about 4.5 s a process on this 2-core machine).

``WarmPython(preload, env).run(argv, cwd, env, timeout)`` forks the warm process; the child takes the request's
working directory, environment (``tempfile``'s cached directory forgotten), ``sys.argv`` and ``sys.path[0]`` (the
script's directory), its own session, stdout and stderr in files, runs the script as ``__main__`` (``runpy``), then
ends as an interpreter does: non-daemon threads joined, ``atexit`` handlers run, streams flushed, the exit status
of its ``SystemExit`` (1 and the traceback for any other exception).  A child past its timeout is killed with its
session.  The warm process itself runs no torch operation before it forks (no thread pool to inherit), and its
environment is the one the children's imports read (``OMP_NUM_THREADS`` and the offline flags are read at import).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SERVER = r"""
import json, os, runpy, signal, sys, time
for name in sys.argv[1:]:
    __import__(name)
requests, replies = sys.stdin, sys.stdout
sys.stdout = sys.stderr  # nothing a preloaded module prints reaches the replies
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            import tempfile
            tempfile.tempdir = None
            for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            sys.stdin, sys.stdout = open(0, closefd=False), open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            sys.argv = list(req["argv"])
            sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
                code = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
            except BaseException:
                import traceback
                traceback.print_exc()
            import atexit, threading
            threading._shutdown()
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    deadline, status = time.monotonic() + req["timeout"], None
    while status is None:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
        elif time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            status = "timeout"
        else:
            time.sleep(0.02)
    replies.write(json.dumps({"returncode": status}) + "\n")
    replies.flush()
"""


@dataclass
class Completed:
    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    timed_out: bool = False


class WarmPython:
    def __init__(self, preload: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Completed:
        """``argv[0]`` (a script's path) run with ``argv[1:]`` in ``cwd`` under ``env``; its output."""
        out, err = Path(cwd) / ".warm-stdout", Path(cwd) / ".warm-stderr"
        request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write(json.dumps({**request, "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm Python process ended (exit status {self.proc.wait()})")
        status = json.loads(line)["returncode"]
        text = (out.read_text(errors="replace"), err.read_text(errors="replace"))
        out.unlink()
        err.unlink()
        if status == "timeout":
            return Completed(None, *text, timed_out=True)
        return Completed(status, *text)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
