"""The run browser on a long run: how fast `veriloop report --serve` opens and filters a million records.

    python benchmarks/report_large_run.py [--steps 10000] [--per-step 100] [--rounds 3] [--out DIR] [--json FILE]
                                          [--quick]

Makes a run directory of ``steps`` steps with ``per_step`` records each (1,000,000 by default) the way a training
run writes one (``RecordStore(index=True)``: the step files, ``rollouts/index.sqlite``, the token values, a
``metrics.jsonl`` row per step), unless ``DIR`` already holds one of that size; then serves it with
``veriloop report --serve``'s server and drives the page in headless Chromium (Debian's ``chromium``, through
Playwright), ``rounds`` times, each with a new server process and a fresh page:

* open: from navigation to every curve drawn (10,000 steps per series) and the rollout list's first page shown,
  and from the command (``veriloop report --serve`` started in a new process: the user's wait) to the same;
* filter: from the click to the list and its count updated, for a step range with a reward and verdict
  condition, for a problem id, and for truncated records.

The goal (issue 39): open under 5 s, each filter under 1 s.  The records are synthetic (random tokens of the
built-in tokenizer's alphabet, rewards and verdicts drawn with a seed): what is measured is the browser and its
server, not a model.  ``--quick``: 200 steps x 20 records, one round (a smoke test: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, result_args, save, scratch  # noqa: E402

PAGE = "report-browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FILTERS = {  # name: the page's filter fields
    "step range + reward + verdict": {"#f-step": "STEPS", "#f-reward_max": "0.5", "#f-outcome": "wrong"},
    "problem id": {"#f-problem": "p-0042"},
    "truncated": {"#f-truncated": "yes"},
}
OUTCOMES = ["correct", "wrong", "no_answer"]
ALPHABET = "0123456789+-*/=;answer "


def make_run(run_dir: Path, steps: int, per_step: int, seed: int = 0) -> float:
    """A training run's directory of synthetic records; returns the seconds it took (0 when reused)."""
    from veriloop.io import atomic_write_yaml
    from veriloop.logs import progress
    from veriloop.rollout.records import Record, RecordStore
    from veriloop.training.loop.token_values import TokenValueStore, record_key

    marker = run_dir / "synthetic.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"steps": steps, "per_step": per_step, "seed": seed}:
        return 0.0
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    t0, rng, group = time.time(), random.Random(seed), 8
    atomic_write_yaml(run_dir / "config.yaml", {"algo": "grpo", "policy": "builtin:init", "steps": steps, "seed": seed})
    store, values = RecordStore(run_dir / "rollouts", index=True), TokenValueStore(run_dir / "rollouts")
    bar = progress(total=steps, desc="making the run", unit="step")
    with open(run_dir / "metrics.jsonl", "w") as metrics:
        for step in range(1, steps + 1):
            records, rows = [], []
            for i in range(per_step):
                n = rng.randint(12, 60)
                ids = [rng.randint(3, 30) for _ in range(n)]
                outcome = rng.choices(OUTCOMES, [0.5 + 0.4 * step / steps, 0.45 - 0.4 * step / steps, 0.05])[0]
                truncated = rng.random() < 0.03
                r = Record(
                    problem_id=f"p-{rng.randint(0, 7472):04d}",
                    group_id=f"{step}-0-{i // group}",
                    prompt=f"{rng.randint(1, 99)}+{rng.randint(1, 99)}?",
                    reference="0",
                    prompt_ids=[5, 6, 7],
                    completion_ids=ids,
                    completion="".join(rng.choice(ALPHABET) for _ in range(n)),
                    behavior_logprobs=[round(-rng.random(), 4) for _ in range(n)],
                    sampling={"temperature": 1.0, "seed": rng.getrandbits(48)},
                    policy_version=step - 1,
                    finish_reason="length" if truncated else "eos",
                    reward=float(outcome == "correct"),
                    reward_components={"outcome": float(outcome == "correct")},
                    verifier="arithmetic@1",
                    verdict_outcome=outcome,
                )
                records.append(r)
                advantage = round(rng.gauss(0, 1), 4)
                rows.append({"key": record_key(r, i), "problem_id": r.problem_id, "advantage": advantage})
            store.write(step, records)
            values.write(step, rows)
            acc = sum(r.reward for r in records) / per_step
            metrics.write(
                json.dumps(
                    {
                        "step": step,
                        "reward_mean": acc,
                        "accuracy": acc,
                        "kl": rng.random() * 0.01,
                        "entropy": 1 - 0.5 * step / steps,
                        "completion_len_mean": 36 + rng.random(),
                        "truncation_rate": 0.03,
                        "zero_variance_fraction": rng.random() * 0.3,
                        "ratio_min": 0.9,
                        "ratio_max": 1.1,
                        "clip_frac_low": 0.0,
                        "clip_frac_high": 0.0,
                        "logprob_mismatch": 1e-6,
                        "tokens_per_s": 5000.0,
                        "time_generate_s": 0.3,
                        "time_verify_s": 0.05,
                        "time_update_s": 0.2,
                        "time_step_s": 0.6,
                        **({"validation_greedy_accuracy": acc} if step % 500 == 0 else {}),
                    }
                )
                + "\n"
            )
            bar.update(1)
    bar.close()
    marker.write_text(json.dumps({"steps": steps, "per_step": per_step, "seed": seed}))
    return time.time() - t0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def serve(run_dir: Path) -> tuple[subprocess.Popen, str, float]:
    """``veriloop report --serve RUN_DIR`` started as a user starts it: (the process, its URL, seconds to the URL)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "veriloop.cli", "report", str(run_dir), "--serve"], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if match is None:
        proc.kill()
        raise SystemExit(f"veriloop report --serve said {line!r}, not its address")
    return proc, match.group(0), time.perf_counter() - start


def open_page(browser, url: str) -> tuple[object, list]:
    """A new page at the curves, every chart drawn, then the rollouts' first page listed."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "#curves")
    page.wait_for_function(
        "() => window.veriloop && Object.keys(window.veriloop.drawn).length >= "
        "window.veriloop.data.curves.panels.length",
        timeout=60_000,
    )
    page.click("#tab-rollouts")
    page.wait_for_selector("#rec-list tr[data-k]", timeout=60_000)
    return page, errors


