"""Run directories survive any kill: a run killed before its first checkpoint starts over on ``--resume``, a
damaged checkpoint is found by its manifest and the one before it used, what a kill mid-write leaves is
cleared, and Ctrl-C stops like SIGTERM.  Every resumed run is compared with the uninterrupted one (metrics
rows without timings, final weights bit for bit), on the tiny built-in model."""

import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from veriloop import cli
from veriloop.config import build_config
from veriloop.errors import InputError
from veriloop.models.loading import Policy, load_policy
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.records import RecordStore
from veriloop.training.config import TrainConfig
from veriloop.training.run import checkpoint as ckpt
from veriloop.training.run.checkpoint import check_checkpoint
from veriloop.training.run.metrics import TIMING_KEYS, MetricsLog
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
# mask_truncated false: the random tiny model rarely ends within 8-12 tokens, and masked cut completions would leave
# it nothing to learn from (the policy must move, or equal results would be trivially equal)
LONG = {
    "steps": 40,
    "checkpoint_every": 1000,
    "verifier": "test-kill-digits",
    "rollout.prompts_per_step": 2,
    "rollout.group_size": 2,
    "sampling.max_new_tokens": 8,
    "kl.beta": 0.05,
    "optim.lr": 1e-3,
    "task.arithmetic.heldout_size": 10,
    "threads": 1,
    "update.mask_truncated": False,
}
# An in-process run with a checkpoint at steps 2 and 4.
SHORT = {
    **LONG,
    "steps": 4,
    "checkpoint_every": 2,
    "rollout.prompts_per_step": 4,
    "update.micro_batch_size": 6,
    "sampling.max_new_tokens": 12,
}


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """The test verifier as a module: ``--plugin killplugin`` in the subprocesses, imported here too."""
    where = tmp_path_factory.mktemp("plugin")
    (where / "killplugin.py").write_text(PLUGIN)
    sys.path.insert(0, str(where))
    __import__("killplugin")
    yield where
    sys.path.remove(str(where))


def config(policy, run_dir, base, **over):
    return build_config(TrainConfig, {}, {**base, "policy": policy, "run_dir": str(run_dir), **over})


def cli_args(policy, run_dir, **over):
    args = ["--plugin", "killplugin", "train", "--quiet", "--policy", policy, "--run_dir", str(run_dir)]
    for k, v in {**LONG, **over}.items():
        args += [f"--{k}", str(v)]
    return args


