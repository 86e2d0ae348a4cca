"""Run model-written Python in a separate, limited process, and say exactly how it ended.

Every run is a fresh ``python -I`` process in its own session, with

* resource limits set before the interpreter starts: CPU seconds, address space, file size,
  open files, and (where the kernel honours it for this user) the process count;
* where the machine allows it (the kernel layer): its own user, mount, pid, net, ipc and uts namespaces, made by
  bubblewrap (``bwrap``) where it is installed and works here, else by util-linux's ``unshare``, and a read-only
  view of the interpreter's library directories, nothing else (``namespaces.py``); a seccomp filter; a pids and a
  memory cgroup of its own;
* a fresh working directory (in the namespaces a size-limited tmpfs of its own), removed afterwards;
* a wall-clock limit enforced by the parent (the whole process group is killed);
* a cap on what it may print (the parent stops reading and kills it past the cap);
* an audit hook (PEP 578) installed before the program runs that ends the process at the
  first forbidden act and reports it: reading outside the standard library and its working
  directory (the tests and the grader's files included), writing or deleting outside its
  directory, sockets, new processes (fork, exec, spawn, subprocess), signals, ``ctypes``,
  ``gc`` object walks.

**The verdict is the grader's; the program only answers.**  In ``stdio`` mode the parent feeds the
input and compares what was printed.  With assert-style tests (``run_tests``) the test code never
enters the sandbox: it runs in the grader, where each name the program defined is a proxy; a call,
attribute, iteration, ``len``, ``[]``, ``in`` or truth test on it is one request to the sandboxed
process, which answers with a strictly encoded built-in value (exact built-in types, so an object whose
``__eq__`` always says yes is not a value), a handle to any other object (equal only to itself), or the
exception raised.  Every ``assert`` and comparison is evaluated by the grader, so walking the frames to
the harness, writing fake result lines to any descriptor, exiting early, patching builtins or installing
signal handlers in the program's process decides nothing (``tests/forgers.py``).  A program's name that
shadows a built-in (``abs``) is not the tests' ``abs``, and a standard-library module it imported is the
grader's own import of it.

Outcomes: ``pass``, ``fail`` (wrong output or a failed assert), ``timeout``, ``crash``
(an exception, a non-zero exit, memory exhausted, early exit), ``violation`` (a forbidden
act), ``output_limit``.

The modules, lowest first (each imports only those before it): ``limits`` (``SandboxLimits``), ``layers`` (what a
run's isolation is: ``Isolation``, the seccomp filter, the view), ``process`` (starting and ending the process),
``harness`` (the program the child runs), ``namespaces`` (bwrap or unshare), ``supervisor`` (one sandboxed process),
``probe`` (what this machine allows: ``isolation()``), ``run`` (``run_program``), ``grader`` (``run_tests``: assert-
style tests judged here), ``warm`` (warm interpreters for tool calls: a forked copy per call, ``run_warm``).
"""

from veriloop.sandbox.grader import RemoteError, TestRun, parse_tests, run_tests
from veriloop.sandbox.layers import Isolation, SandboxError
from veriloop.sandbox.limits import SandboxLimits
from veriloop.sandbox.probe import isolation
from veriloop.sandbox.run import run_program
from veriloop.sandbox.supervisor import OUTCOMES, RunResult

__all__ = [
    "OUTCOMES",
    "Isolation",
    "RemoteError",
    "RunResult",
    "SandboxError",
    "SandboxLimits",
    "TestRun",
    "isolation",
    "parse_tests",
    "run_program",
    "run_tests",
]
