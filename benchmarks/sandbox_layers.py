"""Milliseconds per sandboxed run of `print(1)`, for each combination of the sandbox's layers on this machine.

    python benchmarks/sandbox_layers.py [--runs 30] [--repeats 2] [--json FILE] [--quick]

Runs one after another in this process (no worker pool), after one warm-up run per row; each row is timed
``--repeats`` times and the table gives every repeat.  Rows the machine cannot run (no namespaces, no libseccomp,
no pids cgroup) are left out.  Namespaces are made by bwrap where the machine's sandbox uses it, and then the
strongest row is timed with the unshare fall-back too.  The `Popen.wait` rows wait for the run's end as the
supervisor did before it used a pidfd (polling with sleeps of up to 50 ms).  ``--quick``: 2 runs, one repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from common import result_args, save

from veriloop.sandbox import Isolation, isolation, run_program


def rows(best: Isolation) -> list[tuple[str, Isolation, bool]]:
    out = []
    for name, ns, cgroup, seccomp in [
        ("namespaces+seccomp+pids-cgroup", True, True, True),
        ("namespaces+pids-cgroup", True, True, False),
        ("namespaces+seccomp", True, False, True),
        ("namespaces", True, False, False),
        ("seccomp (process layers)", False, False, True),
        ("process layers", False, False, False),
    ]:
        if (ns and not best.namespaces) or (cgroup and not best.pids_cgroup) or (seccomp and not best.seccomp):
            continue
        iso = Isolation(ns, best.pids_cgroup if cgroup else "", "", best.seccomp if seccomp else "")
        out.append(
            (
                name + (" (bwrap)" if ns and best.bwrap else ""),
                dataclasses.replace(iso, bwrap=ns and best.bwrap or ""),
                True,
            )
        )
    if best.bwrap and out[0][1].namespaces:  # the fall-back, for comparison
        out.insert(1, (out[0][0].replace("(bwrap)", "(unshare)"), dataclasses.replace(out[0][1], bwrap=""), True))
    out += [(f"{name}, Popen.wait", iso, False) for name, iso, _ in (out[0], out[-1])]
    return out


def timed(iso: Isolation, runs: int) -> float:
    run_program("print(1)", isolation_=iso)  # warm-up: the filter's compilation, the page cache
    start = time.perf_counter()
    for _ in range(runs):
        res = run_program("print(1)", isolation_=iso)
        if (res.status, res.stdout) != ("ok", "1\n"):
            raise SystemExit(f"{iso.layers}: {res}")
    return 1000 * (time.perf_counter() - start) / runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    result_args(p, "sandbox_layers")
    args = p.parse_args()
    if args.quick:
        args.runs, args.repeats = 2, 1
    best = isolation()
    result = {"best": best.layers, "runs": args.runs, "repeats": args.repeats, "rows": []}
    print(f"| layers | waiting | ms per run ({args.repeats} repeats of {args.runs} runs) |")
    print("|---|---|---|")
    for name, iso, pidfd in rows(best):
        saved = getattr(os, "pidfd_open", None)
        if not pidfd and saved is not None:
            del os.pidfd_open  # the supervisor then waits with Popen.wait(timeout)
        try:
            ms = [timed(iso, args.runs) for _ in range(args.repeats)]
        finally:
            if saved is not None:
                os.pidfd_open = saved
        layers, waiting = name.removesuffix(", Popen.wait"), "pidfd" if pidfd else "Popen.wait"
        result["rows"].append({"layers": layers, "waiting": waiting, "ms_per_run": ms})
        print(f"| {layers} | {waiting} | {', '.join(f'{m:.1f}' for m in ms)} |", flush=True)
    save(args, "sandbox_layers", result)


if __name__ == "__main__":
    main()
