"""A rollout node that dies mid-step loses nothing.

A simulated cluster on 127.0.0.1 (a head without CPUs, two worker nodes of 2 CPUs, one rollout actor on each):
while sampling in step 2, worker 0 SIGKILLs its node's raylet, and with it the node.  Its requests are issued
again to the restarted actor, which Ray can only place on the surviving node; the run ends with every request
done once, every record once, and the records and final weights of an uninterrupted one-process run.
"""

import contextlib

import pytest
import ray
from test_scaleout_on_cpu import assert_same_run, config, run

from veriloop.rollout.ledger import Ledger
from veriloop.rollout.ray_cluster import FAST_NODE_DEATH, simulated_cluster
from veriloop.rollout.records import RecordStore
from veriloop.training.trainer import Trainer

STEPS, GROUPS, GROUP_SIZE = 3, 4, 4  # config(): four one-group requests a step; worker 0 serves the 1st and 3rd


@pytest.fixture(scope="module")
def cluster():
    # the head holds the driver and no CPU: every actor goes to a worker node, and only there can one come back
    with simulated_cluster([2, 2], head_cpus=0, system_config=FAST_NODE_DEATH) as sim:
        yield sim


@contextlib.contextmanager
def one_free_cpu_per_node():
    """While the engine starts each worker node has one free CPU, so its two actors land one per node; freed
    after, so the surviving node has room for the actor restarted from the dead one."""

    class Placeholder:  # defined here: the actors' processes cannot import this test module, so it travels whole
        pass

    holder = ray.remote(num_cpus=1)(Placeholder)
    holders = [holder.options(resources={f"node{i}": 0.01}).remote() for i in (1, 2)]
    ray.get([h.__ray_ready__.remote() for h in holders], timeout=60)
    try:
        yield
    finally:
        for h in holders:
            ray.kill(h)


def node_of(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()), timeout=30)


def nodes_at_close(engine, monkeypatch) -> dict:
    """Where the engine's actors are when the trainer closes it (after that they are gone)."""
    seen = {}
    real_close = engine.close

    def close():
        try:
            seen["nodes"] = [node_of(a) for a in engine.actors]
        except Exception as e:  # noqa: BLE001 - a run that failed: its own error is the one to see
            seen["nodes"] = repr(e)
        real_close()

    monkeypatch.setattr(engine, "close", close)
    return seen


def check_ledger(run_dir) -> None:
    """Every request done once; the one sampled when its node died failed and was issued again; every record
    once in the request store, and the step files hold exactly those records."""
    ledger = Ledger(run_dir)
    events = ledger.events()
    ids = [f"{s}-0-{g}" for s in range(1, STEPS + 1) for g in range(GROUPS)]
    assert sorted(ledger.done_counts().items()) == sorted((i, 1) for i in ids)
    failed = [e for e in events if e["event"] == "failed"]
    assert "2-0-0" in {e["request_id"] for e in failed}
    assert all(e["step"] == 2 and e["engine"] == 0 for e in failed)  # only the dead node's requests
    for e in failed:  # each failure issued again once; the retry is what was done
        retries = [x for x in events if x["request_id"] == e["request_id"] and x["attempt"] == e["attempt"] + 1]
        assert [x["event"] for x in retries][:1] == ["issued"]
    assert sorted(p.name for p in ledger.requests_dir.iterdir()) == sorted(f"{i}.jsonl.gz" for i in ids)
    served = [record_id(r) for i in ids for r in ledger.read_request(i)]
    assert len(served) == len(set(served)) == STEPS * GROUPS * GROUP_SIZE
    store = RecordStore(run_dir / "rollouts")
    assert sorted(record_id(r) for s in range(1, STEPS + 1) for r in store.read(s)) == sorted(served)


def record_id(record) -> tuple:
    return record.group_id, record.sampling["seed"]  # a row's own seed: (run seed, step, round, group, row)


@pytest.mark.timeout(120)
def test_a_dead_rollout_node_loses_nothing(cluster, tiny_policy, tmp_path, monkeypatch):
    marker = tmp_path / "killed-node"  # the fault writes the id of the node it killed
    faults = [{"worker": 0, "call": "generate", "nth": 3, "node": True, "marker": str(marker)}]  # step 2, 1st
    over = {
        "steps": STEPS,
        "rollout.engine": "ray",
        "rollout.workers": 2,
        "ray.timeout_s": 60,
        "rollout.request_timeout_s": 60,
    }
    with one_free_cpu_per_node():
        trainer = Trainer(
            config(tiny_policy, tmp_path / "run", **over), progress=False, engine_options={"faults": faults}
        )
    placed = [node_of(a) for a in trainer.engine.actors]
    assert len(set(placed)) == 2, "the two actors should start on different worker nodes"
    at_close = nodes_at_close(trainer.engine, monkeypatch)
    trainer.train()

    assert marker.read_text() == placed[0]  # worker 0's node is the one that died ...
    assert {n["NodeID"]: n["Alive"] for n in ray.nodes()}[placed[0]] is False
    assert at_close["nodes"] == [placed[1], placed[1]]  # ... and worker 0 came back on the surviving node
    assert trainer.engine.restarts >= 1
    check_ledger(tmp_path / "run")
    assert_same_run(run(tiny_policy, tmp_path / "local", steps=STEPS), trainer)