def measure(run_dir: Path, rounds: int, steps: int) -> dict:
    """Each round: a new server process, its page opened as soon as it prints its address, then each filter."""
    from playwright.sync_api import sync_playwright

    out = {"url_s": [], "open_s": [], "command_to_open_s": [], "filters_s": {k: [] for k in FILTERS}, "matches": {}}
    with sync_playwright() as p:
        # Chromium's singleton socket lives under TMPDIR, whose path may be too long for a socket (a test's)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env={**os.environ, "TMPDIR": "/tmp"})
        for _ in range(rounds):
            started = time.perf_counter()
            proc, url, to_url = serve(run_dir)
            try:
                opening = time.perf_counter()
                page, errors = open_page(browser, url)
                out["open_s"].append(time.perf_counter() - opening)
                out["command_to_open_s"].append(time.perf_counter() - started)
                out["url_s"].append(to_url)
                page.close()
                for name, fields in FILTERS.items():
                    out["filters_s"][name].append(filter_once(browser, url, fields, steps, out["matches"], name))
                if errors:
                    raise SystemExit(f"the page reported errors: {errors}")
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        browser.close()
    return out


def filter_once(browser, url: str, fields: dict, steps: int, matches: dict, name: str) -> float:
    """Seconds from the click on Filter to the list and its count updated."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url + "#rollouts")
    page.wait_for_selector("#rec-list tr[data-k]", timeout=60_000)
    before = page.inner_text("#count")
    for selector, value in fields.items():
        value = value.replace("STEPS", f"{int(steps * 0.4)}-{int(steps * 0.6)}")  # the middle fifth
        if selector in ("#f-outcome", "#f-truncated"):
            page.eval_on_selector(selector, "(e, v) => { e.value = v; }", value)  # no change event yet
        else:
            page.fill(selector, value)
    start = time.perf_counter()
    page.click("#f-apply")
    page.wait_for_function("b => document.querySelector('#count').innerText !== b", arg=before, timeout=60_000)
    seconds = time.perf_counter() - start
    matches[name] = int(page.get_attribute("#count", "data-matches"))
    page.close()
    return seconds


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--per-step", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="", help="the synthetic run directory (default runs/bench/report-large-run)")
    result_args(ap, "report_large_run")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.per_step, args.rounds = 200, 20, 1
    out = Path(args.out or (scratch() / "report-large-run" if args.quick else Path("runs/bench/report-large-run")))
    made = make_run(out, args.steps, args.per_step)
    m = measure(out, args.rounds, args.steps)
    result = {
        "steps": args.steps,
        "records": args.steps * args.per_step,
        "run_dir_mb": round(_size(out) / 2**20, 1),
        "make_s": round(made, 1),
        **m,
    }
    print(table([result]))
    save(args, "report_large_run", result)
    return result


def table(results: list[dict]) -> str:
    head = "| steps | records | run directory | command to page open (s) | page open (s) | "
    lines = [
        head + " | ".join(f"filter: {k} (s)" for k in FILTERS) + " |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(FILTERS),
    ]
    for r in results:
        filters = " | ".join(f"{fmt(r['filters_s'][k], 2)} ({r['matches'][k]:,} match)" for k in FILTERS)
        size = f"{r['run_dir_mb']:,} MB"
        opened = f"{fmt(r['command_to_open_s'], 2)} | {fmt(r['open_s'], 2)}"
        lines.append(f"| {r['steps']:,} | {r['records']:,} | {size} | {opened} | {filters} |")
    return "\n".join(lines)


def render(results: list[dict]) -> str:
    results = [r for r in results if not r["stamp"].get("quick")]
    parts = [
        "# Run browser on a long run",
        "",
        "`veriloop report --serve` on a synthetic run directory made the way a training run writes one, opened "
        "and filtered in headless Chromium (`benchmarks/report_large_run.py`). Goals: open under 5 s, each "
        "filter under 1 s. *Command to page open* counts from starting `veriloop report --serve` (a new "
        "process) to every chart drawn and the records' first page listed; *page open* from navigating to the "
        "address it prints. Times are mean ± sd over the rounds; each round starts a new server and opens "
        "fresh pages.",
        "",
        table(results),
        "",
    ]
    for r in results:
        s = r["stamp"]
        parts += [
            f"- `{s['command']}` at {s['commit']}, {s['date']}, {s['machine']}; from the command to its "
            f"address {fmt(r['url_s'], 2)} s; the directory made in {r['make_s']} s (0: reused)."
        ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    main()
