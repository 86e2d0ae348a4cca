"""Ray rollout workers equal the one-process run bit for bit, lose nothing when an actor dies, and
are fenced by weights version.  A private Ray cluster on 127.0.0.1 lives for this module only."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import ray
import torch

from veriloop.config import build_config
from veriloop.rollout.engine import WeightsVersionError, build_requests, weights_digest
from veriloop.rollout.ledger import Ledger
from veriloop.rollout.ray_engine import RayEngine, SeededDelays
from veriloop.rollout.records import RecordStore
from veriloop.training.config import TrainConfig
from veriloop.training.run.metrics import TIMING_KEYS
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(300)
RECORD_TIMES = ("created_at", "verified_at")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """Four logical CPUs (two actors of one CPU each never wait), bound to 127.0.0.1, stopped after the module."""
    ray.init(
        num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, configure_logging=False, log_to_driver=False
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Uninterrupted one-process runs, made once and compared against by several tests."""
    return {}


def config(policy, run_dir, **over):
    base = {
        "policy": policy,
        "run_dir": str(run_dir),
        "steps": 4,
        "checkpoint_every": 2,
        "verifier": "test-digit-share",
        "rollout.prompts_per_step": 4,
        "rollout.group_size": 4,
        "rollout.request_groups": 1,
        "update.micro_batch_size": 6,
        "kl.beta": 0.05,
        "sampling.max_new_tokens": 12,
        "optim.lr": 1e-3,
        "task.arithmetic.heldout_size": 10,
        "update.mask_truncated": False,
    }
    # (a random tiny policy's completions are nearly all cut: they are learned from, the run is what is tested)
    base.update(over)
    if base.get("rollout.engine") == "ray":  # the engine's own bounds (options of the ray engine only)
        base = {"rollout.request_timeout_s": 150, "ray.timeout_s": 150, **base}
    return build_config(TrainConfig, {}, base)


def run(policy, run_dir, **over):
    options = over.pop("_engine", None)
    trainer = Trainer(config(policy, run_dir, **over), progress=False, engine_options=options)
    trainer.train()
    return trainer


def local_run(runs, policy, tmp_path_factory, lag: int):
    if lag not in runs:
        runs[lag] = run(policy, tmp_path_factory.mktemp(f"local-lag{lag}"), **{"rollout.lag": lag})
    return runs[lag]


def records(run_dir, step):
    return [
        {k: v for k, v in r.to_json().items() if k not in RECORD_TIMES}
        for r in RecordStore(run_dir / "rollouts").read(step)
    ]


def rows(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in lines]


def assert_same_run(a: Trainer, b: Trainer):
    """Same record files, same metric rows (timings aside), bit-identical final weights."""
    for step in range(1, a.cfg.steps + 1):
        assert records(b.run_dir, step) == records(a.run_dir, step), f"records of step {step} differ"
    assert rows(b.run_dir) == rows(a.run_dir)
    assert weights_digest(b.policy.model.state_dict().items()) == weights_digest(a.policy.model.state_dict().items())


def crash_during_step(trainer: Trainer, step: int, monkeypatch) -> None:
    """Train until the controller dies (an exception) at the start of ``step``; the checkpoint before it stays."""
    real_step = trainer.train_step

    def dying(s):
        if s == step:
            raise KeyboardInterrupt(f"the controller dies during step {step}")
        return real_step(s)

    monkeypatch.setattr(trainer, "train_step", dying)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()


@pytest.mark.parametrize("workers", [1, 2])
def test_ray_workers_equal_the_local_run(tiny_policy, tmp_path, tmp_path_factory, runs, workers):
    local = local_run(runs, tiny_policy, tmp_path_factory, 0)
    distributed = run(tiny_policy, tmp_path, **{"rollout.engine": "ray", "rollout.workers": workers})
    assert_same_run(local, distributed)
    ledger = Ledger(tmp_path)
    assert sorted(ledger.done_counts().items()) == [(f"{s}-0-{g}", 1) for s in range(1, 5) for g in range(4)]
    if workers == 2:  # request i of a step went to actor i mod 2
        assert {e["engine"] for e in ledger.events()} == {0, 1}


def test_n_workers_all_sample_by_default(tiny_policy, tmp_path):
    """rollout.request_groups 0 (auto) cuts a round into one request per worker on engine ray."""
    from veriloop.rollout.config import RolloutConfig

    assert RolloutConfig(engine="ray", workers=2).groups_per_request(4) == 2
    assert RolloutConfig(engine="ray", workers=3).groups_per_request(4) == 2  # ceil(4 / 3): requests of 2, 2
    assert RolloutConfig().groups_per_request(32) == 0  # one engine: the round in one request
    assert RolloutConfig(engine="ray", workers=2, request_groups=1).groups_per_request(4) == 1  # as set
    trainer = run(
        tiny_policy, tmp_path, steps=1, **{"rollout.engine": "ray", "rollout.workers": 2, "rollout.request_groups": 0}
    )
    done = [e for e in Ledger(tmp_path).events() if e["event"] == "done"]
    assert sorted(e["engine"] for e in done) == [0, 1] and {e["records"] for e in done} == {8}
    assert trainer.state.step == 1


