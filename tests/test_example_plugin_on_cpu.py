"""The example plugin package (examples/plugin) installed with pip, found through its entry points alone (no
--plugin flag), listed where built-ins are and trained with through `veriloop train`."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "plugin"
TRAIN = [
    "train",
    "--task.name",
    "reverse",
    "--steps",
    "2",
    "--rollout.prompts_per_step",
    "4",
    "--rollout.group_size",
    "4",
    "--sampling.max_new_tokens",
    "16",
    "--kl.beta",
    "0",
    "--threads",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The package installed into a directory of its own (the environment is left as it was); built from a copy so
    setuptools' build files stay out of the repository."""
    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(EXAMPLE, root / "src", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    out = subprocess.run(
        [*pip, "--target", str(target), str(root / "src")], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr
    assert list(target.glob("veriloop_reverse-*.dist-info"))
    return target


def veriloop(args, site=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(site) if site else ""}
    return subprocess.run(
        [sys.executable, "-m", "veriloop.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.timeout(600)
def test_installed_entries_are_listed_where_built_ins_are(site):
    listed = veriloop(["verifiers"], site)
    assert listed.returncode == 0, listed.stderr
    assert "reverse-exact" in listed.stdout and "reverse-overlap" in listed.stdout
    helped = veriloop(["train", "--help"], site)
    assert helped.returncode == 0, helped.stderr
    assert "arithmetic | fixed | gsm8k | jsonl | reverse" in " ".join(helped.stdout.split())
    # not installed: the same name is unknown, and the message lists what is registered
    missing = veriloop([*TRAIN, "--run_dir", str(site.parent / "none"), "--verifier", "reverse-exact"])
    assert missing.returncode == 2 and "unknown task 'reverse'" in missing.stderr, missing.stderr


@pytest.mark.timeout(600)
def test_a_task_and_a_reward_function_from_the_package_train_through_the_cli(site, tmp_path):
    run = tmp_path / "run"
    out = veriloop([*TRAIN, "--run_dir", str(run), "--verifier", "reverse-overlap"], site)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    with gzip.open(run / "rollouts" / "step-000001.jsonl.gz", "rt") as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 16 and {r["verifier"] for r in records} == {"reverse-overlap@1"}
    assert all(r["problem_id"].startswith("reverse-") for r in records)
    # the reward function's shaped score: the share of characters in place, in [0, 1]
    assert all(0.0 <= r["reward"] <= 1.0 for r in records)
    saved = (run / "config.yaml").read_text()
    assert "name: reverse" in saved and "reverse-overlap" in saved


@pytest.mark.timeout(300)
def test_the_package_verifier_grades_a_file(site, tmp_path):
    rows = [{"completion": "cba\nmore", "reference": "cba"}, {"completion": "abc", "reference": "cba"}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["verify", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"), "--workers", "1"]
    out = veriloop([*args, "--verifier", "reverse-exact"], site)
    assert out.returncode == 0, out.stderr
    graded = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [g["score"] for g in graded] == [1.0, 0.0]
