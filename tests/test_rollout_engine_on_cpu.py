"""The rollout engine: requests in, records out; per-row random streams make records independent of
how the work is cut; ``load_weights`` answers with a SHA-256 digest of the weights it holds."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.config import build_config
from veriloop.models.loading import load_policy
from veriloop.rollout.engine import LocalEngine, RolloutRequest, build_requests, weights_digest
from veriloop.rollout.records import RecordStore
from veriloop.rollout.sampler import SamplingParams, splitmix64
from veriloop.seeding import derive_seed
from veriloop.tasks.config import TaskConfig
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer

M64 = (1 << 64) - 1


def splitmix64_reference(seed: int, t: int) -> int:
    """SplitMix64 (Steele, Lea, Flood 2014) in Python integers: the (t+1)-th output from ``seed``."""
    z = (seed + (t + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, (1 << 63) - 1), min_size=1, max_size=20), st.integers(0, 10_000))
def test_splitmix64_in_torch_matches_the_reference(seeds, t):
    out = splitmix64(torch.tensor(seeds, dtype=torch.long), t).tolist()
    assert [o & M64 for o in out] == [splitmix64_reference(s, t) for s in seeds]


@pytest.fixture(scope="module")
def setup():
    policy = load_policy("builtin:base")
    task = TaskConfig().build()
    problems = task.train_batch(8, random.Random(0))
    return policy, problems


PARAMS = SamplingParams(temperature=1.0, max_new_tokens=48)
G = 4


def _serve(engine, requests):
    records = [r for req in requests for r in engine.generate(req)]
    return sorted(records, key=lambda r: (int(r.group_id.split("-")[2]), r.sampling["seed"]))


def _tokens(records):
    return [(r.group_id, r.sampling["seed"], tuple(r.completion_ids)) for r in records]


def test_records_do_not_depend_on_how_the_work_is_cut(setup):
    policy, problems = setup
    engine = LocalEngine(policy, version=0)
    whole = _serve(engine, build_requests(7, 3, 0, problems, G, PARAMS, 0, "policy"))
    halves = _serve(engine, build_requests(7, 3, 0, problems, G, PARAMS, 0, "policy", request_groups=4))
    singles = build_requests(7, 3, 0, problems, G, PARAMS, 0, "policy", request_groups=1)
    one_at_a_time = _serve(engine, singles)
    random.Random(1).shuffle(singles)
    shuffled = _serve(engine, singles)
    assert len(whole) == len(problems) * G and len({tuple(r.completion_ids) for r in whole}) > 8
    for other in (halves, one_at_a_time, shuffled):
        assert _tokens(other) == _tokens(whole)
        for a, b in zip(whole, other):  # the same tokens; log-probs equal up to float rounding of the batch shape
            assert a.behavior_logprobs == pytest.approx(b.behavior_logprobs, abs=1e-5)


def test_each_completion_carries_its_own_seed(setup):
    _, problems = setup
    a = build_requests(7, 3, 1, problems, G, PARAMS, 0, "policy", request_groups=3)
    assert [len(r.problems) for r in a] == [3, 3, 2]
    seeds = [s for r in a for s in r.row_seeds]
    assert seeds == [derive_seed(7, 3, "rollout/1", g, k) for g in range(8) for k in range(G)]
    assert len(set(seeds)) == len(seeds)
    assert a[1].group_id(0) == "3-1-3"


def test_load_weights_returns_a_sha256_of_the_weights(setup):
    policy, problems = setup
    copy = policy.frozen_copy()
    engine = LocalEngine(copy, version=0)
    named = list(policy.model.state_dict().items())
    digest = engine.load_weights(named, 1)
    assert engine.version == 1 and len(digest) == 64
    assert digest == weights_digest(named) == weights_digest(reversed(named))  # order of the tensors is irrelevant
    bumped = [(k, v.clone()) for k, v in named]
    i = next(i for i, (k, _) in enumerate(bumped) if "layers.0.mlp" in k)  # not the (tied) embeddings
    bumped[i][1].view(-1)[0] += 1e-6  # one float changed
    assert engine.load_weights(bumped, 2) != digest
    with pytest.raises(RuntimeError, match="wants weights version 1; this engine holds 2"):
        engine.generate(build_requests(0, 1, 0, problems[:1], 2, PARAMS, 1, "policy")[0])
    with pytest.raises(ValueError, match="row seeds"):
        RolloutRequest("x", 1, 0, tuple(problems[:1]), (0,), 2, PARAMS, (1,), 0)


def _one_step(tmp_path, name, request_groups):
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path / name),
            "steps": 1,
            "rollout.prompts_per_step": 4,
            "rollout.group_size": 4,
            "rollout.request_groups": request_groups,
            "sampling.max_new_tokens": 32,
            "kl.beta": 0.0,
            "update.inner_updates": 1,
            "threads": 1,
        },
    )
    Trainer(cfg, progress=False).train()
    return RecordStore(tmp_path / name / "rollouts").read(1)


def test_the_trainers_records_do_not_depend_on_rollout_request_groups(tmp_path):
    whole, split = _one_step(tmp_path, "whole", 0), _one_step(tmp_path, "split", 1)
    assert [(r.group_id, r.completion_ids, r.reward) for r in whole] == [
        (r.group_id, r.completion_ids, r.reward) for r in split
    ]
    assert all(r.sampling["seed"] == derive_seed(0, 1, "rollout/0", i // 4, i % 4) for i, r in enumerate(whole))
