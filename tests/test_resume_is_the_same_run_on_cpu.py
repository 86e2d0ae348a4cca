"""A resumed run is the same run: the config a resume would run is compared with the checkpoint's, a change
that would alter what the steps compute is refused naming each key (old -> new), a safe one is accepted and
recorded in history.jsonl with config.yaml rewritten to say it; config.yaml is checked against the run's
manifest.json (a cut or edited one is named, with what to do), and metrics.jsonl is put back from the
checkpoint's copy.  On the tiny built-in model, resumed runs are compared with the uninterrupted one."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from veriloop import cli, verifiers
from veriloop.config import build_config, to_dict
from veriloop.errors import InputError
from veriloop.io import MANIFEST, check_file, read_checked, write_checked
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.run import checkpoint as ckpt
from veriloop.training.run import run_dir as run_dir_module
from veriloop.training.run.checkpoint import flatten
from veriloop.training.run.metrics import TIMING_KEYS
from veriloop.training.run.run_dir import SAFE_TO_CHANGE, check_resume
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)


@verifiers.register("test-resume-digits")
class Digits(verifiers.Verifier):
    """Share of digits in the completion: a reward the random tiny model varies on, so the policy moves."""

    name, version = "test-resume-digits", "1"

    def verify(self, completion, reference):
        score = sum(c.isdigit() for c in completion) / max(len(completion), 1)
        return self._verdict(score, {"digits": score})


RUN = {
    "steps": 4,
    "checkpoint_every": 2,
    "verifier": "test-resume-digits",
    "rollout.prompts_per_step": 4,
    "rollout.group_size": 2,
    "sampling.max_new_tokens": 12,
    "kl.beta": 0.05,
    "optim.lr": 1e-3,
    "update.micro_batch_size": 6,
    "task.arithmetic.heldout_size": 10,
    "threads": 1,
    "update.mask_truncated": False,
}  # (the tiny model's cut completions are what it learns from)


def config(policy, run_dir, **over):
    return build_config(TrainConfig, {}, {**RUN, "policy": policy, "run_dir": str(run_dir), **over})


def rows(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
        for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    ]


def assert_same_run(run_dir, straight_dir):
    assert rows(run_dir) == rows(straight_dir)
    a = load_policy(str(Path(run_dir) / "final")).model.state_dict()
    b = load_policy(str(Path(straight_dir) / "final")).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def history(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def straight(tiny_policy, tmp_path_factory):
    """The uninterrupted 4-step run."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    Trainer(config(tiny_policy, run_dir), progress=False).train()
    start, end = (load_policy(p).model.state_dict() for p in (tiny_policy, str(run_dir / "final")))
    assert not all(torch.equal(start[k], end[k]) for k in start)  # the policy moved: equal is not trivially equal
    return run_dir


@pytest.fixture(scope="module")
def half(tiny_policy, tmp_path_factory):
    """The same run given steps 2: its checkpoint of step 2 is where the 4-step run was after 2 steps."""
    run_dir = tmp_path_factory.mktemp("half") / "run"
    Trainer(config(tiny_policy, run_dir, steps=2), progress=False).train()
    return run_dir


def stopped_copy(half, dest):
    """The 2-step run as a run stopped after its step-2 checkpoint (moved to ``dest``)."""
    shutil.copytree(half, dest)
    shutil.rmtree(dest / "final")
    return dest


def test_a_resume_that_changes_what_the_steps_compute_is_refused_naming_each_key(tiny_policy, half, tmp_path, capsys):
    run_dir = stopped_copy(half, tmp_path / "run")
    before = {p: p.read_bytes() for p in (run_dir / "config.yaml", run_dir / "history.jsonl", run_dir / MANIFEST)}
    refused = r"cannot resume .* with another configuration: seed 0 -> 7; rollout\.prompts_per_step 4 -> 2 \(old: "
    with pytest.raises(InputError, match=refused + "the config its 2 steps were trained with"):
        Trainer(config(tiny_policy, run_dir, seed=7, **{"rollout.prompts_per_step": 2}), resume=True, progress=False)
    assert {p: p.read_bytes() for p in before} == before  # refused before anything in the run changed
    # from the command line: exit 2 with the keys named, never a traceback (a LoRA config could not load the weights)
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--lora.r", "4", "--optim.lr", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "veriloop train: error: cannot resume" in err and "optim.lr 0.001 -> 0.01; lora.r 0 -> 4" in err
    assert "internal error" not in err and "Traceback" not in err
    # another run's config given with --config: its keys count as flags, and fewer steps than were done is refused
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"steps": 1, "kl": {"beta": 0.2}}))
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--config", str(other)]) == 2
    err = capsys.readouterr().err
    assert "steps 2 -> 1 (below the 2 steps done); kl.beta 0.05 -> 0.2" in err
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--run_dir", str(tmp_path / "x")]) == 2
    assert "a resumed run stays in its own directory" in capsys.readouterr().err

    # a run stopped before its first checkpoint is checked against its config.yaml before it starts over
    early = tmp_path / "early"
    Trainer(config(tiny_policy, early, steps=1), progress=False).train()
    shutil.rmtree(early / "checkpoints")
    shutil.rmtree(early / "final")
    with pytest.raises(InputError, match=r"verifier 'test-resume-digits' -> 'arithmetic'"):
        Trainer(config(tiny_policy, early, steps=1, verifier="arithmetic"), resume=True, progress=False)


