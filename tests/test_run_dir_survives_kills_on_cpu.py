"""Run directories survive any kill: a run killed before its first checkpoint starts over on ``--resume``, a
damaged checkpoint is found by its manifest and the one before it used, what a kill mid-write leaves is
cleared, and Ctrl-C stops like SIGTERM.  Every resumed run is compared with the uninterrupted one (metrics
rows without timings, final weights bit for bit), on the tiny built-in model."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from veriloop import cli
from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.models.loading import load_policy
from veriloop.models.tiny import TinyModelConfig, build_char_tokenizer, build_tiny_model
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.records import RecordStore
from veriloop.training import checkpoint as ckpt
from veriloop.training.checkpoint import check_checkpoint
from veriloop.training.config import TrainConfig
from veriloop.training.metrics import TIMING_KEYS, MetricsLog
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)

PLUGIN = '''
from veriloop import verifiers


@verifiers.register("test-kill-digits")
class Digits(verifiers.Verifier):
    """Share of digits in the completion: a reward the random tiny model varies on, so the policy moves."""

    name, version = "test-kill-digits", "1"

    def verify(self, completion, reference):
        score = sum(c.isdigit() for c in completion) / max(len(completion), 1)
        return self._verdict(score, {"digits": score})
'''

# A command-line run: long enough (in steps) that a signal sent after its first step lands well before its end.
LONG = {"steps": 40, "checkpoint_every": 1000, "verifier": "test-kill-digits", "rollout.prompts_per_step": 2,
        "rollout.group_size": 2, "sampling.max_new_tokens": 8, "kl.beta": 0.05, "optim.lr": 1e-3,
        "task.arithmetic.heldout_size": 10, "threads": 1}  # fmt: skip
# An in-process run with a checkpoint at steps 2 and 4.
SHORT = {**LONG, "steps": 4, "checkpoint_every": 2, "rollout.prompts_per_step": 4, "update.micro_batch_size": 6,
         "sampling.max_new_tokens": 12}  # fmt: skip


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """The test verifier as a module: ``--plugin killplugin`` in the subprocesses, imported here too."""
    where = tmp_path_factory.mktemp("plugin")
    (where / "killplugin.py").write_text(PLUGIN)
    sys.path.insert(0, str(where))
    __import__("killplugin")
    yield where
    sys.path.remove(str(where))


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy")
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2),
                             seed=1)  # fmt: skip
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def config(policy, run_dir, base, **over):
    return build_config(TrainConfig, {}, {**base, "policy": policy, "run_dir": str(run_dir), **over})


def cli_args(policy, run_dir, **over):
    args = ["--plugin", "killplugin", "train", "--quiet", "--policy", policy, "--run_dir", str(run_dir)]
    for k, v in {**LONG, **over}.items():
        args += [f"--{k}", str(v)]
    return args


def start_cli(plugin_dir, args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "veriloop.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def wait_for_rows(proc, run_dir, rows, timeout=180):
    """Until metrics.jsonl holds at least ``rows`` rows (the run's signal handlers are in place by then)."""
    metrics, deadline = Path(run_dir) / "metrics.jsonl", time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= rows:
            return
        time.sleep(0.01)
    raise AssertionError(f"the run never wrote {rows} metric rows (exit {proc.poll()})")


def comparable(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


def metric_rows(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(run_dir, straight_dir):
    got, want = metric_rows(run_dir), metric_rows(straight_dir)
    assert [r["step"] for r in got] == [r["step"] for r in want]  # every step once, in order
    assert comparable(got) == comparable(want)
    a = load_policy(str(Path(run_dir) / "final")).model.state_dict()
    b = load_policy(str(Path(straight_dir) / "final")).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert set(Ledger(run_dir).done_counts().values()) == {1}  # every request done exactly once


@pytest.fixture(scope="module")
def straight_long(tiny_policy, plugin_dir, tmp_path_factory):
    """The uninterrupted LONG run, in this process."""
    run_dir = tmp_path_factory.mktemp("straight-long") / "run"
    Trainer(config(tiny_policy, run_dir, LONG), progress=False).train()
    assert metric_rows(run_dir)[-1]["kl"] > 0  # the policy moved: equal results are not trivially equal
    return run_dir


@pytest.fixture(scope="module")
def straight_short(tiny_policy, plugin_dir, tmp_path_factory):
    """The uninterrupted SHORT run, in this process: checkpoints of steps 2 and 4, final/."""
    run_dir = tmp_path_factory.mktemp("straight-short") / "run"
    Trainer(config(tiny_policy, run_dir, SHORT), progress=False).train()
    assert metric_rows(run_dir)[-1]["kl"] > 0
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000002", "step-000004"]
    return run_dir


def interrupted_copy(straight_dir, dest):
    """The straight SHORT run as a run killed after step 4's checkpoint: no final/ (the resume must write it)."""
    shutil.copytree(straight_dir, dest)
    shutil.rmtree(dest / "final")
    return dest


# ---------------------------------------------------------------------------------------------------- (a)


@pytest.mark.timeout(420)
def test_a_run_killed_before_its_first_checkpoint_starts_over_on_resume(tiny_policy, plugin_dir, straight_long,
                                                                         tmp_path, capsys):  # fmt: skip
    run_dir = tmp_path / "run"
    proc = start_cli(plugin_dir, cli_args(tiny_policy, run_dir))
    try:
        wait_for_rows(proc, run_dir, 2)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not ckpt.list_checkpoints(run_dir) and not (run_dir / "final").exists()  # killed before the first one
    rows_before = len([line for line in (run_dir / "metrics.jsonl").read_bytes().splitlines() if line.strip()])
    assert 2 <= rows_before < 40 and RecordStore(run_dir / "rollouts").steps()

    # a fresh start there is refused, and says that --resume starts it over
    assert cli.main(cli_args(tiny_policy, run_dir)) == 2
    err = capsys.readouterr().err
    assert "before its first complete checkpoint" in err and f"veriloop train --resume {run_dir}` starts it over" in err
    assert "continue it" not in err

    assert cli.main(["--plugin", "killplugin", "train", "--quiet", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "starting the run over from step 0" in line]
    assert len(said) == 1 and "no complete checkpoint" in said[0] and "metrics row" in said[0], err
    assert_same_run(run_dir, straight_long)
    assert not list(run_dir.glob(".*.tmp")) and not list((run_dir / "rollouts").glob(".*.tmp"))


def test_resume_without_a_checkpoint_starts_over_and_leaves_other_directories_alone(tiny_policy, plugin_dir,
                                                                                     straight_short, tmp_path, capsys):
    """In process: a run stopped after 3 steps (its checkpoints removed, as if killed before the first) starts
    over from step 0 and equals the uninterrupted run; an empty directory still has nothing to resume."""
    run_dir = tmp_path / "run"
    Trainer(config(tiny_policy, run_dir, SHORT, steps=3, checkpoint_every=1000), progress=False).train()
    shutil.rmtree(run_dir / "checkpoints")
    shutil.rmtree(run_dir / "final")
    capsys.readouterr()
    with pytest.raises(InputError, match="starts it over from step 0"):
        Trainer(config(tiny_policy, run_dir, SHORT), progress=False)
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "discarding 3 metrics rows, the rollouts of 3 steps" in err
    assert resumed.state.step == 0 and resumed.metrics.rows == [] and not (run_dir / "ledger.jsonl").exists()
    assert RecordStore(run_dir / "rollouts").steps() == [] and (run_dir / "config.yaml").is_file()
    resumed.train()
    assert_same_run(run_dir, straight_short)

    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):  # as before: no config.yaml, nothing
        Trainer(config(tiny_policy, tmp_path / "empty", SHORT), resume=True, progress=False)
    assert not (tmp_path / "empty").exists()


# ---------------------------------------------------------------------------------------------------- (b)


def truncate_weights(step_dir):
    path = step_dir / "model" / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return f"model/model.safetensors has {len(data) // 2} bytes, the manifest says {len(data)}"


def flip_optimizer_bytes(step_dir):
    path = step_dir / "optimizer.pt"
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 64, len(data) - 56):  # same size: only the hash tells
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return "optimizer.pt does not match its SHA-256 in the manifest"


def delete_manifest(step_dir):
    (step_dir / "manifest.json").unlink()
    return "manifest.json is missing"


DAMAGE = {"truncated safetensors": truncate_weights, "flipped bytes in optimizer.pt": flip_optimizer_bytes,
          "deleted manifest": delete_manifest}  # fmt: skip


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_latest_checkpoint_is_named_and_the_one_before_it_used(tiny_policy, plugin_dir, straight_short,
                                                                        tmp_path, capsys, damage):  # fmt: skip
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    latest = run_dir / "checkpoints" / "step-000004"
    assert check_checkpoint(latest) == ("ok", "")
    why = damage(latest)
    assert check_checkpoint(latest) == ("bad", why)
    capsys.readouterr()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = capsys.readouterr().err
    assert f"checkpoint {latest} is damaged: {why}" in err
    assert resumed.state.step == 2 and [r["step"] for r in resumed.metrics.rows] == [1, 2]
    assert (run_dir / "checkpoints" / ".step-000004.damaged").is_dir()  # set aside, not in any listing
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000002"]
    resumed.train()
    assert_same_run(run_dir, straight_short)
    assert check_checkpoint(latest) == ("ok", "")  # written again, whole


def test_every_checkpoint_damaged_starts_the_run_over(tiny_policy, plugin_dir, straight_short, tmp_path, capsys):
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    truncate_weights(run_dir / "checkpoints" / "step-000004")
    flip_optimizer_bytes(run_dir / "checkpoints" / "step-000002")
    capsys.readouterr()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = capsys.readouterr().err
    assert "step-000004 is damaged: model/model.safetensors has" in err
    assert "step-000002 is damaged: optimizer.pt does not match its SHA-256" in err
    assert "no valid checkpoint (every one is damaged)" in err and "starting the run over from step 0" in err
    assert resumed.state.step == 0 and resumed.metrics.rows == []
    resumed.train()
    assert_same_run(run_dir, straight_short)


def test_a_checkpoint_without_a_manifest_from_an_older_version_loads_with_a_warning(tiny_policy, plugin_dir,
                                                                                   straight_short, tmp_path, capsys):
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    for step_dir in ckpt.list_checkpoints(run_dir):  # as an older veriloop wrote them
        (step_dir / "manifest.json").unlink()
        state = json.loads((step_dir / "trainer_state.json").read_text())
        del state["manifest"]
        (step_dir / "trainer_state.json").write_text(json.dumps(state))
    assert check_checkpoint(run_dir / "checkpoints" / "step-000004")[0] == "unverified"
    capsys.readouterr()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = capsys.readouterr().err
    assert "step-000004: no manifest.json" in err and "loading it unverified" in err
    assert resumed.state.step == 4
    resumed.train()  # nothing left to run: writes final/
    assert_same_run(run_dir, straight_short)


# ---------------------------------------------------------------------------------------------------- (c)


@pytest.mark.timeout(420)
def test_sigint_checkpoints_exits_0_and_resume_runs_each_step_once(tiny_policy, plugin_dir, straight_long, tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli(plugin_dir, cli_args(tiny_policy, run_dir))
    try:
        wait_for_rows(proc, run_dir, 1)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    (checkpoint,) = ckpt.list_checkpoints(run_dir)
    steps_done = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    assert 1 <= steps_done < 40 and not (run_dir / "final").exists()
    assert f"SIGINT received: checkpoint of step {steps_done} written; continue with `veriloop train --resume " \
           f"{run_dir}`" in out
    assert "Ctrl-C again to quit at once" in err
    assert check_checkpoint(checkpoint) == ("ok", "")
    assert [r["step"] for r in metric_rows(run_dir)] == list(range(1, steps_done + 1))

    assert cli.main(["--plugin", "killplugin", "train", "--quiet", "--resume", str(run_dir)]) == 0
    assert_same_run(run_dir, straight_long)  # each step exactly once, the uninterrupted run's results


def test_a_second_sigint_raises_keyboard_interrupt_and_the_handlers_are_put_back(tiny_policy, plugin_dir, tmp_path):
    """In process: the first SIGINT (sent during step 2) stops the run after that step with a checkpoint; two of
    them raise KeyboardInterrupt out of ``train``; either way SIGINT's and SIGTERM's handlers are restored."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    for sends, run_dir in ((1, tmp_path / "once"), (2, tmp_path / "twice")):
        trainer = Trainer(config(tiny_policy, run_dir, SHORT), progress=False)
        real_step = trainer.train_step

        def step(n, real_step=real_step, sends=sends):
            if n == 2:
                for _ in range(sends):
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.05)  # the handler runs in the main thread between bytecodes
            return real_step(n)

        trainer.train_step = step
        if sends == 1:
            trainer.train()
            assert trainer.stop_signal == "SIGINT received" and trainer.state.step == 2
            assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000002"]
            assert not (run_dir / "final").exists()
        else:
            with pytest.raises(KeyboardInterrupt):
                trainer.train()
            assert trainer.state.step == 1 and not ckpt.list_checkpoints(run_dir)
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# ---------------------------------------------------------------------------------------------------- (d)


def test_a_cut_metrics_line_and_other_leftovers_of_a_kill_past_the_checkpoint(tiny_policy, plugin_dir,
                                                                            straight_short, tmp_path, capsys):
    """Killed during step 4 after step 2's checkpoint: metrics.jsonl's last line cut, a cut rollouts file and
    ledger line, step 4's temporary checkpoint and temporary files of atomic writes left behind."""
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    shutil.rmtree(run_dir / "checkpoints" / "step-000004")
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # row 4 cut in the middle
    rollouts = run_dir / "rollouts" / "step-000004.jsonl.gz"
    rollouts.write_bytes(rollouts.read_bytes()[:40])
    with open(run_dir / "ledger.jsonl", "a") as f:
        f.write('{"event": "issued", "request_id": "5-0-')
    leftovers = [run_dir / ".metrics.jsonl.x1y2.tmp", run_dir / "rollouts" / ".step-000005.jsonl.gz.ab12.tmp",
                 run_dir / "rollouts" / "requests" / ".5-0-0.jsonl.gz.cd34.tmp"]  # fmt: skip
    for p in leftovers:
        p.write_bytes(b"half of something")
    partial = run_dir / "checkpoints" / ".step-000004.tmp"
    (partial / "model").mkdir(parents=True)
    (partial / "model" / "model.safetensors").write_bytes(b"\0" * 100)

    with pytest.raises(InputError, match="metrics.jsonl:2: not a metrics row"):  # a cut line before the last one
        (tmp_path / "bad").mkdir()
        bad = tmp_path / "bad" / "metrics.jsonl"
        bad.write_bytes(lines[0] + lines[1][:20] + b"\n" + lines[2])
        MetricsLog(bad)
    capsys.readouterr()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = capsys.readouterr().err
    assert "metrics.jsonl:4: dropping the last line" in err
    assert resumed.state.step == 2 and [r["step"] for r in resumed.metrics.rows] == [1, 2]
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2]  # rewritten without the rows past the checkpoint
    assert RecordStore(run_dir / "rollouts").steps() == [1, 2]
    assert not partial.exists() and not any(p.exists() for p in leftovers)
    assert [e["step"] for e in Ledger(run_dir).events()] == [1, 1, 2, 2]  # the checkpoint's ledger, whole
    resumed.train()
    assert_same_run(run_dir, straight_short)


def test_a_kill_while_writing_a_checkpoint_keeps_the_previous_one(tiny_policy, plugin_dir, straight_short, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    """keep_checkpoints 1: the kill comes while step 4's checkpoint is written (before its rename); step 2's is
    still there and whole, and the run resumes from it to the uninterrupted result."""
    run_dir = tmp_path / "run"
    real_manifest = ckpt.write_manifest

    def killed_at_step_4(directory):
        if directory.name == ".step-000004.tmp":
            raise KeyboardInterrupt  # as a kill between the files and the manifest would leave it
        real_manifest(directory)

    monkeypatch.setattr(ckpt, "write_manifest", killed_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tiny_policy, run_dir, SHORT, keep_checkpoints=1), progress=False).train()
    monkeypatch.undo()
    assert (run_dir / "checkpoints" / ".step-000004.tmp" / "optimizer.pt").is_file()
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000002"]
    assert check_checkpoint(run_dir / "checkpoints" / "step-000002") == ("ok", "")
    resumed = Trainer(config(tiny_policy, run_dir, SHORT, keep_checkpoints=1), resume=True, progress=False)
    assert resumed.state.step == 2 and not (run_dir / "checkpoints" / ".step-000004.tmp").exists()
    resumed.train()
    assert_same_run(run_dir, straight_short)
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000004"]  # pruned once step 4's was in place
    manifest = json.loads((run_dir / "checkpoints" / "step-000004" / "manifest.json").read_text())
    listed = {e["path"] for e in manifest["files"]}
    on_disk = {p.relative_to(run_dir / "checkpoints" / "step-000004").as_posix()
               for p in (run_dir / "checkpoints" / "step-000004").rglob("*") if p.is_file()}  # fmt: skip
    assert listed == on_disk - {"manifest.json"} and "model/model.safetensors" in listed
