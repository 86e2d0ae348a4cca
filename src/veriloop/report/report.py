"""Plots and an HTML page for a run directory: what a person reads after a run."""

from __future__ import annotations

import html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from veriloop.io import atomic_write_text, read_jsonl  # noqa: E402
from veriloop.rollout.records import RecordStore  # noqa: E402

PANELS = [
    ("reward", ["reward_mean", "accuracy"], "reward / accuracy"),
    ("kl_entropy", ["kl", "entropy"], "nats per token"),
    ("clipping", ["clip_frac_low", "clip_frac_high", "zero_variance_fraction", "truncation_rate"], "fraction"),
    ("length", ["completion_len_mean", "completion_len_max"], "tokens"),
    ("time", ["time_generate_s", "time_verify_s", "time_update_s"], "seconds per step"),
]
# measured every eval_every steps only: drawn as points at those steps, and only when a run has them
EVAL_PANEL = ("evaluation", ["validation_greedy_accuracy", "validation_wrong_steps_rate", "heldout_greedy_accuracy",
                             "heldout_wrong_steps_rate"], "greedy accuracy / rate")  # fmt: skip


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return read_jsonl(path)


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
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = run_dir / "plots" / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        out.append(path)
    return out


def _table(d: dict) -> str:
    cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>" for k, v in d.items())
    return f"<table>{cells}</table>"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def write_report(run_dir: str | Path) -> Path:
    """Write ``plots/*.png`` and ``report.html``; returns the report's path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist")
    rows = _rows(run_dir)
    parts = [f"<h1>veriloop run: {html.escape(str(run_dir))}</h1>"]
    summary = run_dir / "summary.json"
    if summary.is_file():
        parts.append("<h2>Summary</h2>" + _table(json.loads(summary.read_text())))
    if rows:
        parts.append(f"<h2>Last step ({rows[-1]['step']})</h2>" + _table(rows[-1]))
        for path in write_plots(run_dir, rows):
            parts.append(f'<img src="plots/{path.name}" alt="{path.stem}">')
        store = RecordStore(run_dir / "rollouts")
        steps = store.steps()
        if steps:
            records = store.read(steps[-1])[:16]
            body = "".join(
                f"<tr><td>{html.escape(r.prompt)}</td><td><code>{html.escape(r.completion)}</code></td>"
                f"<td>{r.reward:.2f}</td><td>{html.escape(r.verdict_details)}</td></tr>"
                for r in records
            )
            parts.append(
                f"<h2>Records of step {steps[-1]} (first 16)</h2>"
                f"<table><tr><th>prompt</th><th>completion</th><th>reward</th><th>why</th></tr>{body}</table>"
            )
    runs = sorted(p.parent.name for p in run_dir.glob("*/report.html"))
    if runs:
        links = "".join(f'<li><a href="{n}/report.html">{n}</a></li>' for n in runs)
        parts.append(f"<h2>Runs</h2><ul>{links}</ul>")
    table = run_dir / "table.txt"
    if table.is_file():
        parts.append(f"<h2>Held-out table</h2><pre>{html.escape(table.read_text())}</pre>")
    config = run_dir / "config.yaml"
    if config.is_file():
        parts.append(f"<h2>Config</h2><pre>{html.escape(config.read_text())}</pre>")
    style = (
        "body{font-family:sans-serif;max-width:1000px;margin:auto}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
    )
    head = f"<head><meta charset='utf-8'><style>{style}</style></head>"
    page = f"<!doctype html><html>{head}<body>{''.join(parts)}</body></html>"
    path = run_dir / "report.html"
    atomic_write_text(path, page)
    return path
