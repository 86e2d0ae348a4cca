"""``run_program``: a program run once in the sandbox under this machine's isolation (``probe.isolation()``), its
output for the caller to judge."""

from __future__ import annotations

from veriloop.sandbox.layers import Isolation
from veriloop.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from veriloop.sandbox.probe import isolation
from veriloop.sandbox.supervisor import RunResult, run_under


def run_program(
    program: str,
    *,
    stdin: str = "",
    limits: SandboxLimits = DEFAULT_LIMITS,
    isolation_: Isolation | None = None,
    audit_hook: bool = True,
) -> RunResult:
    """Run ``program`` once in the sandbox, feeding ``stdin``, under ``isolation_`` (default: the strongest this
    machine allows).  Returns how it ended and what it printed (the caller judges the output).  ``audit_hook=False``
    leaves the process layer's hook out (tests of the kernel layer only)."""
    return run_under(isolation_ or isolation(), program, stdin=stdin, limits=limits, audit_hook=audit_hook)
