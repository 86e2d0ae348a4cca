"""The sandbox as a tool for tool-integrated rollouts (``rollout/tools.py``): a code block runs in the ``code``
verifier's sandbox (``veriloop.sandbox``: a limited process, the audit hook, no network, no input; by default a
forked copy of a warm sandboxed interpreter, ``sandbox/warm.py``, else a fresh process), after the earlier blocks
of its completion that ran to their end (their state; their own output dropped).  A block's last
expression prints its value, as in a notebook.  ``tool_settings`` gives a task's tool format this runner."""

from __future__ import annotations

import ast
import secrets

from veriloop.rollout.tools import ToolSettings
from veriloop.sandbox import SandboxLimits, run_program
from veriloop.sandbox.warm import run_warm


def shown_output(status: str, stdout: str, detail: str, limit: int) -> str:
    """What the model reads back: the printed text (stripped), or the failure as an interpreter shows it."""
    text = stdout.strip() if status == "ok" else f"{status}: {detail.strip().splitlines()[-1] if detail else ''}"
    return text if len(text) <= limit else text[:limit] + "..."


def with_display(code: str) -> str:
    """``code`` whose last statement, when it is an expression other than a ``print(...)``, prints its value (what
    a notebook cell shows: ``a=2+3;a`` shows ``5``).  Parsed here, never run here; code that does not parse is
    returned as it is, and the sandbox reports its SyntaxError."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        return code
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
        return code
    show = ast.parse("_veriloop_value = None\nif _veriloop_value is not None: print(_veriloop_value)").body
    show[0].value = last.value
    tree.body[-1:] = show
    return ast.unparse(ast.fix_missing_locations(tree))


def run_block(earlier: list[str], code: str, settings: ToolSettings) -> tuple[str, str, float]:
    """(status, shown output, seconds) of ``code`` run after the ``earlier`` blocks (their output dropped)."""
    marker = "veriloop-tool-" + secrets.token_hex(8)  # the earlier blocks' output ends at the marker
    program = "\n".join([*map(with_display, earlier), f"print({marker!r})", with_display(code)])
    limits = SandboxLimits(
        wall_seconds=settings.wall_seconds,
        cpu_seconds=max(1, int(settings.wall_seconds)),
        memory_mb=512,
        output_bytes=1 << 16,
    )
    run = run_warm(program, limits=limits) if settings.interpreter == "warm" else run_program(program, limits=limits)
    stdout = run.stdout.split(marker + "\n", 1)[1] if marker + "\n" in run.stdout else ""
    if marker not in run.stdout and run.status == "ok":  # pragma: no cover - the earlier blocks ran before
        return "crash", "crash: the earlier blocks did not run again", run.wall_seconds
    return run.status, shown_output(run.status, stdout, run.detail, settings.output_chars), run.wall_seconds


def tool_settings(
    task, max_tool_calls: int = 4, tool_timeout_s: float = 5.0, interpreter: str = "warm"
) -> ToolSettings | None:
    """The settings a task asked in the tool format samples with (None for the other formats); ``interpreter``:
    ``rollout.tool_interpreter`` (warm: ``sandbox/warm.py``; fresh: a new sandboxed process per block)."""
    if getattr(task, "reasoning", "cot") != "tool":
        return None
    fmt = getattr(task, "tool_format", None)
    if fmt is None:
        raise ValueError(f"task {task.name!r} has no tool format (task.reasoning tool)")
    return ToolSettings(fmt, run_block, max_tool_calls, tool_timeout_s, interpreter=interpreter)
