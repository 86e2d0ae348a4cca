"""learner.placement ray: learner ranks as Ray actors across the nodes of a simulated cluster (ray.cluster_utils).

Two nodes x one fsdp2 rank give the one-process update within the float32 noise bound (and the spawned fsdp2
group's result bit for bit: the same ranks, placed elsewhere); each rank ships only its own rows, through Ray's
object store, and the controller assembles them bucket by bucket.  Whole runs (4 steps, Ray rollout actors) against
one reference run: the colocated layout, and a learner node that dies under a controller without weights, then
resumes.  Every test has a wall-clock bound and the cluster binds to 127.0.0.1 only.
"""

import copy

import pytest
import test_distributed_learner_on_cpu as single
import torch

from veriloop.rollout.ray_cluster import simulated_cluster
from veriloop.rollout.weight_shards import shards_digest
from veriloop.training.distributed.strategies import DistributedLearner

pytestmark = pytest.mark.timeout(240)
RAY = {"learner.placement": "ray", "learner.nodes": 2, "learner.strategy": "fsdp2", "learner.timeout_s": 60}


@pytest.fixture(scope="module")
def cluster():
    """A head with no CPU for ranks and two nodes of one CPU each: a spread placement must use both."""
    with simulated_cluster([1, 1], head_cpus=0) as sim:
        yield sim


@pytest.fixture
def groups(cluster):
    started = []

    def start(policy, cfg, critic=None, **kw):
        started.append(DistributedLearner(policy, cfg, critic=critic, **kw))
        return started[-1]

    yield start
    for learner in started:
        learner.close()


def test_two_nodes_of_one_fsdp2_rank_give_the_one_process_update(tmp_path, groups, cluster):
    cfg, policy, _, lb = single.setup(tmp_path, **{"update.mini_batches": 2, "optim.grad_clip": 0.0})
    one32, _, stats32 = single.local(policy, cfg, lb)
    split32, _, _ = single.local(policy, cfg, lb, **{"update.micro_batch_size": 1})
    spawned, *_ = single.distributed(groups, policy, single.with_learner(cfg, **{"learner.strategy": "fsdp2"}), lb)
    placed, _, stats, group = single.distributed(groups, policy, single.with_learner(cfg, **RAY), lb)
    nodes = {node_id for node_id, _, _ in group.ranks.nodes}
    assert len(nodes) == 2 and all(ip == "127.0.0.1" for _, ip, _ in group.ranks.nodes)
    assert cluster.nodes[0].node_id not in nodes  # the head has no CPU: the ranks sit on the two nodes
    noise = single.noise_of(one32.model, split32.model)
    assert single.max_diff(placed.model, one32.model) <= 10 * noise
    a, b = placed.model.state_dict(), spawned.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same ranks, placed on other nodes: the same bits
    assert [s["loss"] for s in stats] == pytest.approx([s["loss"] for s in stats32], rel=1e-5)
    # each rank sent its own rows only, as object-store references; together they cover every row once
    import ray

    trainable = {n: p for n, p in placed.model.named_parameters() if p.requires_grad}
    assert [h.rank for h in group.handles] == [0, 1]
    assert all(isinstance(b.ref, ray.ObjectRef) for h in group.handles for b in h.buckets)
    rows = {n: sum(p.rows for h in group.handles for p in h.pieces if p.name == n) for n in trainable}
    assert rows == {n: t.shape[0] for n, t in trainable.items()}
    assert all(0 < h.nbytes < sum(t.nbytes for t in trainable.values()) for h in group.handles)
    pieces = [p for h in group.handles for p in h.pieces]
    from veriloop.rollout.weight_shards import model_shards_digest

    assert model_shards_digest(trainable, pieces) == shards_digest(pieces)


def test_buckets_cross_the_object_store_in_any_dtype(cluster):
    """A bucket goes into the object store as a numpy array (read back without a copy); bfloat16, which numpy lacks,
    as the int16 of its bits: every dtype comes back bit for bit."""
    from veriloop.rollout.weight_shards import assemble_into, pack, ray_stash

    named = [("w16", torch.randn(5, 3).to(torch.bfloat16)), ("w32", torch.randn(4)), ("h", torch.randn(2, 2).half())]
    handle = pack(named, 0, 1 << 20, ray_stash)
    assert [b.dtype for b in handle.buckets] == ["bfloat16", "float32", "float16"]
    targets = {n: torch.zeros_like(t) for n, t in named}
    assemble_into(targets, [handle])
    assert all(torch.equal(targets[n], t) for n, t in named)