@pytest.mark.parametrize("lag", [1, 2])
def test_the_pipeline_equals_local_lag_and_overlaps(tiny_policy, tmp_path, tmp_path_factory, runs, lag):
    local = local_run(runs, tiny_policy, tmp_path_factory, lag)
    over = {"rollout.engine": "ray", "rollout.workers": 2, "rollout.lag": lag, "update.inner_updates": 2}
    pipelined = run(tiny_policy, tmp_path, **over)
    assert pipelined.pipelined
    assert_same_run(local, pipelined)
    # time stamps: step s's requests went out before the update of that step (on the batch of step s - lag) ended
    issued = {}
    for e in Ledger(tmp_path).events():
        if e["event"] == "issued":
            issued[e["step"]] = min(issued.get(e["step"], e["time"]), e["time"])
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    learned = [m for m in metrics if m["update_records"] > 0]
    assert learned and all(m["step"] > lag for m in learned)
    for m in learned:
        assert issued[m["step"]] < m["update_ended_at"], f"step {m['step']}: sampling began after the update ended"


def test_after_every_push_digests_agree_and_a_wrong_version_is_refused(tiny_policy):
    import random

    from veriloop.models.loading import load_policy

    cfg = config(tiny_policy, "unused", **{"rollout.engine": "ray", "rollout.workers": 2})
    policy = load_policy(tiny_policy)
    engine = RayEngine(policy, 0, cfg.rollout, cfg.ray, threads=0)
    try:
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(0.01)
        digest = engine.publish(policy.model, 1)
        assert digest == weights_digest(policy.model.state_dict().items())
        assert engine.held == [1, 1]
        problems = cfg.task.build().train_batch(1, random.Random(0))
        stale = build_requests(0, 1, 0, problems, 2, cfg.sampling, 0, "policy")
        with pytest.raises(WeightsVersionError, match="wants weights version 0; this engine holds 1"):
            engine.run(stale)
        fresh = build_requests(0, 1, 0, problems, 2, cfg.sampling, 1, "policy")
        assert [r.policy_version for r in engine.run(fresh)[0]] == [1, 1]
        # a digest that disagrees with the learner's fails the push
        with pytest.raises(RuntimeError, match="weights digest .* the learner's is"):
            engine.load_weights([], 2, expected="0" * 64)
    finally:
        engine.close()


def test_a_killed_rollout_actor_loses_nothing(tiny_policy, tmp_path, tmp_path_factory, runs):
    """SIGKILL once while sampling (worker 0, its 2nd request) and once while loading weights (worker 1, its
    2nd push): the run finishes, every request is in the store once, the weights equal the uninterrupted run's."""
    faults = [
        {"worker": 0, "call": "generate", "nth": 2, "marker": str(tmp_path / "kill-sampling")},
        {"worker": 1, "call": "load_weights", "nth": 2, "marker": str(tmp_path / "kill-loading")},
    ]
    local = local_run(runs, tiny_policy, tmp_path_factory, 0)
    run_dir = tmp_path / "run"
    killed = run(tiny_policy, run_dir, **{"rollout.engine": "ray", "rollout.workers": 2, "_engine": {"faults": faults}})
    assert (tmp_path / "kill-sampling").exists() and (tmp_path / "kill-loading").exists()
    assert killed.engine.restarts >= 2
    assert_same_run(local, killed)
    ledger = Ledger(run_dir)
    assert set(ledger.done_counts().values()) == {1} and len(ledger.done_counts()) == 16
    failed = [e for e in ledger.events() if e["event"] == "failed"]
    assert failed and all(e["engine"] == 0 for e in failed)  # the request that was being sampled, re-issued


def test_resuming_a_crashed_distributed_run_equals_the_uninterrupted_run(
    tiny_policy, tmp_path, tmp_path_factory, runs, monkeypatch
):
    local = local_run(runs, tiny_policy, tmp_path_factory, 1)
    over = {"rollout.engine": "ray", "rollout.workers": 2, "rollout.lag": 1}
    crashing = Trainer(config(tiny_policy, tmp_path, **over), progress=False)
    crash_during_step(crashing, 3, monkeypatch)
    assert not crashing.engine.actors  # the actors were stopped on the way out
    resumed = Trainer(config(tiny_policy, tmp_path, **over), resume=True, progress=False)
    resumed.train()
    assert_same_run(local, resumed)
    assert set(Ledger(tmp_path).done_counts().values()) == {1}


