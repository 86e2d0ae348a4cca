"""`veriloop demo` end to end on a tiny budget: every stage runs and summary.json has its keys."""

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from veriloop import cli
from veriloop import demo as demo_module
from veriloop.config import ConfigError, build_config, iter_fields
from veriloop.demo import DemoConfig, control_config, control_reach
from veriloop.io import read_jsonl
from veriloop.training.config import TrainConfig
from veriloop.training.run.metrics import TIMING_KEYS


@pytest.mark.timeout(300)  # its trainings run in spawned processes
def test_demo_small_budget(tmp_path, capsys):
    run_dir = tmp_path / "demo"
    code = cli.main(
        [
            "demo",
            "--quiet",
            "--run_dir",
            str(run_dir),
            "--train.steps",
            "2",
            "--train.rollout.prompts_per_step",
            "4",
            "--train.rollout.group_size",
            "4",
            "--train.task.arithmetic.heldout_size",
            "24",
            "--eval.n_samples",
            "8",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "greedy_accuracy" in out and "teacher" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in (
        "base_accuracy",
        "final_accuracy",
        "base_wrong_steps_rate",
        "final_wrong_steps_rate",
        "base_pass@8",
        "final_pass@8",
        "teacher_accuracy",
        "process_final_accuracy",
        "process_final_wrong_steps_rate",
        "sft_control_accuracy",
    ):
        assert isinstance(summary[key], float), key
        assert 0.0 <= summary[key] <= 1.0
    phases = summary["phase_seconds"]  # every phase's wall time, in the order it ran, within the whole
    assert list(phases) == [
        "evaluate base and teacher",
        "train grpo, sft-control, grpo-process",
        "evaluate grpo",
        "evaluate sft-control",
        "evaluate grpo-process",
    ]
    assert all(s >= 0 for s in phases.values()) and sum(phases.values()) <= summary["total_seconds"] + 0.5
    assert "wall time" in out and "train grpo, sft-control, grpo-process " in out
    # side by side: each run in its own process, its CPU time recorded; the control ends when the GRPO run has
    assert summary["side_by_side"] is True
    assert all(summary[f"{n}_cpu_seconds"] > 0 for n in ("grpo", "sft_control", "grpo_process"))
    runs = json.loads((run_dir / "demo.json").read_text())["phases"]["train grpo, sft-control, grpo-process"]["runs"]
    assert {n: (r["done"], r["steps"]) for n, r in runs.items() if n != "sft-control"} == {
        "grpo": (True, 2),
        "grpo-process": (True, 2),
    }
    assert runs["sft-control"]["done"] and runs["sft-control"]["steps"] >= 1
    assert "stopping after step" in (run_dir / "sft-control" / "train.log").read_text()
    assert "the GRPO run beside it has finished" in (run_dir / "sft-control" / "train.log").read_text()
    for sub in ("grpo", "grpo-process"):
        assert (run_dir / sub / "report.html").is_file() and (run_dir / sub / "metrics.jsonl").is_file()
        assert (run_dir / sub / "train.log").is_file()
    assert (run_dir / "sft-control" / "final" / "model.safetensors").is_file()
    # A second demo never overwrites the first.
    again = [
        "demo",
        "--quiet",
        "--run_dir",
        str(run_dir),
        "--train.steps",
        "1",
        "--process_run",
        "false",
        "--sft_control",
        "false",
        "--train.task.arithmetic.heldout_size",
        "8",
        "--eval.n_samples",
        "0",
    ]
    assert cli.main(again) == 0
    assert (tmp_path / "demo-2" / "summary.json").is_file()


# ---------------------------------------------------------------------------------------------------- the SFT control


@pytest.mark.parametrize(
    "flags",
    [
        ["--train.algo", "dapo"],  # DAPO's recipe sets clip_eps_high, dynamic sampling, the overlong buffer
        ["--train.task.name", "gsm8k"],  # the reward verifier is the task's own: gsm8k, not arithmetic's
        ["--train.steps", "7", "--threads", "2"],
    ],
)
def test_the_demo_command_builds_its_config_as_the_config_layer_does(flags, monkeypatch):
    """`veriloop demo`'s config is DemoConfig's defaults under the flags, nothing pinned on top: a nested
    --train.algo takes its recipe's defaults and a --train.task its own verifier, as docs/configuration.md says."""
    got = []
    monkeypatch.setattr(demo_module, "run_demo", lambda cfg, progress: got.append(cfg))
    assert cli.main(["demo", "--quiet", *flags]) == 0
    assert got == [build_config(DemoConfig, {}, {flag[2:]: value for flag, value in zip(flags[::2], flags[1::2])})]


def test_every_train_option_reaches_the_sft_control_or_is_named():
    """Each train.* option is placed: passed to the control where it means the same in SFT, named as the GRPO
    runs' own, or refused; a set option that means the same (dtype, LoRA, the update's split) reaches it."""
    for key, *_ in iter_fields(TrainConfig):
        assert control_reach(key) in ("passes", "grpo-only", "refused"), key  # a new option must be placed
    over = {
        "train.dtype": "bfloat16",
        "train.lora.r": "4",
        "train.lora.alpha": "8",
        "train.update.inner_updates": "3",
        "train.update.micro_batch_size": "8",
        "train.optim.grad_clip": "0.5",
        "train.optim.lr": "1e-5",
        "train.rollout.prompts_per_step": "4",
        "train.kl.beta": "0.05",
        "sft_lr": "3e-4",
    }
    cfg = build_config(DemoConfig, {}, over)
    control = control_config(cfg, Path("runs/x/sft-control"), 90.0)
    assert (control.algo, control.dtype, control.lora.r, control.lora.alpha) == ("sft", "bfloat16", 4, 8.0)
    assert (control.update.inner_updates, control.update.micro_batch_size, control.optim.grad_clip) == (3, 8, 0.5)
    assert control.optim.lr == 3e-4 and control.max_minutes == 1.5  # its own: --sft_lr, the GRPO run's time
    assert control.rollout.prompts_per_step == 128 and control.rollout.source == "task-teacher"  # the sft recipe's
    plain = control_config(build_config(DemoConfig, {}, {}), Path("c"), 60.0)
    assert plain.update.inner_updates == 1 and plain.optim.weight_decay == 0.01 and plain.dtype == "float32"
    note = demo_module._control_note(cfg)
    assert "does not use train.rollout.prompts_per_step, train.kl.beta, train.optim.lr: settings of the GRPO" in note
    for key, value in (("train.export", "out"), ("train.run_dir", "runs/mine")):
        with pytest.raises(ConfigError, match=rf"{key} \('{value}'\) is not used by the demo"):
            build_config(DemoConfig, {}, {key: value})


# ---------------------------------------------------------------------------------------------------- stop, continue

SMALL = [
    "demo",
    "--quiet",
    "--train.steps",
    "4",
    "--train.rollout.prompts_per_step",
    "4",
    "--train.rollout.group_size",
    "4",
    "--train.task.arithmetic.heldout_size",
    "24",
    "--eval.n_samples",
    "8",
    "--sft_control",
    "false",
    "--process_run",
    "false",
]


def _start(args):
    """``veriloop demo`` in its own process, its stdout lines in a queue as they come."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "veriloop.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    return proc, lines


def _stop(proc, ready, timeout=180):
    """SIGTERM once ``ready()``; the exit status and stderr."""
    deadline = time.time() + timeout
    try:
        while not ready() and proc.poll() is None:
            assert time.time() < deadline, "the demo never got there"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


def _said(lines, text):
    def ready():
        while not lines.empty():
            if text in lines.get():
                return True
        return False

    return ready


@pytest.mark.timeout(600)
def test_a_demo_stopped_by_sigterm_continues_with_the_same_command_to_the_same_table(tmp_path):
    """SIGTERM during the first evaluation, then (the same command) during GRPO training: each stops at once with
    one line and exit 143, nothing half-written; the same command then finishes the demo in the same directory
    with the table and GRPO run of an uninterrupted demo."""
    demo = tmp_path / "demo"
    args = [*SMALL, "--run_dir", str(demo)]
    again = f"continue with the same command, or: veriloop demo --config {demo / 'demo.yaml'}"

    proc, lines = _start(args)
    code, err = _stop(proc, _said(lines, "evaluating the base"))
    assert code == 143, err[-3000:]
    assert f"veriloop demo: stopped by SIGTERM during evaluate base and teacher; {again}" in err
    state = json.loads((demo / "demo.json").read_text())
    assert not state["finished"] and not any(e["done"] for e in state["phases"].values())
    assert not (demo / "grpo").exists() and not list(demo.rglob(".*.tmp"))

    proc, _ = _start(args)  # the same command: continues this demo (no demo-2)
    metrics = demo / "grpo" / "metrics.jsonl"
    code, err = _stop(proc, lambda: metrics.is_file() and metrics.read_text().strip())
    assert code == 143, err[-3000:]
    line = next(x for x in err.splitlines() if x.startswith("veriloop demo: stopped"))
    assert line.startswith("veriloop demo: stopped by SIGTERM during train grpo (checkpoint of step ") and again in line
    phases = json.loads((demo / "demo.json").read_text())["phases"]
    assert phases["evaluate base and teacher"]["done"] and not phases["train grpo"]["done"]
    assert not (demo / "grpo" / "final").exists() and (demo / "grpo" / "checkpoints").is_dir()
    assert not (tmp_path / "demo-2").exists() and not list(demo.rglob(".*.tmp"))

    assert cli.main(args) == 0  # the same command again: finishes it
    assert not (tmp_path / "demo-2").exists()
    straight = tmp_path / "straight"
    assert cli.main([*SMALL, "--run_dir", str(straight)]) == 0
    assert (demo / "table.txt").read_text() == (straight / "table.txt").read_text()
    summary, want = (json.loads((d / "summary.json").read_text()) for d in (demo, straight))
    assert {k: v for k, v in summary.items() if "seconds" not in k and k != "run_dir"} == {
        k: v for k, v in want.items() if "seconds" not in k and k != "run_dir"
    }
    assert list(summary["phase_seconds"]) == ["evaluate base and teacher", "train grpo", "evaluate grpo"]
    drop = lambda rows: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]  # noqa: E731
    assert drop(read_jsonl(metrics)) == drop(read_jsonl(straight / "grpo" / "metrics.jsonl"))
    assert json.loads((demo / "demo.json").read_text())["finished"]
    assert cli.main(args) == 0 and (tmp_path / "demo-2" / "summary.json").is_file()  # a finished one: a new one


@pytest.mark.timeout(600)
def test_a_demo_stopped_while_its_runs_train_side_by_side_continues_each_from_its_checkpoint(tmp_path):
    """SIGTERM while the GRPO run, the control and the process run train side by side: each run writes its
    checkpoint and ends, the demo says where with exit 143; the same command continues each run from its
    checkpoint (no step done twice or missed) and finishes the demo."""
    demo = tmp_path / "demo"
    args = [
        "demo",
        "--quiet",
        "--run_dir",
        str(demo),
        "--train.steps",
        "6",
        "--train.rollout.prompts_per_step",
        "4",
        "--train.rollout.group_size",
        "4",
        "--train.task.arithmetic.heldout_size",
        "16",
        "--eval.n_samples",
        "0",
    ]
    proc, _ = _start(args)
    metrics = demo / "grpo" / "metrics.jsonl"
    code, err = _stop(proc, lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 2)
    assert code == 143, err[-3000:]
    line = next(x for x in err.splitlines() if x.startswith("veriloop demo: stopped"))
    assert line.startswith(
        "veriloop demo: stopped by SIGTERM during train grpo, sft-control, grpo-process "
        "(checkpoints written: grpo step "
    ), line
    state = json.loads((demo / "demo.json").read_text())
    assert not state["finished"] and not state["phases"]["train grpo, sft-control, grpo-process"]["done"]
    assert not (demo / "grpo" / "final").exists() and (demo / "grpo" / "checkpoints").is_dir()
    assert not list(demo.rglob(".*.tmp"))

    assert cli.main(args) == 0  # the same command: continues each run, then evaluates
    assert not (tmp_path / "demo-2").exists()
    for name in ("grpo", "grpo-process"):
        steps = [r["step"] for r in read_jsonl(demo / name / "metrics.jsonl")]
        assert steps == list(range(1, 7)), (name, steps)
    runs = json.loads((demo / "demo.json").read_text())["phases"]["train grpo, sft-control, grpo-process"]["runs"]
    assert all(r["done"] for r in runs.values()) and set(runs) == {"grpo", "sft-control", "grpo-process"}
    assert json.loads((demo / "summary.json").read_text())["side_by_side"] is True


@pytest.mark.timeout(300)  # its trainings run in spawned processes
def test_a_side_by_side_run_refusing_its_input_stops_the_demo_with_one_line(tmp_path, capsys):
    """An input error that only a run's own checks meet (here its context: 12 prompt tokens + 250 new > 256) is
    said as one line naming the run, exit 2, like the same error in `veriloop train`; the other runs are ended."""
    args = [
        "demo",
        "--quiet",
        "--run_dir",
        str(tmp_path / "demo"),
        "--train.steps",
        "2",
        "--train.rollout.prompts_per_step",
        "4",
        "--train.rollout.group_size",
        "4",
        "--train.task.arithmetic.heldout_size",
        "8",
        "--eval.n_samples",
        "0",
        "--train.sampling.max_new_tokens",
        "250",
    ]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "veriloop demo: error: the demo's grpo" in err and "has a context of 256 tokens" in err
    assert "Traceback" not in err
    assert not json.loads((tmp_path / "demo" / "demo.json").read_text())["finished"]
