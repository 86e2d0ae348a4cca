"""``code``: run model-written Python against tests it never sees, in the sandbox.

The reference is either assert-style test code (``assert add(2, 3) == 5`` ...) or a JSON list
of stdin/stdout cases (``[{"input": "2 3\\n", "output": "5\\n"}, ...]``).  The completion's code
is its last fenced ````python`` block, or the whole completion when it has none.

Outcome (``Verdict.outcome``): ``pass`` when every test passes, otherwise the most serious of
the runs' outcomes: ``violation`` > ``timeout`` > ``crash`` > ``output_limit`` > ``fail``.
Score 1 for pass, else 0, or the share of tests passed with ``partial_credit=True``.
Cases run in parallel on a thread pool (each run is its own process); a hung or crashed
run costs its time limit and nothing else.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

from veriloop.sandbox import SandboxLimits, parse_tests, run_program, run_tests
from veriloop.verifiers.base import Verdict, Verifier, VerifierError

SEVERITY = ("violation", "timeout", "crash", "output_limit", "fail")
_FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(completion: str) -> str:
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def normalize_output(text: str) -> str:
    """Trailing spaces on each line and trailing blank lines do not matter."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n"))


def parse_reference(reference: str):
    """``("stdio", [(input, output)])`` or ``("assert", parse_tests(...))``."""
    text = reference.strip()
    if text.startswith("["):
        try:
            cases = json.loads(text)
        except json.JSONDecodeError as e:
            raise VerifierError(f"code reference looks like JSON but is not: {e.msg}") from None
        if not cases or not all(isinstance(c, dict) and {"input", "output"} <= set(c) for c in cases):
            raise VerifierError('a JSON code reference must be a non-empty list of {"input", "output"} objects')
        return "stdio", [(str(c["input"]), str(c["output"])) for c in cases]
    try:
        return "assert", parse_tests(text)
    except (SyntaxError, ValueError) as e:
        raise VerifierError(f"code reference is neither JSON cases nor assert-style tests: {e}") from None


class CodeVerifier(Verifier):
    name, version = "code", "2"  # 2: the grader evaluates the tests; the program only answers calls

    def __init__(
        self,
        partial_credit: bool = False,
        wall_seconds: float = 10.0,
        cpu_seconds: int = 5,
        memory_mb: int = 1024,
        output_bytes: int = 1 << 20,
        workers: int = 0,
    ):
        self.partial_credit = partial_credit
        self.limits = SandboxLimits(wall_seconds, cpu_seconds, memory_mb, output_bytes)
        self.workers = workers if workers > 0 else (os.cpu_count() or 1)

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        parsed = [parse_reference(r) for r in references]  # a bad reference is an error, before any run
        jobs = []  # (completion index, stdio case index or None, (program, stdin))
        for i, (completion, (mode, cases)) in enumerate(zip(completions, parsed)):
            program = extract_code(completion)
            if mode == "stdio":
                jobs += [(i, k, (program, inp)) for k, (inp, _) in enumerate(cases)]
            else:
                jobs.append((i, None, (program, None)))
        with ThreadPoolExecutor(max_workers=self.workers) as ex:
            runs = list(ex.map(lambda job: self._run(job, parsed[job[0]]), jobs))
        per_completion: dict[int, list[tuple[str, int, int, str, str]]] = {}
        for (i, _, _), result in zip(jobs, runs):
            per_completion.setdefault(i, []).append(result)
        return [self._verdict_of(per_completion[i]) for i in range(len(completions))]

    def _run(self, job, parsed) -> tuple[str, int, int, str, str]:
        """(outcome, passed, total, detail, isolation layers) of one run."""
        i, k, (program, stdin) = job
        mode, cases = parsed
        if mode == "stdio":
            res = run_program(program, stdin=stdin, limits=self.limits)
            if res.status != "ok":
                return res.status, 0, 1, res.detail, res.layers
            ok = normalize_output(res.stdout) == normalize_output(cases[k][1])
            return ("pass", 1, 1, "", res.layers) if ok else ("fail", 0, 1, f"case {k}: wrong output", res.layers)
        run = run_tests(program, cases, limits=self.limits)  # the grader evaluates every test, the program answers
        if run.status != "ok":
            return run.status, run.passed, run.total, run.detail, run.layers
        return ("pass" if run.passed == run.total else "fail"), run.passed, run.total, run.first_fail, run.layers

    def _verdict_of(self, runs: list[tuple[str, int, int, str, str]]) -> Verdict:
        passed, total = sum(r[1] for r in runs), sum(r[2] for r in runs)
        outcomes = {r[0] for r in runs}
        outcome = "pass" if outcomes == {"pass"} else next(o for o in SEVERITY if o in outcomes)
        share = passed / total if total else 0.0
        score = 1.0 if outcome == "pass" else (share if self.partial_credit else 0.0)
        if outcome == "violation":
            score = 0.0  # a forbidden act earns nothing, whatever passed before it
        detail = next((r[3] for r in runs if r[0] == outcome and r[3]), "")
        detail = "; ".join(filter(None, [detail, "sandbox: " + "/".join(sorted({r[4] for r in runs}))]))
        return Verdict(score, {"tests_passed": share, "outcome": float(outcome == "pass")}, self.tag, detail, outcome)
