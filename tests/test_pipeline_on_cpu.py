"""The R1 pipeline: every stage a run directory, SFT from the base on rejection-sampled data, resume."""

import json
import signal
import subprocess
import sys
import time

import pytest
import yaml

from veriloop import pipeline
from veriloop.cli import main
from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.pipeline import PipelineConfig, run_pipeline
from veriloop.training.trainer import Stopped

TINY = {
    "cold_start_steps": 2,
    "rl_steps": 2,
    "rs_problems": 24,
    "rs_samples": 2,
    "sft_steps": 2,
    "rl_again_steps": 2,
    "eval_problems": 12,
    "rl": {"rollout": {"prompts_per_step": 4, "group_size": 2}, "save_rollouts": False},
}


def _cfg(run_dir, **extra):
    """TINY's options that the variant reads (one that it does not read would be refused), with ``extra``."""
    variant = extra.get("variant", "r1")
    return build_config(PipelineConfig, {"run_dir": str(run_dir), **pipeline.options_for(variant, TINY), **extra}, {})


def test_the_r1_pipeline_runs_every_stage_and_sfts_from_the_base(tmp_path):
    state = run_pipeline(_cfg(tmp_path / "r1"), progress=False)
    assert list(state["stages"]) == list(pipeline.VARIANTS["r1"])
    assert all(e["status"] == "done" for e in state["stages"].values())
    for stage in ("cold_start", "rl", "sft_from_base", "rl_again"):
        assert 0 <= state["stages"][stage]["heldout"]["greedy_accuracy"] <= 1
        assert (tmp_path / "r1" / stage / "final" / "config.json").is_file()
    starts = {
        s: yaml.safe_load((tmp_path / "r1" / s / "config.yaml").read_text())["policy"]
        for s in ("cold_start", "rl", "sft_from_base", "rl_again")
    }
    # the second SFT starts from the base, not from the RL weights; each RL stage from the stage before it
    assert starts["sft_from_base"] == starts["cold_start"] == "builtin:base"
    assert starts["rl"] == str(tmp_path / "r1" / "cold_start" / "final")
    assert starts["rl_again"] == str(tmp_path / "r1" / "sft_from_base" / "final")
    rows = [json.loads(x) for x in (tmp_path / "r1" / "rejection_sample" / "data.jsonl").read_text().splitlines()]
    counts = state["stages"]["rejection_sample"]["counts"]
    assert counts["sampled"] == 48 and 0 < counts["kept"] == len(rows) <= counts["readable"] <= counts["correct"]
    assert len({(r["provenance"]["problem_id"], r["completion"]) for r in rows}) == len(rows)  # deduplicated
    assert rows[0]["provenance"]["policy"] == str(tmp_path / "r1" / "rl" / "final")
    assert "rl_again" in (tmp_path / "r1" / "table.md").read_text()
    # the compute ledger: each training stage's, and their sums (rejection sampling trains nothing)
    ledger = json.loads((tmp_path / "r1" / "compute.json").read_text())
    assert set(ledger["stages"]) == {"cold_start", "rl", "sft_from_base", "rl_again"}
    flops = [json.loads((tmp_path / "r1" / s / "compute.json").read_text())["flops"]["total"] for s in ledger["stages"]]
    assert ledger["training"]["flops"]["total"] == sum(flops) > 0


def test_the_pipeline_resumes_at_the_stage_it_stopped(tmp_path, monkeypatch, capsys):
    def killed(*args):
        raise KeyboardInterrupt  # Ctrl-C during rejection sampling

    monkeypatch.setitem(pipeline.STAGES, "rejection_sample", killed)
    with pytest.raises(SystemExit) as stopped:
        run_pipeline(_cfg(tmp_path / "p"), progress=False)
    assert stopped.value.code == 130
    assert (
        "veriloop pipeline: stopped by SIGINT during rejection_sample; continue with the same command, or: "
        f"veriloop pipeline --config {tmp_path / 'p' / 'pipeline.yaml'}"
    ) in capsys.readouterr().err
    monkeypatch.undo()
    done = json.loads((tmp_path / "p" / "pipeline.json").read_text())["stages"]
    assert done["cold_start"]["status"] == done["rl"]["status"] == "done"
    trained = []
    real_train = pipeline._train
    monkeypatch.setattr(
        pipeline,
        "_train",
        lambda root, stage, cfg, progress: trained.append(stage) or real_train(root, stage, cfg, progress),
    )
    (tmp_path / "p" / "sft_from_base").mkdir()  # a stage killed before its first checkpoint
    (tmp_path / "p" / "sft_from_base" / "metrics.jsonl").write_text("")
    state = run_pipeline(_cfg(tmp_path / "p"), progress=False)
    assert trained == ["sft_from_base", "rl_again"]  # the finished stages are not run again
    assert state["stages"]["rl_again"]["status"] == "done"
    assert (tmp_path / "p" / "sft_from_base.incomplete-1" / "metrics.jsonl").is_file()  # kept aside, not lost
    with pytest.raises(InputError, match="another configuration"):
        run_pipeline(_cfg(tmp_path / "p", rl_steps=3), progress=False)


