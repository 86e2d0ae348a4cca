"""Program of thought (seed 004): the completion is a program, the sandbox runs it, and what it prints is
the answer the task's own verifier checks.

``program-output`` wraps an answer verifier (``inner``): the completion's program (its last fenced
````python`` block, or the whole completion when it has none, as ``code`` reads it) runs once in the
sandbox of the ``code`` verifier (the ``veriloop.sandbox`` package: a fresh limited process, the audit hook,
no input); the last non-blank line it printed is put into the task's answer form (``answer_format``, e.g.
``answer={value}`` for the built-in task, ``#### {value}`` for GSM8K, ``\\boxed{{{value}}}`` for MATH)
and graded by ``inner`` against the reference, with its components kept.

A program that does not run to its end is the model's mistake and scores 0, and the verdict's outcome
says how it ended (``crash``, ``timeout``, ``violation``, ``output_limit``), so a step can count them
apart from wrong answers; one that prints nothing is ``no_answer``.  ``components["program_ran"]`` is
1 when the program finished.  The sandbox itself failing to start (the machine, not the model) is an
error, never a score.

Registered forms: ``arithmetic-pot``, ``gsm8k-pot``, ``math-pot`` (what ``task.reasoning pot`` asks for).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from veriloop.errors import InputError
from veriloop.sandbox import SandboxLimits, run_program
from veriloop.verifiers.base import Verdict, Verifier, get
from veriloop.verifiers.code import extract_code

# what task.reasoning pot needs in place of each text verifier (the config refuses the text one)
POT_VERIFIER_OF = {
    "arithmetic": "arithmetic-pot",
    "arithmetic-outcome": "arithmetic-pot",
    "gsm8k": "gsm8k-pot",
    "math": "math-pot",
}
PROGRAM_VERIFIERS = ("program-output", "arithmetic-pot", "gsm8k-pot", "math-pot")
# task.reasoning tool on the built-in task: a trace verifier reads the last ';' segment, which a tool trace does
# not end with; arithmetic-tool reads the answer after the last output block (gsm8k's and math's read text: fine)
TOOL_VERIFIER_OF = {
    "arithmetic": "arithmetic-tool",
    "arithmetic-outcome": "arithmetic-tool",
    "arithmetic-process": "arithmetic-tool-process",
    "arithmetic-format": "arithmetic-tool",
}
TOOL_VERIFIERS = ("arithmetic-tool", "arithmetic-tool-process")


def check_reasoning_verifier(reasoning: str, verifier: str, field: str = "verifier") -> None:
    """A program scored by a text verifier (or a trace by a program one, or a tool trace by a verifier of plain
    traces) scores 0 everywhere: refuse it."""
    if reasoning == "pot" and verifier in POT_VERIFIER_OF:
        raise InputError(
            f"task.reasoning pot: completions are programs, but {field} {verifier!r} reads text; use "
            f"{field} {POT_VERIFIER_OF[verifier]!r} (it runs the program and grades what it prints)"
        )
    if reasoning != "pot" and verifier in PROGRAM_VERIFIERS:
        raise InputError(f"{field} {verifier!r} runs the completion as a program: set task.reasoning pot")
    if reasoning == "tool" and verifier in TOOL_VERIFIER_OF:
        raise InputError(
            f"task.reasoning tool: {field} {verifier!r} reads a text trace, and a tool trace ends after "
            f"its last output block; use {field} {TOOL_VERIFIER_OF[verifier]!r}"
        )
    if reasoning != "tool" and verifier in TOOL_VERIFIERS:
        raise InputError(f"{field} {verifier!r} reads a tool-integrated trace: set task.reasoning tool")


def printed_answer(stdout: str) -> str:
    """The last non-blank line a program printed, stripped ('' when it printed nothing)."""
    lines = [line.strip() for line in stdout.replace("\r\n", "\n").split("\n") if line.strip()]
    return lines[-1] if lines else ""


class ProgramOutput(Verifier):
    name, version = "program-output", "1"

    def __init__(
        self,
        inner: str = "arithmetic-outcome",
        answer_format: str = "answer={value}",
        inner_options: dict | None = None,
        wall_seconds: float = 5.0,
        cpu_seconds: int = 2,
        memory_mb: int = 512,
        output_bytes: int = 1 << 16,
        workers: int = 0,
    ):
        if "{value}" not in answer_format:
            raise InputError(f"program-output: answer_format must contain {{value}}, got {answer_format!r}")
        self.inner = get(inner, **(inner_options or {}))
        self.answer_format = answer_format
        self.limits = SandboxLimits(wall_seconds, cpu_seconds, memory_mb, output_bytes)
        self.workers = workers if workers > 0 else (os.cpu_count() or 1)
        self.version = f"1({self.inner.tag})"

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        programs = [extract_code(c) for c in completions]
        with ThreadPoolExecutor(max_workers=self.workers) as ex:  # each run is its own process
            runs = list(ex.map(lambda p: run_program(p, limits=self.limits), programs))
        graded = [i for i, r in enumerate(runs) if r.status == "ok" and printed_answer(r.stdout)]
        inner = self.inner.verify_batch(
            [self.answer_format.format(value=printed_answer(runs[i].stdout)) for i in graded],
            [references[i] for i in graded],
        )
        by_index = dict(zip(graded, inner))
        out = []
        for i, run in enumerate(runs):
            where = f"; sandbox: {run.layers}"
            if i in by_index:
                v = by_index[i]
                out.append(
                    Verdict(
                        v.score,
                        {"program_ran": 1.0, **v.components},
                        self.tag,
                        f"printed {printed_answer(run.stdout)!r}" + (f"; {v.details}" if v.details else "") + where,
                        v.outcome,
                    )
                )
            elif run.status == "ok":
                out.append(
                    Verdict(0.0, {"program_ran": 1.0}, self.tag, "the program printed nothing" + where, "no_answer")
                )
            else:
                out.append(Verdict(0.0, {"program_ran": 0.0}, self.tag, run.detail[:300] + where, run.status))
        return out


def arithmetic_pot(**options) -> ProgramOutput:
    return ProgramOutput(inner="arithmetic-outcome", answer_format="answer={value}", **options)


def gsm8k_pot(**options) -> ProgramOutput:
    return ProgramOutput(inner="gsm8k", answer_format="#### {value}", **options)


def math_pot(**options) -> ProgramOutput:
    return ProgramOutput(inner="math", answer_format="\\boxed{{{value}}}", **options)
