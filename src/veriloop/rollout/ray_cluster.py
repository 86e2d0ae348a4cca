"""A Ray cluster of several nodes on one machine, the way Ray tests its own clusters (``ray.cluster_utils.Cluster``).

Each simulated node is its own raylet with its own logical CPUs and a custom resource ``node<i>`` that marks it,
so a test (or a benchmark) can place actors on a node, kill that node's raylet (the actors' fault hooks do), and
watch the run go on.  Every process binds to 127.0.0.1: the head starts without a dashboard, and Ray's "which
address am I" is answered with the loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and its constant, read once
at import) while the cluster starts and the driver connects.  What real nodes need instead is in the guide
(docs/guides/cluster.md).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from veriloop.rollout.ray_engine import _loopback_only, require_ray

# Ray notices a node whose raylet died when the GCS's health checks of it fail: by default 5 misses in a row of a
# check every 3 s (measured on the 2-core machine: ~16 s from the kill to the actor restarted elsewhere).  These
# notice it within ~3 s; the 1 s timeout and 5 misses keep a node that is merely busy (two cores, all sampling
# or training) from being declared dead.
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}


@dataclass
class SimulatedCluster:
    """The head (node 0) and the worker nodes; ``address`` is what ``ray.address`` takes."""

    cluster: object
    nodes: list = field(default_factory=list)  # ray._private.node.Node, index = node number (0: the head)

    @property
    def address(self) -> str:
        return self.cluster.address

    object_store_bytes: int = 256 * 1024 * 1024

    def add_node(self, num_cpus: float = 1, **resources: float) -> int:
        """One more node with ``num_cpus`` CPUs, the resource ``node<i>`` and ``resources``; its index."""
        i = len(self.nodes)
        # a node whose raylet died from outside (a test's fault) is still on the Cluster's list: forget it, or
        # wait_for_nodes waits for it forever
        for node in [n for n in self.cluster.worker_nodes if not n.remaining_processes_alive()]:
            self.cluster.worker_nodes.discard(node)
        with _loopback(require_ray()):
            node = self.cluster.add_node(
                num_cpus=num_cpus,
                resources={f"node{i}": 1.0, **resources},
                node_ip_address="127.0.0.1",
                object_store_memory=self.object_store_bytes,
            )
        self.nodes.append(node)
        self.cluster.wait_for_nodes()
        return i


@contextlib.contextmanager
def _loopback(ray):
    import ray._private.ray_constants as constants

    before = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False  # localhost stays 127.0.0.1 (not the machine's address)
    try:
        with _loopback_only(ray):
            yield
    finally:
        constants.ENABLE_RAY_CLUSTER = before


@contextlib.contextmanager
def _unadvertised(ray):
    """``Cluster`` writes its head's address to /tmp/ray/ray_current_cluster and deletes that file on shutdown, as
    ``ray start`` does; a plain ``ray.init()`` anywhere on the machine (another test process, a run's private
    cluster, which passes ``num_cpus``) then tries to join this cluster instead of starting its own, and fails.
    Nobody needs to find this cluster but through ``address``: it neither writes nor deletes that file."""
    import ray._common.utils as common
    import ray._private.utils as private

    write, reset = private.write_ray_address, common.reset_ray_address
    private.write_ray_address = common.reset_ray_address = lambda *args, **kwargs: None
    try:
        yield
    finally:
        private.write_ray_address, common.reset_ray_address = write, reset


@contextlib.contextmanager
def simulated_cluster(
    node_cpus: list[float], head_cpus: float = 1.0, object_store_mib: int = 256, system_config: dict | None = None
):
    """A head with ``head_cpus`` CPUs plus one node per entry of ``node_cpus``, this process connected as the
    driver; stopped (driver first, then every node) on exit.  ``system_config``: Ray's internal settings for the
    whole cluster (the head's GCS hands them to every node), e.g. ``FAST_NODE_DEATH`` to notice a dead node within
    a few seconds instead of Ray's default of about 15 s."""
    ray = require_ray()
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        raise RuntimeError("simulated_cluster: this process is already connected to a Ray cluster")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    store = object_store_mib * 1024 * 1024
    with _loopback(ray), _unadvertised(ray):
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "resources": {"node0": 1.0},
                "node_ip_address": "127.0.0.1",
                "include_dashboard": False,
                "object_store_memory": store,
                "_system_config": dict(system_config or {}),
            },
        )
    sim = SimulatedCluster(cluster, [cluster.head_node], store)
    try:
        for cpus in node_cpus:
            sim.add_node(cpus)
        with _loopback(ray):
            ray.init(
                address=cluster.address,
                _node_ip_address="127.0.0.1",
                configure_logging=False,
                log_to_driver=False,
            )
        yield sim
    finally:
        if ray.is_initialized():
            ray.shutdown()
        with _unadvertised(ray):
            cluster.shutdown()
