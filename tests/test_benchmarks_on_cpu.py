"""The benchmarks the README credits run from one command, with --seeds giving mean ± sd (tiny sizes)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_algorithms_benchmark_reports_mean_and_spread_and_tunes_on_validation(tmp_path):
    out = tmp_path / "algos.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "algorithms.py"), "--steps", "1", "--prompts", "2", "--group", "2",
         "--seeds", "0,1", "--only", "grpo", "dpo", "--dpo_lrs", "1e-4,2e-5", "--json", str(out), "--set",
         "task.arithmetic.heldout_size=8", "task.arithmetic.validation_size=8"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [r["seed"] for r in result["runs"]["grpo"]] == [0, 1]
    assert {r["split"] for rs in result["runs"].values() for r in rs} == {"heldout"}
    assert [t["lr"] for t in result["dpo_lr_tuning"]] == [1e-4, 2e-5]  # each scored on validation
    table = [line for line in proc.stdout.splitlines() if line.startswith("| `grpo`")]
    assert len(table) == 1 and "±" in table[0]