def test_a_placement_the_cluster_cannot_hold_is_named(tmp_path, cluster):
    cfg, policy, _, _ = single.setup(tmp_path)
    cfg = single.with_learner(cfg, **{**RAY, "learner.nodes": 3, "learner.world_size": 3, "learner.timeout_s": 5})
    with pytest.raises(RuntimeError, match="no room for 3 bundle"):
        DistributedLearner(copy.deepcopy(policy), cfg)


# ---------------------------------------------------------------------- whole runs: sync to engines, a rank killed

RUN = {
    "policy": "builtin:init",
    "model.hidden_size": 32,
    "model.intermediate_size": 64,
    "model.num_layers": 2,
    "model.num_heads": 2,
    "steps": 4,
    "checkpoint_every": 1,
    "verifier": "test-digit-share",
    "rollout.prompts_per_step": 3,
    "rollout.group_size": 3,
    "sampling.max_new_tokens": 8,
    "update.micro_batch_size": 3,
    "update.mask_truncated": False,
    "optim.lr": 1e-2,
    "optim.grad_clip": 0.0,
    "task.arithmetic.heldout_size": 6,
    "learner.strategy": "fsdp2",
    "learner.world_size": 2,
    "learner.timeout_s": 60,
    "rollout.engine": "ray",
    "rollout.workers": 2,
    "ray.cpus_per_worker": 0,
    "eval_every": 2,
    "eval_problems": 4,
    "kl.beta": 0.0,
}


def trained(run_dir, resume=False, **over):
    """A finished (and closed) trainer."""
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    cfg = build_config(TrainConfig, {}, {**RUN, "run_dir": str(run_dir), **over})
    trainer = Trainer(cfg, progress=False, resume=resume)
    try:
        trainer.train()
    finally:
        trainer.close()
    return trainer


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cluster):
    """The run every whole-run test must equal: fsdp2 on 2 spawned ranks (whole tensors to the rollout actor through
    the controller, which keeps a copy), 4 steps, validation at steps 2 and 4."""
    return trained(tmp_path_factory.mktemp("reference") / "run")


def weights(trainer) -> dict:
    return {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}


def validation(trainer) -> list[dict]:
    """Every validation figure (accuracy, truncation rate) by step."""
    return [{k: v for k, v in r.items() if k.startswith("validation_")} for r in trainer.metrics.rows]


def final_weights(run_dir) -> dict:
    from veriloop.models.loading import load_policy

    return load_policy(str(run_dir / "final")).model.state_dict()


