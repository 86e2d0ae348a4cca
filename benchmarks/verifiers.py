"""Verdicts per second of the `gsm8k`, `math` and `code` verifiers, on one core and on all.

    python benchmarks/verifiers.py [--rows 2000] [--code-rows 200] [--json FILE] [--quick]

gsm8k: the test split's gold solutions and the same solutions with the final number changed
(half right, half wrong; plain numbers, compared without sympy).  math: LaTeX answers that
need math-verify (fractions, roots, pi, polynomials), half equivalent.  code: assert-style
problems, honest and wrong solutions, one sandboxed process each.  Timing includes starting
the worker processes.  ``--quick``: 8 rows each, 4 for code.
"""

from __future__ import annotations

import argparse
import json
import os
import random

from common import result_args, save

from veriloop.tasks.gsm8k import DATA_DIR
from veriloop.verifiers.batch import grade_pairs


def gsm8k_pairs(n: int) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (DATA_DIR / "test.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        r = rows[i % len(rows)]
        body, final = r["answer"].rsplit("####", 1)
        completion = r["answer"] if i % 2 == 0 else f"{body}#### {int(float(final.replace(',', ''))) + 1}"
        out.append((completion, r["answer"]))
    return out


_MATH = [
    ("\\frac{1}{2}", "0.5", "\\frac{1}{3}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "\\sqrt{2}"),
    ("\\frac{\\pi}{3}", "\\pi/3", "\\frac{\\pi}{4}"),
    ("x^2+2x+1", "(x+1)^2", "(x-1)^2"),
    ("2\\sqrt{3}", "\\sqrt{12}", "3\\sqrt{2}"),
    ("\\frac{3}{4}", "0.75", "\\frac{4}{3}"),
]


def math_pairs(n: int) -> list[tuple[str, str]]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        gold, same, other = _MATH[i % len(_MATH)]
        k = rng.randint(2, 9)  # scale so that rows differ (no caching can help)
        out.append((f"The answer is $\\boxed{{{k}\\cdot {same if i % 2 == 0 else other}}}$", f"{k}\\cdot {gold}"))
    return out


def code_pairs(n: int) -> list[tuple[str, str]]:
    tests = "assert f(2) == 4\nassert f(-3) == 9\nassert f(10) == 100"
    progs = [
        "def f(x):\n    return x * x",
        "def f(x):\n    return x ** 2",
        "def f(x):\n    return x + x",
        "def f(x):\n    return abs(x) * 2",
    ]
    return [(progs[i % len(progs)], tests) for i in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2000, help="rows for gsm8k and math")
    p.add_argument("--code-rows", type=int, default=200)
    result_args(p, "verifiers")
    args = p.parse_args()
    if args.quick:
        args.rows, args.code_rows = 8, 4
    cores = os.cpu_count() or 1
    result = {"rows": args.rows, "code_rows": args.code_rows, "cores": cores, "verifiers": {}}
    print(f"| verifier | rows | verdicts/s, 1 core | verdicts/s, {cores} cores | mean score |")
    print("|---|---:|---:|---:|---:|")
    for name, pairs in (
        ("gsm8k", gsm8k_pairs(args.rows)),
        ("math", math_pairs(args.rows)),
        ("code", code_pairs(args.code_rows)),
    ):
        rates = []
        for workers in (1, cores):
            graded, seconds = grade_pairs(name, pairs, {"workers": 1} if workers == 1 else {}, workers)
            rates.append(len(pairs) / seconds)
        mean = sum(g["score"] for g in graded) / len(graded)
        result["verifiers"][name] = {
            "rows": len(pairs),
            "verdicts_per_s_1_core": rates[0],
            "verdicts_per_s_all_cores": rates[1],
            "mean_score": mean,
        }
        print(f"| `{name}` | {len(pairs)} | {rates[0]:,.0f} | {rates[1]:,.0f} | {mean:.3f} |", flush=True)
    save(args, "verifiers", result)


if __name__ == "__main__":
    main()
