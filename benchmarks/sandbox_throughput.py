"""Honest throughput of the code grader: runs per second serially and with 2 workers, alone and beside hostile
runs; one stamped JSON result, rendered into the results page.

    python benchmarks/sandbox_throughput.py [--runs 60] [--repeats 3] [--json FILE] [--quick]

Honest runs: assert-style submissions (four programs, right and wrong, against three asserts), each a sandboxed
process that the grader evaluates tests against.  "Beside hostile": the same honest batch with 2 workers while a
second grader runs hostile submissions back to back on its own worker (a fork bomb, a memory hog, a busy loop, an
output flood, a disk flood, a flood of answer values); the honest verdicts must all be right there too.  Each row
is timed ``--repeats`` times (mean and spread).  The isolation is this machine's default (``VERILOOP_SANDBOX``).

The API it uses (``get("code", workers=...)``, ``verify_batch``) is the same at earlier commits, so the same
script measures a commit before a change: ``PYTHONPATH=<old checkout>/src python benchmarks/sandbox_throughput.py``
(the stamp then names the commit of that checkout).  The results page (``docs/results/sandbox-throughput.md``) is
rendered by ``make results-pages`` from the results in ``docs/results/sandbox_throughput/``, in file-name order
(``render``).  ``--quick``: 4 runs, one repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from common import result_args, save, stamp

import veriloop
from veriloop.verifiers import get

TESTS = "assert f(2) == 4\nassert f(-3) == 9\nassert f(10) == 100"
HONEST = [
    ("def f(x):\n    return x * x", 1.0),
    ("def f(x):\n    return x ** 2", 1.0),
    ("def f(x):\n    return x + x", 0.0),
    ("def f(x):\n    return abs(x) * 2", 0.0),
]
HOSTILE = [
    "import os\nwhile True:\n    os.fork()",  # stopped by the audit hook (or the pids cgroup without it)
    "x = []\nwhile True:\n    x.append(bytearray(1 << 24))",
    "while True:\n    pass",
    "while True:\n    print('x' * 10000)",
    "for i in range(100):\n    open(f'f{i}', 'wb').write(b'x' * (15 << 20))",
    "def f(x):\n    return [0] * 1300000",
]


def honest_batch(runs: int) -> tuple[list[str], list[str], list[float]]:
    rows = [HONEST[i % len(HONEST)] for i in range(runs)]
    return [p for p, _ in rows], [TESTS] * runs, [s for _, s in rows]


def timed(workers: int, runs: int, hostile: bool) -> tuple[float, int, int]:
    """Honest runs per second; how many honest verdicts were wrong; how many hostile runs ran meanwhile."""
    grader = get("code", workers=workers, wall_seconds=4.0, cpu_seconds=2, memory_mb=512)
    programs, refs, expected = honest_batch(runs)
    grader.verify_batch(programs[:2], refs[:2])  # warm-up: the isolation probe, the filter, the page cache
    stop, hostile_runs = threading.Event(), [0]

    def attack():
        other = get("code", workers=1, wall_seconds=4.0, cpu_seconds=2, memory_mb=512)
        while not stop.is_set():
            for program in HOSTILE:
                if stop.is_set():
                    break
                other.verify(program, TESTS)
                hostile_runs[0] += 1

    thread = threading.Thread(target=attack, daemon=True) if hostile else None
    if thread:
        thread.start()
        time.sleep(1.0)  # the attack is under way before the clock starts
    start = time.perf_counter()
    verdicts = grader.verify_batch(programs, refs)
    seconds = time.perf_counter() - start
    if thread:
        stop.set()
        thread.join(timeout=60)
    wrong = sum(v.score != s for v, s in zip(verdicts, expected))
    return runs / seconds, wrong, hostile_runs[0]


PAGE = "sandbox-throughput"


def render(results: list[dict]) -> str:
    """The results page: one line per result (a commit measured once), in the order given (interleaved A/B)."""
    first = results[0]
    lines = [
        "# Sandbox throughput",
        "",
        "Honest assert-style submissions graded per second (each a sandboxed process), mean +- standard "
        f'deviation over {first["repeats"]} repeats of {first["runs"]} runs.  "Beside hostile": a second grader '
        "runs hostile submissions (fork bomb, memory hog, busy loop, output flood, disk flood, answer flood) "
        "back to back on its own worker meanwhile; the wrong column counts honest verdicts that came out wrong "
        "in all rows and repeats.  Made by `python benchmarks/sandbox_throughput.py` (the command of each line "
        "is in its JSON, `docs/results/sandbox_throughput/`).",
        "",
        "| commit | date | isolation | serial | 2 workers | 2 workers, beside hostile | wrong | hostile runs |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows = {row["name"]: row for row in r["rows"]}
        names = ("serial", "2 workers", "2 workers, beside hostile")
        cells = [f"{rows[n]['mean']:.1f} +- {rows[n]['sd']:.1f}" for n in names]
        wrong, hostile = sum(row["wrong"] for row in r["rows"]), sum(row["hostile"] for row in r["rows"])
        lines.append(
            f"| `{r['stamp']['commit']}` | {r['stamp']['date']} | `{r['layers']}` | {' | '.join(cells)} | "
            f"{wrong} | {hostile} |"
        )
    lines += ["", f"Machine: {first['stamp']['machine']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    result_args(p, "sandbox_throughput")
    args = p.parse_args()
    if args.quick:
        args.runs, args.repeats = 4, 1
    from veriloop.sandbox import isolation

    checkout = Path(veriloop.__file__).resolve().parents[2]  # the veriloop measured (PYTHONPATH may name another)
    result = {
        "stamp": stamp(sys.argv, checkout),
        "layers": isolation().layers,
        "runs": args.runs,
        "repeats": args.repeats,
        "rows": [],
    }
    print(f"| row | honest runs/s (mean +- sd of {args.repeats}) | wrong honest verdicts | hostile runs meanwhile |")
    print("|---|---:|---:|---:|")
    for name, workers, hostile in (
        ("serial", 1, False),
        ("2 workers", 2, False),
        ("2 workers, beside hostile", 2, True),
    ):
        rates, wrong, attacks = [], 0, 0
        for _ in range(args.repeats):
            rate, w, h = timed(workers, args.runs, hostile)
            rates.append(rate)
            wrong, attacks = wrong + w, attacks + h
        row = {
            "name": name,
            "workers": workers,
            "hostile": attacks,
            "rates": rates,
            "wrong": wrong,
            "mean": statistics.fmean(rates),
            "sd": statistics.stdev(rates) if len(rates) > 1 else 0.0,
        }
        result["rows"].append(row)
        print(f"| {name} | {row['mean']:.1f} +- {row['sd']:.1f} | {wrong} | {attacks} |", flush=True)
    save(args, "sandbox_throughput", result, checkout)


if __name__ == "__main__":
    main()