def test_the_resume_rules_one_key_at_a_time(tmp_path):
    old = {"steps": 4, "seed": 0, "threads": 1, "optim": {"schedule": "constant", "lr": 1e-3}, "run_dir": "a"}
    assert check_resume(old, old, 2, tmp_path) == {}
    new = {**old, "steps": 8, "threads": 2, "run_dir": "b"}
    assert check_resume(old, new, 2, tmp_path) == {"steps": [4, 8], "threads": [1, 2], "run_dir": ["a", "b"]}
    assert check_resume(old, {**old, "steps": 2}, 2, tmp_path) == {"steps": [4, 2]}  # as many as done: final/ only
    with pytest.raises(InputError, match=r"steps 4 -> 1 \(below the 2 steps done\)"):
        check_resume(old, {**old, "steps": 1}, 2, tmp_path)
    cosine = {**old, "optim": {"schedule": "cosine", "lr": 1e-3}}
    with pytest.raises(InputError, match=r"steps 4 -> 8 \(with optim.schedule cosine each step's learning rate"):
        check_resume(cosine, {**cosine, "steps": 8}, 2, tmp_path)
    with pytest.raises(InputError, match=r"optim\.lr 0\.001 -> 0\.002 \(old"):
        check_resume(old, {**old, "optim": {"schedule": "constant", "lr": 2e-3}}, 2, tmp_path)
    with pytest.raises(InputError, match=r"newer 'x' -> '\(absent\)'"):  # a key only one side has
        check_resume({**old, "newer": "x"}, old, 2, tmp_path)
    # every safe key is an option of TrainConfig (a renamed option would silently become refused)
    assert set(SAFE_TO_CHANGE) <= set(flatten(to_dict(TrainConfig())))


def test_a_safe_change_is_accepted_recorded_and_config_yaml_says_it(tiny_policy, straight, half, tmp_path, capsys):
    run_dir = stopped_copy(half, tmp_path / "run")  # moved, too: run_dir is safe to change
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--steps", "4", "--keep_checkpoints", "3"]) == 0
    assert_same_run(run_dir, straight)  # the uninterrupted 4-step run, bit for bit
    start, resume = history(run_dir)
    assert start["event"] == "start" and resume["event"] == "resume" and resume["checkpoint"] == "step-000002"
    assert resume["changed"] == {"run_dir": [str(half), str(run_dir)], "steps": [2, 4], "keep_checkpoints": [2, 3]}
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (saved["steps"], saved["keep_checkpoints"], saved["run_dir"]) == (4, 3, str(run_dir))  # the truth
    assert check_file(run_dir, "config.yaml") == ("ok", "")
    assert yaml.safe_load((run_dir / "checkpoints" / "step-000004" / "config.yaml").read_text()) == saved
    assert json.loads((run_dir / "final" / "veriloop_train.json").read_text())["config"]["steps"] == 4


