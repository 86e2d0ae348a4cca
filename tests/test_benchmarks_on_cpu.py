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


def test_the_memory_benchmark_runs_each_path_it_names(tmp_path):
    """benchmarks/memory.py at toy size: the plain and the chunked LM head each ran where the table says."""
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "memory.py"), "--vocab", "150000", "--steps", "1", "--prompts", "2",
         "--group", "2", "--max-new-tokens", "8", "--micro-batch", "4", "--configs", "plain,chunked", "--threads", "1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results["plain"]["lm_head_calls"]["chunked"] == 0 < results["plain"]["lm_head_calls"]["plain"]
    assert results["chunked"]["lm_head_calls"]["plain"] == 0 < results["chunked"]["lm_head_calls"]["chunked"]
    assert results["chunked"]["update_records"] > 0  # the learner ran: the rewards varied


def test_the_prepared_gpu_check_runs_every_part_at_smoke_size(tmp_path):
    """benchmarks/gpu_check.py --smoke on the CPU: every part of the one script a lent GPU runs completes."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--device", "cpu",
                           "--json", str(tmp_path / "gpu.json")], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert json.dumps(result).count("Traceback") == 0, json.dumps(result)[:3000]


def test_the_gpu_recipe_parses_and_names_its_choices():
    from veriloop.config import build_config, load_yaml
    from veriloop.training.config import TrainConfig

    data = load_yaml(ROOT / "configs" / "gsm8k-qwen2.5-0.5b-instruct.yaml")
    cfg = build_config(TrainConfig, data, {"policy": "/models/qwen", "device": "cpu"})
    assert (cfg.dtype, cfg.task.name, cfg.task.prompt_style, cfg.task.chat_template, cfg.verifier) == (
        "bfloat16", "gsm8k", "boxed", "auto", "gsm8k")
    assert cfg.update.gradient_checkpointing and cfg.update.max_tokens_per_micro_batch > 0


def test_the_scaleout_benchmark_times_each_configuration(tmp_path):
    """benchmarks/scaleout.py at toy size: the pipelined Ray run and the DDP run each report their wall time."""
    out = tmp_path / "scaleout.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scaleout.py"), "--steps", "3", "--configs", "ray1-lag1,ddp2",
         "--json", str(out), "--extra", "--rollout.prompts_per_step 2 --rollout.group_size 2 "
         "--sampling.max_new_tokens 8 --task.arithmetic.heldout_size 10"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["config"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"ray1-lag1", "ddp2"}
    assert all(r["steps_measured"] >= 1 and r["wall_s_mean"] > 0 for r in results.values())
    assert "| ray1-lag1 |" in proc.stdout