def test_sigterm_during_a_stage_stops_the_pipeline_cleanly_and_the_same_command_resumes(tmp_path):
    config = tmp_path / "r1.yaml"
    data = {
        **TINY,
        "run_dir": str(tmp_path / "s"),
        "rl_steps": 16,
        "rl": {**TINY["rl"], "checkpoint_every": 1},
    }  # a checkpoint every step: a signal always finds one
    config.write_text(yaml.safe_dump(data))
    command = [
        sys.executable,
        "-c",
        "import sys; from veriloop.cli import main; sys.exit(main(sys.argv[1:]))",
        "pipeline",
        "--config",
        str(config),
        "--quiet",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = tmp_path / "s" / "rl" / "metrics.jsonl", time.time() + 240
    try:
        while not (metrics.is_file() and metrics.read_text().strip()) and proc.poll() is None:
            assert time.time() < deadline, "the rl stage never wrote a step"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # as a scheduler preempting the job would
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    steps_before = len(metrics.read_text().splitlines())
    assert 1 <= steps_before < 16
    again = f"veriloop pipeline --config {tmp_path / 's' / 'pipeline.yaml'}"
    assert (
        f"veriloop pipeline: stopped by SIGTERM during rl (checkpoint of step {steps_before} written); continue "
        f"with the same command, or: {again}"
    ) in err.splitlines()  # one line, on stderr
    assert "veriloop train --resume" not in out + err  # not the stage's own command: the pipeline's
    stages = json.loads((tmp_path / "s" / "pipeline.json").read_text())["stages"]
    assert stages["cold_start"]["status"] == "done" and stages.get("rl", {}).get("status") != "done"
    assert "rejection_sample" not in stages  # nothing after the stopped stage ran on a model it never wrote
    assert not list((tmp_path / "s").rglob(".*.tmp")) and not (tmp_path / "s" / "rl" / "final").exists()
    assert main(again.split()[1:] + ["--quiet"]) == 0  # the command it printed
    state = json.loads((tmp_path / "s" / "pipeline.json").read_text())
    assert all(e["status"] == "done" for e in state["stages"].values())
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 17))  # resumed where it stopped: every step once


def test_r1_zero_is_rl_from_the_base_and_bad_options_say_so(tmp_path, capsys):
    state = run_pipeline(_cfg(tmp_path / "z", variant="r1-zero"), progress=False)
    assert list(state["stages"]) == ["rl"]
    assert yaml.safe_load((tmp_path / "z" / "rl" / "config.yaml").read_text())["policy"] == "builtin:base"
    with pytest.raises(InputError, match="max_minutes"):
        _cfg(tmp_path / "x", variant="rl-long")
    with pytest.raises(InputError, match="variant"):
        _cfg(tmp_path / "x", variant="r2")
    assert main(["pipeline", "--run_dir", str(tmp_path / "y"), "--rl.policy", "x"]) == 2
    assert "rl.policy" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        run_pipeline(_cfg(tmp_path / "busy"), progress=False)


def test_a_stage_stopped_during_its_evaluation_is_only_evaluated_again(tmp_path, monkeypatch, capsys):
    """SIGTERM during the evaluation after a training stage: recorded as trained with its model, so the same
    command evaluates it without training it again; a damaged pipeline.json is named, never read."""
    real = pipeline._evaluate

    def stopped(*args):
        raise Stopped(signal.SIGTERM)  # what the SIGTERM handler raises in the main thread

    monkeypatch.setattr(pipeline, "_evaluate", stopped)
    with pytest.raises(SystemExit) as exited:
        run_pipeline(_cfg(tmp_path / "z", variant="r1-zero"), progress=False)
    assert exited.value.code == 143 and "stopped by SIGTERM during rl; continue with" in capsys.readouterr().err
    entry = json.loads((tmp_path / "z" / "pipeline.json").read_text())["stages"]["rl"]
    assert entry["status"] == "trained" and entry["model"] == str(tmp_path / "z" / "rl" / "final")
    trained = []
    monkeypatch.setattr(pipeline, "_evaluate", real)
    monkeypatch.setattr(pipeline, "_train", lambda *a: trained.append(a) or None)
    state = run_pipeline(_cfg(tmp_path / "z", variant="r1-zero"), progress=False)
    assert trained == [] and state["stages"]["rl"]["status"] == "done"  # evaluated, not trained again
    assert 0 <= state["stages"]["rl"]["heldout"]["greedy_accuracy"] <= 1

    path = tmp_path / "z" / "pipeline.json"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(
        InputError,
        match=rf"{path} is damaged: it has \d+ bytes, manifest.json says \d+ .*; it "
        "records which stages are done",
    ):
        run_pipeline(_cfg(tmp_path / "z", variant="r1-zero"), progress=False)