def test_sigterm_checkpoints_and_exits_cleanly(tiny_policy, tmp_path):
    """``veriloop train`` in its own process gets SIGTERM after its first step: it finishes the step, writes a
    checkpoint, exits 0; ``--resume`` then gives the uninterrupted run."""

    def args(run_dir):
        return [
            sys.executable,
            "-m",
            "veriloop.cli",
            "train",
            "--policy",
            tiny_policy,
            "--run_dir",
            str(run_dir),
            "--steps",
            "30",
            "--checkpoint_every",
            "30",
            "--rollout.prompts_per_step",
            "2",
            "--rollout.group_size",
            "2",
            "--sampling.max_new_tokens",
            "8",
            "--kl.beta",
            "0",
            "--task.arithmetic.heldout_size",
            "10",
            "--threads",
            "1",
            "--update.mask_truncated",
            "false",
        ]

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(args(run_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "SIGTERM received: checkpoint of step" in out
    (checkpoint,) = (run_dir / "checkpoints").iterdir()
    steps_done = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    assert 1 <= steps_done < 30 and not (run_dir / "final").exists()
    subprocess.run(args(run_dir) + ["--resume", str(run_dir)], check=True, timeout=240, capture_output=True)
    whole = tmp_path / "whole"
    subprocess.run(args(whole), check=True, timeout=240, capture_output=True)
    assert rows(run_dir) == rows(whole)
    from veriloop.models.loading import load_policy

    a, b = (load_policy(str(d / "final")).model.state_dict() for d in (run_dir, whole))
    assert weights_digest(a.items()) == weights_digest(b.items())


@pytest.mark.parametrize("bound", [True, False])
def test_async_mode_keeps_every_record_within_the_staleness_bound(tiny_policy, tmp_path, bound):
    """Seeded random delays, longer for longer prompts; max_staleness 2 with one optimizer step per step. With
    the bound every consumed record is at most 2 versions old and every dispatched problem is learned from;
    without it (the admission switched off) older records are consumed: the bound is what holds them back."""
    over = {
        "rollout.engine": "ray",
        "rollout.workers": 2,
        "rollout.mode": "async",
        "rollout.max_staleness": 2,
        "update.inner_updates": 1,
        "steps": 6,
        "checkpoint_every": 3,
    }
    delays = SeededDelays(seed=7, spread_s=0.2, per_prompt_char_s=0.005)
    trainer = Trainer(config(tiny_policy, tmp_path, **over), progress=False, engine_options={"delays": delays})
    trainer.collector.enforce_bound = bound
    trainer.train()
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    ages = [m["staleness_max"] for m in metrics]
    if bound:
        assert max(ages) <= 2 and max(ages) > 0  # it did run ahead, within the bound
    else:
        assert max(ages) > 2
    ledger = Ledger(tmp_path)
    issued = {e["request_id"] for e in ledger.events() if e["event"] == "issued"}
    assert set(ledger.done_counts()) == issued and set(ledger.done_counts().values()) == {1}
    for step in range(1, 7):  # the consumed problems are the dispatched ones: each step's four groups, in order
        served = [r for g in range(4) for r in ledger.read_request(f"{step}-0-{g}")]
        learned = RecordStore(tmp_path / "rollouts").read(step)
        assert [(r.group_id, r.completion_ids) for r in learned] == [(r.group_id, r.completion_ids) for r in served]


def test_the_test_cluster_listens_on_loopback_only():
    """Every listening TCP socket of this session (Ray's GCS, raylet, workers, object manager) is on 127.0.0.1."""
    from conftest import NETWORK

    if "loopback" not in NETWORK:
        pytest.skip(f"the session runs in {NETWORK}: Ray's servers listen on every interface there")
    assert [name for _, name in socket.if_nameindex()] == ["lo"]
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                listening.append(local.split(":")[0])
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert listening and set(listening) <= loopback, listening


def test_lora_through_the_pipeline_equals_local_lora(tiny_policy, tmp_path):
    """LoRA with Ray workers and lag 1 equals one process with lag 1; only adapter tensors travel to the actors."""
    from veriloop.rollout.engine import trainable_tensors

    over = {"lora.r": 4, "rollout.lag": 1, "steps": 3}
    local = run(tiny_policy, tmp_path / "local", **over)
    pipelined = run(tiny_policy, tmp_path / "ray", **over, **{"rollout.engine": "ray", "rollout.workers": 2})
    assert_same_run(local, pipelined)
    names = [n for n, _ in trainable_tensors(pipelined.policy.model)]
    assert names and all("lora_" in n for n in names)


def test_ray_workers_and_ddp_learners_resume_exactly(tiny_policy, tmp_path, monkeypatch):
    """The whole distributed shape at once (2 Ray actors, lag-1 pipeline, 2 DDP learner ranks, PPO's critic on
    the ranks): a controller that dies after its step-2 checkpoint, resumed, equals the uninterrupted run."""
    over = {
        "algo": "ppo",
        "rollout.engine": "ray",
        "rollout.workers": 2,
        "rollout.lag": 1,
        "learner.strategy": "ddp",
        "learner.world_size": 2,
        "learner.timeout_s": 120,
    }
    whole = run(tiny_policy, tmp_path / "whole", **over)
    crashing = Trainer(config(tiny_policy, tmp_path / "run", **over), progress=False)
    crash_during_step(crashing, 3, monkeypatch)
    assert crashing.learner.closed and not crashing.engine.actors
    resumed = Trainer(config(tiny_policy, tmp_path / "run", **over), resume=True, progress=False)
    resumed.train()
    assert_same_run(whole, resumed)
    assert "value_loss" in rows(tmp_path / "run")[-1]


def test_a_stuck_request_fails_the_run_naming_it(tiny_policy):
    """A request that runs past rollout.request_timeout_s stops the run with its id and actor, no hang."""
    import random

    from veriloop.models.loading import load_policy

    cfg = config(tiny_policy, "unused", **{"rollout.engine": "ray", "rollout.request_timeout_s": 1.5})
    engine = RayEngine(
        load_policy(tiny_policy),
        0,
        cfg.rollout,
        cfg.ray,
        threads=0,
        delays=SeededDelays(seed=0, spread_s=0.0, per_prompt_char_s=1.0),
    )
    try:
        problems = cfg.task.build().train_batch(1, random.Random(0))
        started = time.time()
        with pytest.raises(
            RuntimeError,
            match=r"rollout request\(s\) 1-0-0 \(worker 0\) ran past "
            r"rollout.request_timeout_s=1.5",
        ):
            engine.run(build_requests(0, 1, 0, problems, 2, cfg.sampling, 0, "policy"))
        assert time.time() - started < 10
    finally:
        engine.close()


def test_ray_is_an_optional_install(monkeypatch):
    from veriloop.errors import InputError
    from veriloop.rollout.ray_engine import require_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(InputError, match=r"pip install -e '.\[distributed\]'"):
        require_ray()


def test_async_mode_is_reproducible_whatever_the_delays(tiny_policy, tmp_path):
    """Requests go out at step boundaries with the version held then, as the admission rule allows: delays change
    the wall time, not which weights serve which request. Two runs with different delay seeds are identical."""
    over = {
        "rollout.engine": "ray",
        "rollout.workers": 2,
        "rollout.mode": "async",
        "rollout.max_staleness": 2,
        "update.inner_updates": 1,
        "steps": 4,
    }
    runs = []
    for seed in (1, 2):
        delays = SeededDelays(seed=seed, spread_s=0.1, per_prompt_char_s=0.002)
        runs.append(run(tiny_policy, tmp_path / f"delays-{seed}", **over, _engine={"delays": delays}))
    assert_same_run(*runs)
    assert max(m["staleness_max"] for m in runs[0].metrics.rows) == 2


def test_tool_rollouts_through_ray_workers_equal_the_local_engine(tmp_path):
    """task.reasoning tool: each actor's LocalEngine pauses at code blocks and runs them in its own sandbox; the
    records (calls and model masks included) are the local engine's."""
    import random

    from veriloop.models.loading import load_policy
    from veriloop.rollout.engine import LocalEngine
    from veriloop.rollout.tools import ToolSettings
    from veriloop.tasks.base import BRACES
    from veriloop.verifiers.tools import run_block

    cfg = config(
        "builtin:init",
        tmp_path,
        **{"rollout.engine": "ray", "rollout.workers": 2, "task.reasoning": "tool", "verifier": "arithmetic-tool"},
    )
    policy = load_policy("builtin:init", seed=2)  # random weights that close a block now and then
    problems = cfg.task.build().train_batch(8, random.Random(1))
    sampling = cfg.sampling.__class__(max_new_tokens=64)
    requests = build_requests(0, 1, 0, problems, 4, sampling, 0, "policy", 2, ToolSettings(BRACES, run_block))

    def rows(served):
        out = []
        for r in (r for batch in served for r in batch):
            row = {k: v for k, v in r.to_json().items() if k not in RECORD_TIMES}
            row["tool_calls"] = [{k: v for k, v in c.items() if k != "seconds"} for c in row["tool_calls"]]
            out.append(row)
        return out

    local = rows(LocalEngine(policy).run(requests))
    engine = RayEngine(policy, 0, cfg.rollout, cfg.ray, threads=0)
    try:
        distributed = rows(engine.run(requests))
    finally:
        engine.close()
    assert distributed == local
    assert sum(len(r["tool_calls"]) for r in local) > 0
