"""``rollout.teacher_set fixed``: a frozen sampler's records drawn once, at step 1, and passed over every step
(seed 000 s.5: filtered distillation on a fixed set; classic RFT).  The set is kept in the run directory and a
resumed run reads it back: stopped and resumed equals uninterrupted.  (The chapter's four-candidate numbers:
tests/test_examples_on_cpu.py.)"""

import json

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.run.metrics import TIMING_KEYS
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)

RUN = {
    "algo": "rft",  # samples of the frozen initial policy, coefficient 1[accepted]
    "rollout.teacher_set": "fixed",
    "steps": 4,
    "checkpoint_every": 2,
    "rollout.prompts_per_step": 6,
    "rollout.group_size": 4,
    "task.arithmetic.heldout_size": 10,
    "threads": 1,
}


def config(run_dir, **over):
    return build_config(TrainConfig, {}, {**RUN, "run_dir": str(run_dir), **over})


def rows(run_dir):
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def the_set(run_dir):
    """The set's records without their wall-clock times (sampled and verified at)."""
    return [{k: v for k, v in r.items() if not k.endswith("_at")} for r in read_jsonl(run_dir / "teacher_set.jsonl.gz")]


def weights(run_dir):
    return load_policy(str(run_dir / "final")).model.state_dict()


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("fixed") / "run"
    Trainer(config(run_dir), progress=False).train()
    return run_dir


def test_the_set_is_sampled_once_and_every_step_passes_over_it(straight):
    the_set = read_jsonl(straight / "teacher_set.jsonl.gz")
    assert len(the_set) == 24 and {r["policy_version"] for r in the_set} == {-1}  # the frozen sampler's
    accepted = sum(r["reward"] >= 1.0 for r in the_set)
    assert 0 < accepted < 24  # the verifier's filter has something to keep and something to drop
    metrics = rows(straight)
    assert [m["sampled_records"] for m in metrics] == [24, 0, 0, 0]
    assert [m["teacher_set_records"] for m in metrics] == [24] * 4
    assert [m["teacher_set_accepted"] for m in metrics] == [accepted] * 4
    assert [m["update_records"] for m in metrics] == [accepted] * 4  # RFT learns from the accepted ones, each pass
    start, end = load_policy("builtin:base").model.state_dict(), weights(straight)
    assert not all(torch.equal(start[k], end[k]) for k in start)


def test_a_resumed_run_reads_the_set_back_and_equals_the_uninterrupted_one(straight, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(config(run_dir, steps=2), progress=False).train()
    set_bytes = (run_dir / "teacher_set.jsonl.gz").read_bytes()
    assert the_set(run_dir) == the_set(straight)  # the same records, sampled from per-row seeds
    resumed = Trainer(config(run_dir), resume=True, progress=False)
    resumed.collector.sample_round = lambda *a: pytest.fail(
        "sampled again: the set is read back from the run directory"
    )
    resumed.train()
    assert rows(run_dir) == rows(straight)
    a, b = weights(run_dir), weights(straight)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (run_dir / "teacher_set.jsonl.gz").read_bytes() == set_bytes


def test_a_resumed_run_whose_set_is_gone_is_refused_naming_the_file(straight, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(config(run_dir, steps=2), progress=False).train()
    (run_dir / "teacher_set.jsonl.gz").unlink()
    resumed = Trainer(config(run_dir), resume=True, progress=False)
    with pytest.raises(InputError, match=r"teacher_set\.jsonl\.gz is missing: .* resumes at step 3"):
        resumed.train()


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"algo": "grpo"}, r"rollout\.teacher_set='fixed' is not read by the rollout source 'policy'"),
        ({"rollout.lag": 1}, r"rollout\.teacher_set fixed with rollout\.mode sync and rollout\.lag 1"),
        (
            {"rollout.mode": "async", "rollout.max_staleness": 1, "rollout.engine": "ray"},
            r"teacher_set fixed with rollout\.mode async",
        ),
        ({"rollout.dynamic_sampling": True}, r"rollout\.teacher_set fixed with rollout\.dynamic_sampling"),
    ],
)
def test_what_a_fixed_set_cannot_be_is_refused(tmp_path, over, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        config(tmp_path / "run", **over)