def test_colocated_engines_share_the_ranks_bundles_and_hand_their_memory_over(tmp_path, reference, monkeypatch):
    """ray.layout colocated: rollout actor i sits in rank i's bundle (its node); each step the actors release their
    weights before the ranks update and load the next version from the ranks' buckets after (their digest checked
    against the learner's), never sampling in between.  The run samples, trains and validates exactly as the
    reference, whose spawned fsdp2 group ships whole tensors through the controller to actors of their own."""
    from veriloop.config import build_config
    from veriloop.rollout.ray_engine import RayEngine
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    pushed = []
    publish = RayEngine.publish_shards
    monkeypatch.setattr(RayEngine, "publish_shards", lambda self, h, v: (pushed.append(v), publish(self, h, v))[1])

    want = weights(reference)  # the separate layout's run
    layout = {"ray.layout": "colocated"}
    cfg = build_config(TrainConfig, {}, {**RUN, **RAY, **layout, "run_dir": str(tmp_path / "c")})
    trainer, seen = Trainer(cfg, progress=False), {}
    close = trainer.close

    def read_then_close():  # the run closes its actors when it ends: read where they ran and what they did first
        import ray

        if not seen:
            seen["engine_nodes"] = ray.get([a.node.remote() for a in trainer.engine.actors])
            seen["rank_nodes"] = [n for n, *_ in trainer.learner.ranks.nodes]
            seen["rank_events"] = ray.get([a.events.remote() for a in trainer.learner.ranks.actors])
            seen["actor_events"] = trainer.engine.events()
        close()

    trainer.close = read_then_close
    try:
        trainer.train()
    finally:
        trainer.close()
    got = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    engine_nodes, rank_events, actor_events = seen["engine_nodes"], seen["rank_events"], seen["actor_events"]
    assert engine_nodes == seen["rank_nodes"]  # actor i on rank i's node
    updates = [
        (s, e)
        for (n1, s), (n2, e) in zip(rank_events[0], rank_events[0][1:])
        if (n1, n2) == ("update start", "update end")
    ]
    assert len(updates) == 4
    for events in actor_events:
        # per step: sample (one request or more) with the version held, release, (the ranks update), load the next
        runs = [e for i, e in enumerate(events) if i == 0 or e[0] != events[i - 1][0] or e[0] != "generate"]
        assert [e[0] for e in runs][:12] == ["generate", "release", "load"] * 4, [e[0] for e in events]
        for (start, end), release, load in zip(updates, runs[1::3], runs[2::3]):
            assert release[2] < start and end < load[2]  # released before the update began, reloaded after it ended
            assert release[3] < load[3]  # the trainable weights were freed in between
        assert [e[1] for e in runs[0::3]] == [e[1] for e in runs[1::3]]  # sampled with the version it released
    assert len(pushed) == 4 and pushed == sorted(set(pushed))  # every step's version: rank -> object store -> actor
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert validation(trainer) == validation(reference)


def test_a_learner_node_dies_under_a_controller_without_weights_and_the_run_resumes_from_shards(
    tmp_path, cluster, reference, monkeypatch
):
    """learner.controller_weights none, and rank 1's node dies (its raylet killed) during step 3's update.

    Until then the controller holds no weights: the actors load every version from the ranks' shards, validation
    runs on actor 0, checkpoints hold shards and a model/ without weights.  The node's death stops the run at once,
    naming the rank and its node (ClusterFailure).  `--resume` on the cluster with a fresh node continues from step
    2's shards (the actors fed from the ranks) and ends exactly as the reference, which kept a copy and was never
    interrupted: final/ (exported from shards) bit for bit, every validation figure (same world size, this torch)."""
    from veriloop.errors import ClusterFailure
    from veriloop.training.distributed import groups

    bare = {**RAY, "learner.controller_weights": "none"}
    start = groups.RayRanks.__init__
    kill = ({"rank": 1, "cmd": "update", "nth": 3, "node": True},)
    monkeypatch.setattr(
        groups.RayRanks, "__init__", lambda self, cfg, device, faults=(): start(self, cfg, device, kill)
    )
    with pytest.raises(
        ClusterFailure, match=r"learner rank 1 on node 127\.0\.0\.1 \(\w+\), pid \d+ died during update"
    ):
        trained(tmp_path / "bare", **bare)
    monkeypatch.setattr(groups.RayRanks, "__init__", start)
    import ray

    # a clean stop: the group's placement group removed, its surviving rank gone with it (nothing left holding CPUs)
    assert {pg["state"] for pg in ray.util.placement_group_table().values()} <= {"REMOVED"}
    checkpoints = tmp_path / "bare" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir())[-1] == "step-000002"
    step2 = checkpoints / "step-000002"
    assert (step2 / "sharded" / ".metadata").is_file() and not list((step2 / "model").glob("*.safetensors"))
    cluster.add_node(1)  # a replacement for the dead node
    resumed = trained(tmp_path / "bare", True, **bare)
    assert sum(p.numel() for p in resumed.policy.model.parameters()) == 0  # nothing held on the controller
    want, got = final_weights(reference.run_dir), final_weights(tmp_path / "bare")
    assert want.keys() == got.keys() and all(torch.equal(got[k], want[k]) for k in want)
    curve = validation(reference)
    assert validation(resumed) == curve and [bool(c) for c in curve] == [False, True, False, True]
    assert "validation_truncation_rate" in curve[1]
