"""``veriloop report``: the run browser's page for a run directory (page.py, data.py), and PNG plots beside it
for a person without a browser."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from veriloop.errors import InputError  # noqa: E402
from veriloop.io import atomic_write_json, atomic_write_text  # noqa: E402
from veriloop.report.data import MARKS_FILE, check_marks, metrics_rows, page_data, read_marks  # noqa: E402
from veriloop.report.page import render  # noqa: E402

PANELS = [
    ("reward", ["reward_mean", "accuracy"], "reward / accuracy"),
    ("kl_entropy", ["kl", "entropy"], "nats per token"),
    ("clipping", ["clip_frac_low", "clip_frac_high", "zero_variance_fraction", "truncation_rate"], "fraction"),
    ("length", ["completion_len_mean", "completion_len_max"], "tokens"),
    ("time", ["time_generate_s", "time_verify_s", "time_update_s"], "seconds per step"),
]
# measured every eval_every steps only: drawn as points at those steps, and only when a run has them
EVAL_PANEL = (
    "evaluation",
    [
        "validation_greedy_accuracy",
        "validation_wrong_steps_rate",
        "heldout_greedy_accuracy",
        "heldout_wrong_steps_rate",
    ],
    "greedy accuracy / rate",
)


def write_plots(run_dir: Path, rows: list[dict]) -> list[Path]:
    out = []
    (run_dir / "plots").mkdir(exist_ok=True)
    steps = [r["step"] for r in rows]
    evaluated = any(k in r for r in rows for k in EVAL_PANEL[1])
    for name, keys, ylabel in PANELS + ([EVAL_PANEL] if evaluated else []):
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for key in keys:
            if name == EVAL_PANEL[0]:
                points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", label=key)
                continue
            ys = [r.get(key) for r in rows]
            if any(y is not None for y in ys):
                ax.plot(steps, [float("nan") if y is None else y for y in ys], label=key)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = run_dir / "plots" / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        out.append(path)
    return out


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` (the run browser, self-contained) and ``plots/*.png`` (for a training run); returns
    the page's path.  Safe on a run that is still going: it reads what is written so far."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"run directory {str(run_dir)!r} does not exist")
    data = page_data(run_dir)
    if data["kind"] == "train":
        rows = metrics_rows(run_dir)
        if rows:
            write_plots(run_dir, rows)
    path = run_dir / "report.html"
    atomic_write_text(path, render(data, data["title"]))
    return path


def import_marks(run_dir: str | Path, exported: str | Path) -> dict:
    """Spot-check marks exported from a static page, merged into the run's ``spot_check.json`` (a mark in the
    file replaces the run's mark of the same record); returns the merged marks."""
    run_dir, exported = Path(run_dir), Path(exported)
    try:
        data = json.loads(exported.read_text())
    except FileNotFoundError:
        raise InputError(f"marks file {str(exported)!r} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{exported}: not JSON ({e})") from None
    new = check_marks(data, str(exported))["marks"]
    merged = {**read_marks(run_dir)["marks"], **new}
    atomic_write_json(run_dir / MARKS_FILE, {"marks": merged})
    return merged


def marks_summary(run_dir: str | Path) -> str:
    marks = read_marks(Path(run_dir))["marks"]
    suspicious = sorted(k for k, m in marks.items() if m["mark"] == "suspicious")
    line = f"spot-check: {len(marks)} marked, {len(marks) - len(suspicious)} fine, {len(suspicious)} suspicious"
    return line + (f" ({', '.join(suspicious[:10])}{' ...' if len(suspicious) > 10 else ''})" if suspicious else "")
