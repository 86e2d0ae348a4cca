"""How the controller reaches its learner ranks (``learner.placement``): spawned processes or Ray actors.

Both answer ``call(cmd, arg)`` with every rank's reply in rank order, within ``learner.timeout_s``, and fail with a
``RuntimeError`` naming the rank (and, for Ray, its node) that died or failed; a failure closes the whole group (the
others would wait in a collective until their timeout).  What travels is commands, statistics and handles: the
weights move in buckets the ranks stash (files in the group's directory, or Ray's object store), and checkpoints
are written by the ranks themselves.

* ``ProcessRanks`` (``processes``): W processes on this machine (``multiprocessing`` "spawn"), one group that meets
  through a file (no TCP store, no port), pipes for commands.
* ``RayRanks`` (``ray``): W Ray actors placed by a placement group of ``learner.nodes`` bundles (one per node, each
  ``learner.ranks_per_node`` ranks' CPUs/GPUs; ``pack`` or ``spread``), rank 0's node hosting the TCP rendezvous
  (gloo on CPU, nccl on GPU); the learning batch goes into the object store once and every rank reads it.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import sys
import tempfile
import time

import torch

from veriloop.errors import ClusterFailure
from veriloop.training.distributed.ranks import _recv, rank_main

log = logging.getLogger(__name__)


def check_spawnable() -> None:
    """Spawned ranks re-import ``__main__`` from its file: code read from ``python -`` names a file that does not
    exist (``<stdin>``), and ranks would die at start.  A ``__main__`` without a file (``python -c``, pytest-xdist's
    workers) is not re-imported, and the ranks' code lives in veriloop's modules."""
    main = sys.modules.get("__main__")
    spec, path = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    if spec is None and path is not None and not os.path.isfile(path):
        raise RuntimeError(
            f"learner.strategy ddp/fsdp2 spawns learner processes, which re-import __main__ from its "
            f"file; this __main__'s file {path!r} does not exist (python -?): run a script, "
            "`python -m` or `python -c`, or use learner.strategy local"
        )


class RankGroup:
    """What both placements share: the backend, each rank's threads, and the closed flag."""

    files = False  # weights buckets are files the controller removes once read (spawned ranks)

    def __init__(self, cfg, device: torch.device, faults=()):
        lc = self.lc = cfg.learner
        self.cfg, self.faults, self.closed, self.payload = cfg, tuple(faults), False, None
        self.backend = lc.backend if lc.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
        self.threads = max(1, cfg.threads or torch.get_num_threads() // lc.world_size)

    def _fail(self, message: str, bug: bool = False):
        """Close the group and raise: ``ClusterFailure`` for a rank that died or stopped answering, a plain
        ``RuntimeError`` (with the rank's traceback in ``message``) for one that raised."""
        self.close()
        raise (RuntimeError if bug else ClusterFailure)(message)


class ProcessRanks(RankGroup):
    """``learner.placement processes``: W processes veriloop spawns on this machine, one pipe each."""

    files = True

    def __init__(self, cfg, device: torch.device, faults=()):
        super().__init__(cfg, device, faults)
        self.procs, self.conns = [], []

    def _start(self) -> None:
        import multiprocessing

        check_spawnable()
        lc, ctx = self.cfg.learner, multiprocessing.get_context("spawn")
        world, self.store_dir = lc.world_size, tempfile.mkdtemp(prefix="veriloop-learner-")
        store = os.path.join(self.store_dir, "rendezvous")
        backend, threads = self.backend, self.threads
        # one pickle: the critic's optimizer keeps its parameters
        payload = pickle.dumps(self.payload)
        for rank in range(world):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=rank_main,
                args=(rank, world, store, theirs, backend, lc.timeout_s, threads),
                daemon=True,
                name=f"veriloop-learner-rank{rank}",
            )
            proc.start()
            theirs.close()
            self.procs.append(proc)
            self.conns.append(mine)
        for conn in self.conns:
            try:
                conn.send_bytes(payload)
            except OSError:
                pass  # the rank failed to join: its error (or death) is the answer below
        self._replies("start")

    def start_group(self, payload) -> None:
        """Start the ranks; a group that fails to form is started once more (a rendezvous on a busy machine's
        loopback can be refused), with a warning; a second failure raises."""
        self.payload = payload
        try:
            self._start()
        except RuntimeError as e:
            log.warning(f"learner group failed to start, starting it once more: {e}")
            self.procs, self.conns, self.closed = [], [], False
            self._start()

    # ------------------------------------------------------------------ messaging

    def call(self, cmd: str, arg=None) -> list:
        """Send ``cmd`` to every rank; every rank's answer, in rank order."""
        if self.closed:
            raise RuntimeError(f"learner group is closed (after a failure or close()); cannot run {cmd}")
        data = pickle.dumps((cmd, arg))
        for rank, conn in enumerate(self.conns):
            try:
                conn.send_bytes(data)
            except OSError as e:
                self._fail(f"learner rank {rank} cannot take {cmd} ({e}){self._deaths()}")
        return self._replies(cmd)

    def _replies(self, cmd: str) -> list:
        """Every rank's answer to ``cmd``, taken as they come; the first error, death or the deadline fails."""
        deadline, answers = time.monotonic() + self.cfg.learner.timeout_s, {}
        while len(answers) < len(self.conns):
            for rank, conn in enumerate(self.conns):
                if rank not in answers and conn.poll(0.05):
                    answers[rank] = self._answer(rank, cmd)
            dead = [r for r, p in enumerate(self.procs) if r not in answers and not p.is_alive()]
            for rank in dead:  # a rank that died after sending its error: read it first
                if not self.conns[rank].poll(0):
                    self._fail(f"learner rank {rank} died during {cmd} (exit code {self.procs[rank].exitcode})")
                answers[rank] = self._answer(rank, cmd)
            if time.monotonic() > deadline:
                late = [r for r in range(len(self.conns)) if r not in answers]
                self._fail(
                    f"learner rank(s) {late} did not answer {cmd} within learner.timeout_s="
                    f"{self.cfg.learner.timeout_s}s"
                )
        return [answers[r] for r in range(len(self.conns))]

    def _answer(self, rank: int, cmd: str):
        try:
            status, value = _recv(self.conns[rank])
        except (EOFError, OSError):
            self._fail(f"learner rank {rank} died during {cmd}{self._deaths()}")
        if status == "error":
            dead = self._died_within(2.0, besides=rank)  # a broken collective is often the echo of another rank's death
            if dead is not None:
                self._fail(
                    f"learner rank {dead} died during {cmd} (exit code {self.procs[dead].exitcode}); "
                    f"rank {rank} then failed:\n{value}"
                )
            self._fail(f"learner rank {rank} failed during {cmd}:\n{value}", bug=True)
        return value

    def _died_within(self, seconds: float, besides: int) -> int | None:
        """The first rank but ``besides`` found dead within ``seconds`` (None if they all stay alive)."""
        deadline = time.monotonic() + seconds
        while True:
            dead = [r for r, p in enumerate(self.procs) if r != besides and not p.is_alive() and p.exitcode != 0]
            if dead or time.monotonic() > deadline:
                return dead[0] if dead else None
            time.sleep(0.05)

    def _deaths(self) -> str:
        dead = [(r, p.exitcode) for r, p in enumerate(self.procs) if not p.is_alive()]
        return "".join(f"; rank {r} exited with code {code}" for r, code in dead)

    def _fail(self, message: str, bug: bool = False):
        """Close the group and raise: ``ClusterFailure`` for a rank that died or stopped answering, a plain
        ``RuntimeError`` (with the rank's traceback in ``message``) for one that raised."""
        self.close()
        raise (RuntimeError if bug else ClusterFailure)(message)

    def close(self) -> None:
        """Stop the ranks (join with a deadline, then kill); safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for conn in self.conns:
            try:
                conn.send_bytes(pickle.dumps(("close", None)))
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for conn in self.conns:
            conn.close()
        shutil.rmtree(getattr(self, "store_dir", ""), ignore_errors=True)


class RankActor:
    """A learner rank as a Ray actor (``ray.remote`` is applied by ``RayRanks``): it joins the group, builds its
    ``RankWorker``, and serves the controller's commands; its weight buckets go into Ray's object store."""

    def __init__(self, rank: int, world: int, backend: str, timeout_s: float, threads: int, faults=()):
        self.rank, self.world, self.backend, self.timeout_s, self.threads = rank, world, backend, timeout_s, threads
        self.faults, self.calls, self.worker, self.timeline = faults, {}, None, []

    def where(self) -> tuple[str, str, int]:
        """(node id, node IP, pid)."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), os.getpid()

    def free_port(self) -> int:
        """A free TCP port on this node's address (rank 0 hosts the rendezvous)."""
        import socket

        import ray

        with socket.socket() as s:
            s.bind((ray.util.get_node_ip_address(), 0))
            return s.getsockname()[1]

    def start(self, init_method: str, payload) -> None:
        from veriloop.rollout.weight_shards import ray_stash
        from veriloop.training.distributed.ranks import RankWorker, _join_group

        _join_group(self.rank, self.world, init_method, self.backend, self.timeout_s, self.threads)
        self.worker = RankWorker(self.rank, self.world, *payload)
        self.worker.stash = ray_stash  # the object is owned by this actor: it lives while the rank does

    def call(self, cmd: str, arg):
        self._fault(cmd)
        self.timeline.append((f"{cmd} start", time.time()))
        try:
            return getattr(self.worker, cmd)(arg)
        finally:
            self.timeline.append((f"{cmd} end", time.time()))

    def events(self) -> list:
        """(event, wall time) of every command served: the colocated layout's handover is checked against them."""
        return list(self.timeline)

    def _fault(self, cmd: str) -> None:
        """For the tests: die (the actor, or its whole node's raylet) at the n-th call of a command."""
        import signal

        self.calls[cmd] = self.calls.get(cmd, 0) + 1
        for f in self.faults:
            if (f["rank"], f["cmd"], f["nth"]) == (self.rank, cmd, self.calls[cmd]):
                os.kill(os.getppid() if f.get("node") else os.getpid(), signal.SIGKILL)
                time.sleep(60)  # the node's death takes this process with it

    def exit(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RayRanks(RankGroup):
    """``learner.placement ray``: W Ray actors in a placement group of ``learner.nodes`` bundles."""

    def __init__(self, cfg, device: torch.device, faults=()):
        super().__init__(cfg, device, faults)
        from veriloop.rollout.ray_engine import require_ray

        self.ray = require_ray()
        self.actors, self.nodes, self.pg, self.started_cluster = [], [], None, False

    def bundles(self) -> tuple[list[dict], int]:
        """One bundle per node, each the CPUs (and GPUs) of its ranks; ranks per node."""
        lc = self.lc
        per_node = lc.ranks_per_node or lc.world_size // lc.nodes
        gpus = lc.gpus_per_rank if self.backend != "nccl" else max(lc.gpus_per_rank, 1.0)
        cpus, gpus = lc.cpus_per_rank * per_node, gpus * per_node
        if self.cfg.ray.layout == "colocated":  # each bundle also holds its node's share of the rollout actors
            engines = -(-self.cfg.rollout.workers // lc.nodes)
            cpus += engines * self.cfg.ray.cpus_per_worker
            gpus += engines * self.cfg.ray.gpus_per_worker
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        return [dict(bundle) for _ in range(lc.nodes)], per_node

    def placement(self) -> tuple:
        """(placement group, bundles): where colocated rollout actors go (actor i in bundle i mod bundles)."""
        return self.pg, self.lc.nodes

    def start_group(self, payload) -> None:
        import dataclasses

        from veriloop.rollout.ray_engine import connect

        ray, lc = self.ray, self.lc
        bundles, per_node = self.bundles()
        # a private cluster (no ray.address) gets the learner's CPUs besides the rollout actors'
        own = sum(b["CPU"] for b in bundles) + self.cfg.rollout.workers * self.cfg.ray.cpus_per_worker + 1
        self.started_cluster = connect(dataclasses.replace(self.cfg.ray, num_cpus=self.cfg.ray.num_cpus or int(own)), 0)
        self.pg = self._placement_group(bundles)
        self.actors = [self._actor(rank, rank // per_node) for rank in range(lc.world_size)]
        self.nodes = self._get([a.where.remote() for a in self.actors], "start")
        port = self._get([self.actors[0].free_port.remote()], "start")[0]
        init_method = f"tcp://{self.nodes[0][1]}:{port}"
        payload_ref = ray.put(payload)
        self._get([a.start.remote(init_method, payload_ref) for a in self.actors], "start")
        log.info(f"learner ranks on nodes {[n[1] for n in self.nodes]} (rendezvous {init_method})")

    def _placement_group(self, bundles):
        from ray.util.placement_group import placement_group

        strategy = {"pack": "PACK", "spread": "STRICT_SPREAD" if len(bundles) > 1 else "PACK"}[self.lc.node_strategy]
        pg = placement_group(bundles, strategy=strategy, name="")
        ready, _ = self.ray.wait([pg.ready()], timeout=self.lc.timeout_s)
        if not ready:
            self.ray.util.remove_placement_group(pg)
            raise RuntimeError(
                f"learner placement: the cluster has no room for {len(bundles)} bundle(s) of {bundles[0]} "
                f"({strategy}) within learner.timeout_s={self.lc.timeout_s:g}s; it has {self.ray.available_resources()}"
            )
        return pg

    def _actor(self, rank: int, bundle: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        lc = self.lc
        per_rank = {"num_cpus": lc.cpus_per_rank, "num_gpus": lc.gpus_per_rank or (1 if self.backend == "nccl" else 0)}
        actor = self.ray.remote(RankActor).options(
            max_restarts=0,  # a rank lost is the group lost: fail fast, resume from the last checkpoint
            max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=bundle),
            **per_rank,
        )
        return actor.remote(rank, lc.world_size, self.backend, lc.timeout_s, self.threads, self.faults)

    def call(self, cmd: str, arg=None) -> list:
        if self.closed:
            raise RuntimeError(f"learner group is closed (after a failure or close()); cannot run {cmd}")
        ref = self.ray.put(arg)  # once in the object store, read by every rank
        return self._get([a.call.remote(cmd, ref) for a in self.actors], cmd)

    def _where(self, rank: int) -> str:
        if rank < len(self.nodes):
            node_id, ip, pid = self.nodes[rank]
            return f" on node {ip} ({node_id[:12]}), pid {pid}"
        return ""

    def _get(self, refs: list, cmd: str) -> list:
        """Every answer; the first death or error fails the group at once (the others wait in a collective)."""
        ray, deadline = self.ray, time.monotonic() + self.lc.timeout_s
        index, answers = {r: i for i, r in enumerate(refs)}, {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = sorted(index[r] for r in pending)
                self._fail(f"learner rank(s) {late} did not answer {cmd} within learner.timeout_s={self.lc.timeout_s}s")
            rank = index[ready[0]]
            try:
                answers[rank] = ray.get(ready[0])
            except ray.exceptions.RayActorError as e:
                self._fail(f"learner rank {rank}{self._where(rank)} died during {cmd}: {type(e).__name__}")
            except ray.exceptions.RayTaskError as e:
                self._fail(f"learner rank {rank}{self._where(rank)} failed during {cmd}:\n{e}", bug=True)
        return [answers[i] for i in range(len(refs))]

    def close(self) -> None:
        """Kill the actors and remove the placement group; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        ray = self.ray
        if not ray.is_initialized():
            return
        exits = [a.exit.remote() for a in self.actors]
        ray.wait(exits, num_returns=len(exits), timeout=5.0)
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - an actor already gone is what we want
                pass
        if self.pg is not None:
            ray.util.remove_placement_group(self.pg)
        if self.started_cluster:
            ray.shutdown()
