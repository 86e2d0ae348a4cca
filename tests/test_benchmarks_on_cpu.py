"""The benchmarks docs/guides/benchmarks.md credits run from one command, with --seeds giving mean ± sd (tiny sizes)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_algorithms_benchmark_reports_mean_and_spread_and_tunes_on_validation(tmp_path):
    out = tmp_path / "algos.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "algorithms.py"),
            "--steps",
            "1",
            "--prompts",
            "2",
            "--group",
            "2",
            "--seeds",
            "0,1",
            "--only",
            "grpo",
            "dpo",
            "--dpo_lrs",
            "1e-4,2e-5",
            "--json",
            str(out),
            "--set",
            "task.arithmetic.heldout_size=8",
            "task.arithmetic.validation_size=8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
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
        [
            sys.executable,
            str(ROOT / "benchmarks" / "memory.py"),
            "--vocab",
            "150000",
            "--steps",
            "1",
            "--prompts",
            "2",
            "--group",
            "4",
            "--max-new-tokens",
            "16",
            "--micro-batch",
            "8",  # 8 rows of >= 16 tokens: more than one auto chunk (2**25 / 150,000 = 223 tokens) holds
            "--configs",
            "plain,chunked",
            "--threads",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results["plain"]["lm_head_calls"]["chunked"] == 0 < results["plain"]["lm_head_calls"]["plain"]
    assert results["chunked"]["lm_head_calls"]["plain"] == 0 < results["chunked"]["lm_head_calls"]["chunked"]
    assert results["chunked"]["update_records"] > 0  # the learner ran: the rewards varied


def test_the_gpu_recipe_parses_and_names_its_choices():
    from veriloop.config import build_config, load_yaml
    from veriloop.training.config import TrainConfig

    data = load_yaml(ROOT / "configs" / "gsm8k-qwen2.5-0.5b-instruct.yaml")
    cfg = build_config(TrainConfig, data, {"policy": "/models/qwen", "device": "cpu"})
    assert (cfg.dtype, cfg.task.name, cfg.task.prompt_style, cfg.task.chat_template, cfg.verifier) == (
        "bfloat16",
        "gsm8k",
        "boxed",
        "auto",
        "gsm8k",
    )
    assert cfg.update.gradient_checkpointing and cfg.update.max_tokens_per_micro_batch > 0


def test_the_scaleout_benchmark_times_each_configuration(tmp_path):
    """benchmarks/scaleout.py at toy size: the pipelined Ray run and the DDP run each report their wall time."""
    out = tmp_path / "scaleout.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaleout.py"),
            "--steps",
            "3",
            "--configs",
            "ray1-lag1,ddp2",
            "--json",
            str(out),
            "--extra",
            "--rollout.prompts_per_step 2 --rollout.group_size 2 "
            "--sampling.max_new_tokens 8 --task.arithmetic.heldout_size 10 --update.mask_truncated false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["config"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"ray1-lag1", "ddp2"}
    assert all(r["steps_measured"] >= 1 and r["wall_s_mean"] > 0 for r in results.values())
    assert "| ray1-lag1 |" in proc.stdout


def test_the_peers_benchmark_builds_the_contract_model_and_pins_the_work_with_min_new_tokens(tmp_path):
    """benchmarks/peers.py without TRL (its veriloop, sampler and generate() workers run in .venv): the contract
    model has its 4,458,752 parameters, and with --eos suppressed every side writes exactly 64 x 64 tokens."""
    build = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import peers; from pathlib import Path; "
        "m = peers.build_model('4.5M', Path(sys.argv[2])); Path(sys.argv[3]).write_text("
        "''.join(json.dumps(r) + '\\n' for r in peers.problems(64, 0))); print(m['params'])"
    )
    model, data = tmp_path / "model", tmp_path / "problems.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", build, str(ROOT / "benchmarks"), str(model), str(data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["4458752"]
    results = {}
    for worker in ("veriloop", "sampler", "generate"):
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "peers.py"),
                "--worker",
                worker,
                "--model-dir",
                str(model),
                "--data",
                str(data),
                "--steps",
                "2",
                "--eos",
                "suppressed",
                "--threads",
                "1",
                "--sampler-repeats",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, (worker, proc.stderr[-2000:])
        line = [x for x in proc.stdout.splitlines() if x.startswith("@@peers-result ")]
        results[worker] = json.loads(line[-1].split(" ", 1)[1])
    for worker, r in results.items():
        assert r["eos"] == "suppressed" and r["tokens"] == [64 * 64], (worker, r)
    assert len(results["veriloop"]["step_s"]) == 1 and results["veriloop"]["update_records"] == [64]


def test_the_peers_variants_differ_from_the_contract_only_in_their_memory_setting():
    """veriloop-ckpt adds activation checkpointing, veriloop-mb16 micro-batches of 16 rows; every other option
    (the workload: batch, tokens, loss, optimizer) is the contract's, as the plain veriloop variant runs it."""
    probe = (
        "import sys, json, types; sys.path.insert(0, sys.argv[1]); import peers; "
        "a = lambda v: types.SimpleNamespace(model_dir='m', data='d.jsonl', seed=0, steps=3, threads=1, "
        "eos='suppressed', variant=v); "
        "print(json.dumps({v: peers.veriloop_options(a(v), 'run')[0] "
        "for v in peers.STEPPERS if 'veriloop' in v}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT / "benchmarks")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    options = json.loads(proc.stdout.splitlines()[-1])
    plain = options.pop("veriloop")
    assert "update.micro_batch_size" not in plain and plain["sampling.min_new_tokens"] == 64  # veriloop's default cut
    assert "update.gradient_checkpointing" not in plain
    changed = {v: {k: o[k] for k in o if plain.get(k) != o[k]} for v, o in options.items()}
    assert changed == {
        "veriloop-ckpt": {"update.gradient_checkpointing": "true"},
        "veriloop-mb16": {"update.micro_batch_size": 16},
    }


@pytest.mark.timeout(120)
def test_the_sandbox_layers_benchmark_times_each_layer():
    """benchmarks/sandbox_layers.py at toy size: a row per layer set this machine runs, both ways of waiting."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sandbox_layers.py"), "--runs", "2", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "ms per run" not in line]
    assert any("process layers | pidfd" in r for r in rows) and any("| Popen.wait |" in r for r in rows), proc.stdout
    assert all(float(r.split("|")[3].strip()) > 0 for r in rows), proc.stdout