def start_cli(plugin_dir, args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])}
    # Ctrl-C as a terminal delivers it: a run started in the background (`make test &`) inherits SIGINT ignored,
    # and the trainer rightly keeps an ignored SIGINT ignored
    return subprocess.Popen(
        [sys.executable, "-m", "veriloop.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_sigint,
    )


def _default_sigint():
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
def test_a_run_killed_before_its_first_checkpoint_starts_over_on_resume(
    tiny_policy, plugin_dir, straight_long, tmp_path, capsys
):
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


def test_resume_without_a_checkpoint_starts_over_and_leaves_other_directories_alone(
    tiny_policy, plugin_dir, straight_short, tmp_path, caplog
):
    """In process: a run stopped after 3 steps (its checkpoints removed, as if killed before the first) starts
    over from step 0 and equals the uninterrupted run; an empty directory still has nothing to resume."""
    run_dir = tmp_path / "run"
    Trainer(config(tiny_policy, run_dir, SHORT, steps=3, checkpoint_every=1000), progress=False).train()
    shutil.rmtree(run_dir / "checkpoints")
    shutil.rmtree(run_dir / "final")
    caplog.clear()
    with pytest.raises(InputError, match="starts it over from step 0"):
        Trainer(config(tiny_policy, run_dir, SHORT), progress=False)
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = caplog.text  # a library warning: through logging (the command line shows it on stderr)
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


DAMAGE = {
    "truncated safetensors": truncate_weights,
    "flipped bytes in optimizer.pt": flip_optimizer_bytes,
    "deleted manifest": delete_manifest,
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_latest_checkpoint_is_named_and_the_one_before_it_used(
    tiny_policy, plugin_dir, straight_short, tmp_path, caplog, damage
):
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    latest = run_dir / "checkpoints" / "step-000004"
    assert check_checkpoint(latest) == ("ok", "")
    why = damage(latest)
    assert check_checkpoint(latest) == ("bad", why)
    caplog.clear()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = caplog.text  # a library warning: through logging (the command line shows it on stderr)
    assert f"checkpoint {latest} is damaged: {why}" in err
    assert resumed.state.step == 2 and [r["step"] for r in resumed.metrics.rows] == [1, 2]
    assert (run_dir / "checkpoints" / ".step-000004.damaged").is_dir()  # set aside, not in any listing
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000002"]
    resumed.train()
    assert_same_run(run_dir, straight_short)
    assert check_checkpoint(latest) == ("ok", "")  # written again, whole


def test_every_checkpoint_damaged_starts_the_run_over(tiny_policy, plugin_dir, straight_short, tmp_path, caplog):
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    truncate_weights(run_dir / "checkpoints" / "step-000004")
    flip_optimizer_bytes(run_dir / "checkpoints" / "step-000002")
    caplog.clear()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = caplog.text  # library warnings: through logging (the command line shows them on stderr)
    assert "step-000004 is damaged: model/model.safetensors has" in err
    assert "step-000002 is damaged: optimizer.pt does not match its SHA-256" in err
    assert "no valid checkpoint (every one is damaged)" in err and "starting the run over from step 0" in err
    assert resumed.state.step == 0 and resumed.metrics.rows == []
    resumed.train()
    assert_same_run(run_dir, straight_short)


def test_a_checkpoint_without_a_manifest_from_an_older_version_loads_with_a_warning(
    tiny_policy, plugin_dir, straight_short, tmp_path, caplog
):
    run_dir = interrupted_copy(straight_short, tmp_path / "run")
    for step_dir in ckpt.list_checkpoints(run_dir):  # as an older veriloop wrote them
        (step_dir / "manifest.json").unlink()
        state = json.loads((step_dir / "trainer_state.json").read_text())
        del state["manifest"]
        (step_dir / "trainer_state.json").write_text(json.dumps(state))
    assert check_checkpoint(run_dir / "checkpoints" / "step-000004")[0] == "unverified"
    caplog.clear()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = caplog.text  # a library warning: through logging (the command line shows it on stderr)
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
    assert (
        f"SIGINT received: checkpoint of step {steps_done} written; continue with `veriloop train --resume "
        f"{run_dir}`" in out
    )
    assert "Ctrl-C again to quit at once" in err
    assert check_checkpoint(checkpoint) == ("ok", "")
    assert [r["step"] for r in metric_rows(run_dir)] == list(range(1, steps_done + 1))

    assert cli.main(["--plugin", "killplugin", "train", "--quiet", "--resume", str(run_dir)]) == 0
    assert_same_run(run_dir, straight_long)  # each step exactly once, the uninterrupted run's results


def test_a_second_sigint_raises_keyboard_interrupt_and_the_handlers_are_put_back(tiny_policy, plugin_dir, tmp_path):
    """In process: the first SIGINT (sent during step 2) stops the run after that step with a checkpoint; two of
    them raise KeyboardInterrupt out of ``train``; either way SIGINT's and SIGTERM's handlers are restored."""
    # as in a terminal, even where this session was started with SIGINT ignored (see start_cli)
    ignored = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
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
    finally:
        signal.signal(signal.SIGINT, ignored)


# ---------------------------------------------------------------------------------------------------- (d)


def test_a_cut_metrics_line_and_other_leftovers_of_a_kill_past_the_checkpoint(
    tiny_policy, plugin_dir, straight_short, tmp_path, caplog
):
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
    leftovers = [
        run_dir / ".metrics.jsonl.x1y2.tmp",
        run_dir / "rollouts" / ".step-000005.jsonl.gz.ab12.tmp",
        run_dir / "rollouts" / "requests" / ".5-0-0.jsonl.gz.cd34.tmp",
    ]
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
    caplog.clear()
    resumed = Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False)
    err = caplog.text  # a library warning: through logging (the command line shows it on stderr)
    assert "metrics.jsonl:4: dropping the last line" in err
    assert resumed.state.step == 2 and [r["step"] for r in resumed.metrics.rows] == [1, 2]
    assert [r["step"] for r in metric_rows(run_dir)] == [1, 2]  # rewritten without the rows past the checkpoint
    assert RecordStore(run_dir / "rollouts").steps() == [1, 2]
    assert not partial.exists() and not any(p.exists() for p in leftovers)
    assert [e["step"] for e in Ledger(run_dir).events()] == [1, 1, 2, 2]  # the checkpoint's ledger, whole
    resumed.train()
    assert_same_run(run_dir, straight_short)


def test_a_kill_while_writing_a_checkpoint_keeps_the_previous_one(
    tiny_policy, plugin_dir, straight_short, tmp_path, monkeypatch
):
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
    on_disk = {
        p.relative_to(run_dir / "checkpoints" / "step-000004").as_posix()
        for p in (run_dir / "checkpoints" / "step-000004").rglob("*")
        if p.is_file()
    }
    assert listed == on_disk - {"manifest.json"} and "model/model.safetensors" in listed


def test_a_kill_while_pruning_an_old_checkpoint_leaves_no_half_of_it(
    tiny_policy, plugin_dir, straight_short, tmp_path, monkeypatch
):
    """keep_checkpoints 1: the kill comes while step 2's checkpoint is removed, once step 4's is in place (its
    trainer_state.json already gone, the rest not).  What is left is no checkpoint, under no checkpoint's name:
    the resume clears it, and it is not left behind for good."""
    run_dir, real_rmtree = tmp_path / "run", shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        if "step-000002" in Path(path).name and (Path(path) / "trainer_state.json").exists():
            (Path(path) / "trainer_state.json").unlink()
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tiny_policy, run_dir, SHORT, keep_checkpoints=1), progress=False).train()
    monkeypatch.undo()
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step-000004"]
    assert not (run_dir / "checkpoints" / "step-000002").exists()  # a half checkpoint is never under its name
    resumed = Trainer(config(tiny_policy, run_dir, SHORT, keep_checkpoints=1), resume=True, progress=False)
    assert resumed.state.step == 4 and [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-000004"]
    resumed.train()
    assert_same_run(run_dir, straight_short)


def test_a_kill_while_final_is_written_leaves_no_half_final(
    tiny_policy, plugin_dir, straight_short, tmp_path, monkeypatch
):
    """final/ is built as .final.tmp and renamed into place: a kill after the weights, before the rest (the
    tokenizer's rewrite, veriloop_train.json), leaves no final/; the resume clears .final.tmp and writes it."""
    run_dir, real_save = interrupted_copy(straight_short, tmp_path / "run"), Policy.save_merged

    def killed_midway(self, path):
        real_save(self, path)
        raise KeyboardInterrupt

    monkeypatch.setattr(Policy, "save_merged", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False).train()
    monkeypatch.undo()
    assert not (run_dir / "final").exists() and (run_dir / ".final.tmp" / "model.safetensors").is_file()
    Trainer(config(tiny_policy, run_dir, SHORT), resume=True, progress=False).train()
    assert_same_run(run_dir, straight_short)
    assert not (run_dir / ".final.tmp").exists() and (run_dir / "final" / "veriloop_train.json").is_file()


# ---------------------------------------------------------------------------------------------------- (e)
# The kill drill: SIGKILL a `veriloop train` process again and again, at moments a seeded schedule draws, inside
# each phase of a step, and `--resume` it until it completes; the result must be the uninterrupted run's.

DRILL = {
    "steps": 6,
    "checkpoint_every": 1,
    "keep_checkpoints": 1,
    "rollout.prompts_per_step": 4,
    "rollout.request_groups": 1,
    "update.micro_batch_size": 6,
    "sampling.max_new_tokens": 12,
}
PHASES = ("sampling", "verification", "update", "records", "checkpoint")  # each gets at least one kill
FSYNC_DELAY = 0.02  # a slow disk: each fsync takes this long, so a write lasts long enough to be killed inside
PAUSE = {"verification": 0.1, "update": 0.05}  # the phases that write nothing last this much longer

# The processes the drill kills are forks of this one, which imported veriloop (and torch) once: a fresh
# `python -m veriloop.cli` spends seconds on imports, the drill starts a dozen.  A fork runs `cli.main(argv)` as
# the `veriloop` command does; the only differences are the slow fsync and the marks: wrappers that append
# "pid phase start|end step time" to a file around each phase, so that the test knows when a phase runs (to kill
# inside it) and where each kill landed (the phases it started and never ended).
ZYGOTE = r"""
import json, os, sys, time, traceback

marks_path, fsync_delay, pauses = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
import killplugin  # noqa: F401  (the --plugin of the runs: imported once, here)
from veriloop import cli
from veriloop.report import report  # noqa: F401  (written after each run: imported once, here)
from veriloop.rollout.engine import LocalEngine
from veriloop.rollout.records import RecordStore
from veriloop.training.loop.collect import Collector
from veriloop.training.trainer import Trainer

MARKS, STEP = os.open(marks_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), [0]


def mark(phase, edge, step):
    os.write(MARKS, f"{os.getpid()} {phase} {edge} {step} {time.time():.6f}\n".encode())


def marked(cls, name, phase, step_of):
    real = getattr(cls, name)

    def wrapper(*args, **kwargs):
        step = step_of(*args)
        mark(phase, "start", step)
        time.sleep(pauses.get(phase, 0.0))
        out = real(*args, **kwargs)
        mark(phase, "end", step)
        return out

    setattr(cls, name, wrapper)


def train_step(self, step):
    STEP[0] = step
    return step


marked(Trainer, "__init__", "init", lambda *a: 0)
marked(Trainer, "train_step", "step", train_step)
marked(LocalEngine, "run", "sampling", lambda self, requests, *a: requests[0].step)
marked(Collector, "score", "verification", lambda *a: STEP[0])
marked(Trainer, "learn", "update", lambda self, step, *a: step)
marked(RecordStore, "write", "records", lambda self, step, *a: step)
marked(Trainer, "checkpoint", "checkpoint", lambda self: self.state.step)
marked(Trainer, "save_final", "final", lambda self: self.state.step)
real_fsync = os.fsync


def slow_fsync(fd):
    time.sleep(fsync_delay)
    real_fsync(fd)


os.fsync = slow_fsync
print("ready", flush=True)
for line in sys.stdin:
    argv, log = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            mark("process", "start", 0)
            code = cli.main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class Zygote:
    """The process that forks the drill's `veriloop train` processes and reports how each ended."""

    def __init__(self, plugin_dir, marks: Path):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, str(marks), str(FSYNC_DELAY), json.dumps(PAUSE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue = queue.Queue()
        reader = threading.Thread(
            target=lambda: [self.lines.put(line.strip()) for line in self.proc.stdout], daemon=True
        )
        reader.start()
        self.ready = False

    def _line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the drill's zygote said nothing for {timeout} s (exit {self.proc.poll()})") from None

    def start(self, argv: list[str], log: Path) -> int:
        if not self.ready:
            assert self._line(180) == "ready"
            self.ready = True
        self.proc.stdin.write(json.dumps([argv, str(log)]) + "\n")
        self.proc.stdin.flush()
        self.code = None
        return int(self._line(30))

    def exited(self) -> bool:
        if self.code is None and not self.lines.empty():
            self.code = int(self.lines.get())
        return self.code is not None

    def wait(self, timeout: float) -> int:
        if self.code is None:
            self.code = int(self._line(timeout))
        return self.code

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc.kill()


class Marks:
    """The zygote's marks: (pid, phase, edge, step, time) rows, read as they are appended."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rows = path, 0, []

    def poll(self) -> list:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.decode().splitlines():
            pid, phase, edge, step, t = line.split()
            self.rows.append((int(pid), phase, edge, int(step), float(t)))
        return self.rows

    def first(self, pid: int, phase: str, edge: str, step: int | None = None):
        return next((r for r in self.rows if r[:3] == (pid, phase, edge) and step in (None, r[3])), None)

    def open_phases(self, pid: int) -> list[str]:
        """The phases that process started and never ended (where a kill landed), outermost first."""
        stack = []
        for p, phase, edge, _, _ in self.rows:
            if p == pid:
                stack.append(phase) if edge == "start" else stack.remove(phase)
        return stack

    def durations(self, phase: str) -> list[float]:
        starts, out = {}, []
        for pid, p, edge, step, t in self.rows:
            if p == phase and edge == "start":
                starts[pid, step] = t
            elif p == phase and (pid, step) in starts:
                out.append(t - starts.pop((pid, step)))
        return out


@pytest.fixture
def zygote(plugin_dir, tmp_path):
    """Started before the uninterrupted run (its imports take seconds, on the other core)."""
    (tmp_path / "marks").touch()
    z = Zygote(plugin_dir, tmp_path / "marks")
    yield z
    z.close()


@pytest.fixture(scope="module")
def straight_drill(tiny_policy, plugin_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight-drill") / "run"
    Trainer(config(tiny_policy, run_dir, {**LONG, **DRILL}), progress=False).train()
    assert metric_rows(run_dir)[-1]["kl"] > 0
    return run_dir


def median(values: list[float], default: float) -> float:
    return sorted(values)[len(values) // 2] if values else default


def drill_schedule(seed: int) -> list[tuple[str, float, float]]:
    """(what to kill, where in the run's remaining steps, how far into the moment): each phase once, in a seeded
    order, then two kills at random moments of a random step, one while a resumed run starts up (reading its
    checkpoint, clearing leftovers) and one while final/ is written."""
    rng = random.Random(seed)
    kinds = list(PHASES)
    rng.shuffle(kinds)
    extra = ["random", "random", "startup"]
    rng.shuffle(extra)
    return [(kind, rng.random(), rng.random()) for kind in kinds + extra + ["final"]]


@pytest.mark.timeout(300)
def test_kill_drill_sigkill_at_seeded_moments_of_every_phase_and_resume_to_the_same_run(
    zygote, tiny_policy, plugin_dir, straight_drill, tmp_path
):
    """A fresh run, then `--resume` again and again, each SIGKILLed at a moment of the seeded schedule: inside
    sampling, verification, the update, the write of a step's records and of a checkpoint (each at least once,
    again later if the phase ended before the kill), at random moments of a step, while a resumed run starts up
    and while final/ is written.  After every kill each complete checkpoint matches its manifest; at the end the
    run equals the uninterrupted one and nothing a kill left behind is still there.  ~30 s on 2 cores."""
    run_dir, marks, steps = tmp_path / "run", Marks(tmp_path / "marks"), DRILL["steps"]
    resume = ["--plugin", "killplugin", "train", "--quiet", "--resume", str(run_dir)]
    schedule, landed, done, retries = drill_schedule(17), [], False, 0
    while schedule and not done:
        kind, where, when = schedule.pop(0)
        latest = ckpt.find_latest_checkpoint(run_dir)
        ckpt_step = json.loads((latest / "trainer_state.json").read_text())["step"] if latest else 0
        # the step after the checkpoint or the one after it, not the last one while earlier ones are left (a kill
        # past the last step's checkpoint leaves a complete run, where only startup and final/ can be killed)
        last = steps - 1 if ckpt_step < steps - 1 else steps
        step = ckpt_step + 1 + int(where * min(2, last - ckpt_step)) if landed else 1  # first: before any checkpoint
        if ckpt_step == steps and kind != "final":
            kind = "startup"
        log = tmp_path / f"process-{len(landed)}.log"
        pid = zygote.start(cli_args(tiny_policy, run_dir, **DRILL) if not landed else resume, log)
        phase = {"random": "step", "startup": "process"}.get(kind, kind)
        typical = {
            "step": 0.6,
            "process": 1.0,
            "final": 0.1,
            "checkpoint": 0.3,
            "records": 2 * FSYNC_DELAY,
            "sampling": 0.2,
            **PAUSE,
        }
        length = median(marks.durations("init" if phase == "process" else phase), typical[phase])
        if kind == "random":  # anywhere in the step or its checkpoint
            length += median(marks.durations("checkpoint"), typical["checkpoint"])
        deadline, begun = time.time() + 120, None
        while begun is None and not zygote.exited() and time.time() < deadline:
            time.sleep(0.002)
            marks.poll()
            begun = marks.first(pid, phase, "start", None if phase in ("process", "final") else step)
        if begun is not None:
            time.sleep(max(begun[4] + when * length - time.time(), 0))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = zygote.wait(60)
        marks.poll()
        opened = marks.open_phases(pid)
        if code == 0:
            done = True  # the kill came after the run's end: it is complete
        else:
            assert code == -signal.SIGKILL, f"{kind} at step {step}: exit {code}\n" + log.read_text()[-5000:]
            landed.append((kind, step if phase not in ("process", "final") else "-", opened))
            if kind in PHASES and kind not in opened and retries < 6:  # it ended before the kill: again, later
                retries += 1
                schedule.insert(min(len(schedule), 2), (kind, where, when))
        for checkpoint in ckpt.list_checkpoints(run_dir):  # never a torn checkpoint under a complete name
            assert check_checkpoint(checkpoint) == ("ok", ""), (kind, step, opened)
    print("kills (what, step, phases the process was in):", *landed, sep="\n  ")
    assert {kind for kind, _, opened in landed if kind in opened} >= set(PHASES), landed
    assert len(landed) >= 7
    if not done:
        pid = zygote.start(resume, tmp_path / "last.log")
        assert zygote.wait(180) == 0, (tmp_path / "last.log").read_text()[-5000:]
    assert_same_run(run_dir, straight_drill)
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [f"step-{steps:06d}"]
    assert not list(run_dir.rglob(".*.tmp")) and not list(run_dir.rglob(".step-*"))
