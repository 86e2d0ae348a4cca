"""``veriloop compare RUN_A RUN_B [...]``: the runs' curves overlaid, and how their configs differ."""

from __future__ import annotations

from pathlib import Path

from veriloop.errors import InputError
from veriloop.io import atomic_write_text
from veriloop.report.data import config_of, curves, flatten, metrics_rows
from veriloop.report.page import render

MISSING = "(not set)"


def compare_data(run_dirs: list[Path]) -> dict:
    if len(run_dirs) < 2:
        raise InputError("veriloop compare needs at least two run directories")
    runs, configs = [], []
    for d in run_dirs:
        rows = metrics_rows(d)
        if not d.is_dir() or not rows:
            raise InputError(f"{d}: not a training run directory with metrics (no metrics.jsonl rows)")
        names = [r["name"] for r in runs]
        name = d.name if d.name not in names else str(d)  # two runs of the same name: their paths tell them apart
        runs.append({"name": name, "run_dir": str(d), "curves": curves(rows), "last": rows[-1]})
        configs.append(flatten(config_of(d)[1]))
    keys = sorted(set().union(*configs))
    differ = [k for k in keys if len({repr(c.get(k, MISSING)) for c in configs}) > 1]
    diff = [[k, *(c.get(k, MISSING) for c in configs)] for k in differ]
    return {
        "kind": "compare",
        "title": " vs ".join(r["name"] for r in runs),
        "run_dir": "",
        "runs": runs,
        "config_diff": diff,
        "config_keys": len(keys),
    }


def write_compare(run_dirs: list[str | Path], out: str | Path) -> Path:
    data = compare_data([Path(d) for d in run_dirs])
    out = Path(out)
    atomic_write_text(out, render(data, data["title"]))
    return out