def test_a_cut_or_edited_config_yaml_is_named_with_what_to_do(tiny_policy, straight, half, tmp_path, capsys):
    run_dir = stopped_copy(half, tmp_path / "run")
    path, copy = run_dir / "config.yaml", run_dir / "checkpoints" / "step-000002" / "config.yaml"
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    cut_at_line = b"".join(lines[: len(lines) // 2])  # valid YAML, half the options: it used to fall to defaults
    edited = whole.replace(b"lr: 0.001", b"lr: 0.009")
    assert len(edited) == len(whole) and edited != whole
    for damaged, what in (
        (cut_at_line, f"it has {len(cut_at_line)} bytes, manifest.json says {len(whole)} (cut short or changed)"),
        (whole[: len(whole) // 2 + 3], "bytes, manifest.json says"),  # cut inside a line
        (edited, "its content does not match its SHA-256 in manifest.json (changed on disk)"),
    ):
        path.write_bytes(damaged)
        assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--steps", "4"]) == 2
        err = capsys.readouterr().err
        assert f"{path} is damaged: " in err and what in err, err
        assert f"`cp {copy} {path}`" in err and "history.jsonl" in err  # what to do
        with pytest.raises(InputError, match="is damaged"):
            run_dir_module.read_run_config(run_dir)
    path.write_bytes(copy.read_bytes())  # what the message says to do
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--steps", "4"]) == 0
    assert_same_run(run_dir, straight)
    assert check_file(run_dir, "config.yaml") == ("ok", "")


def test_metrics_that_lost_rows_are_put_back_from_the_checkpoint(tiny_policy, straight, half, tmp_path, caplog):
    """metrics.jsonl cut at a line boundary (row 2 gone): the budgets a resume counts from it (max_samples)
    would be wrong; the checkpoint's copy is put back, named in a warning."""
    run_dir = stopped_copy(half, tmp_path / "run")
    metrics = run_dir / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes().splitlines(keepends=True)[0])
    caplog.clear()
    resumed = Trainer(config(tiny_policy, run_dir), resume=True, progress=False)
    said = [r for r in caplog.records if "does not begin with" in r.getMessage()]  # a library warning: logging
    assert len(said) == 1 and said[0].levelno == logging.WARNING and said[0].name.startswith("veriloop.")
    err = said[0].getMessage()
    assert f"{metrics} does not begin with the rows of steps 1-2 that" in err and "putting back" in err
    assert [r["step"] for r in resumed.metrics.rows] == [1, 2]
    resumed.train()
    assert_same_run(run_dir, straight)


def test_a_run_directory_of_an_older_veriloop_resumes_with_warnings(tiny_policy, straight, half, tmp_path, capsys):
    """No manifest.json in the run directory and no config.yaml in the checkpoint: read unchecked, compared with
    the run's config.yaml, each said."""
    run_dir = stopped_copy(half, tmp_path / "run")
    (run_dir / MANIFEST).unlink()
    step = run_dir / "checkpoints" / "step-000002"
    (step / "config.yaml").unlink()
    ckpt.write_manifest(step)
    assert cli.main(["train", "--quiet", "--resume", str(run_dir), "--steps", "4"]) == 0
    err = capsys.readouterr().err
    assert f"{run_dir / 'config.yaml'} is read unchecked: there is no manifest.json" in err
    assert "holds no config.yaml (written by an older veriloop)" in err
    assert_same_run(run_dir, straight)


def test_checked_files_survive_a_kill_between_the_file_and_its_manifest(tmp_path, monkeypatch):
    import veriloop.io as io

    write_checked(tmp_path, "state.json", b"old")
    assert check_file(tmp_path, "state.json") == ("ok", "") and read_checked(tmp_path, "state.json", "")[1]
    real = io.atomic_write_bytes
    for kill_at in (tmp_path / "state.json", tmp_path / MANIFEST):  # before the file is replaced; after it
        calls = []

        def killed(path, data, kill_at=kill_at, calls=calls):
            calls.append(Path(path))
            if Path(path) == kill_at and calls.count(kill_at) == (1 if kill_at.name == "state.json" else 2):
                raise KeyboardInterrupt
            real(path, data)

        monkeypatch.setattr(io, "atomic_write_bytes", killed)
        with pytest.raises(KeyboardInterrupt):
            write_checked(tmp_path, "state.json", b"new!")
        monkeypatch.undo()
        assert check_file(tmp_path, "state.json") == ("ok", ""), kill_at  # old or new, either checks
        write_checked(tmp_path, "state.json", b"old")
    (tmp_path / "state.json").write_bytes(b"odd")
    assert check_file(tmp_path, "state.json") == (
        "bad",
        "its content does not match its SHA-256 in manifest.json (changed on disk)",
    )
    with pytest.raises(InputError, match=r"state.json is damaged: .*; restore it"):
        read_checked(tmp_path, "state.json", "restore it")
    (tmp_path / "state.json").unlink()
    assert check_file(tmp_path, "state.json") == ("bad", "it is missing (manifest.json lists it)")
    (tmp_path / MANIFEST).write_text("{not json")
    assert check_file(tmp_path, "state.json")[1].startswith("manifest.json is unreadable")
    assert check_file(tmp_path / "nothing", "x") == ("unlisted", "there is no manifest.json")
