"""``rollout.engine=ray``: rollout engines as Ray actors, fed requests, fenced by weights version.

Each of ``rollout.workers`` actors holds the registered engine ``ray.worker_engine`` names (``local``: the
KV-cached sampler; ``vllm``) on its own copy of the policy.  The controller sends requests of fixed composition
(``build_requests``), request ``i`` of a batch to
actor ``i mod workers``; a record depends only on its request, so which actor serves it changes
nothing.  Weights travel by version: ``load_weights`` puts the trainable tensors in Ray's object
store once, every actor copies them in and answers the SHA-256 digest of all its weights, which
must equal the learner's.  An actor serves a request only with the version the request names
(``WeightsVersionError`` otherwise).

Failures: actors run with ``max_restarts=-1`` and ``max_task_retries=0`` (Ray restarts a dead
actor but never re-executes a call by itself).  When a call fails because its actor died, the
controller waits for the restarted actor (which holds the weights it was created with), pushes the
weights of the version the request names (kept while a request in flight names it), and issues
the same request again: same seeds, same weights, so the same records.  Every wait is bounded:
a request running past ``rollout.request_timeout_s`` fails the run naming the request and actor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass

import torch

from veriloop.errors import InputError
from veriloop.registry import ENGINES
from veriloop.rollout.engine import (
    EngineCapabilities,
    EngineSections,
    RegisteredEngine,
    RolloutRequest,
    WeightsVersionError,
)
from veriloop.rollout.ray_worker import RolloutWorker
from veriloop.rollout.records import Record
from veriloop.rollout.weight_shards import (
    shards_digest,
)
from veriloop.seeding import derive_seed

log = logging.getLogger(__name__)


def require_ray():
    try:
        import ray
    except ImportError as e:
        raise InputError("rollout.engine=ray needs Ray: pip install -e '.[distributed]'") from e
    return ray


def connect(ray_cfg, workers: int) -> bool:
    """Join ``ray.address``, or start a private one-machine cluster on 127.0.0.1; True when this call started it."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "configure_logging": False, "log_to_driver": False}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine unless asked for
    if ray_cfg.address:
        ray.init(address=ray_cfg.address, **quiet)
    else:  # logical CPUs: every actor's reservation plus one, so no actor waits forever for a CPU (SCALEOUT.md)
        cpus = ray_cfg.num_cpus or int(workers * ray_cfg.cpus_per_worker) + 1
        with _loopback_only(ray):
            ray.init(num_cpus=cpus, _node_ip_address="127.0.0.1", **quiet)
    return True


@contextlib.contextmanager
def _loopback_only(ray):
    """A private cluster that tries to reach nothing beyond 127.0.0.1 (measured with strace in a loopback-only
    network namespace, tests/test_ray_egress_on_cpu.py).  Ray 2.60 has no switch for either of these:

    * its dashboard process starts even with ``include_dashboard=False`` (it then loads only the usage-stats
      module), and that module asks the cloud metadata address 169.254.169.254 and resolves
      ``metadata.google.internal`` before it reads whether usage stats are on: the private cluster starts no
      dashboard (``ray._private.services.start_api_server`` answers "none started", as Ray's own code does when
      the dashboard fails to start and it was not asked for);
    * its processes that hold no node object (the runtime-env agent) find "their IP" by routing toward 8.8.8.8:
      ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes them take the loopback address, as Ray does on a laptop.

    The environment is set while the cluster's processes start (they inherit it; the actors are started later by
    the raylet, with its environment) and restored after."""
    services = ray._private.services
    start_api_server = getattr(services, "start_api_server", None)
    before = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    if start_api_server is None:  # another Ray than the one this was measured on (2.60): say what may happen
        log.warning(
            f"Ray {ray.__version__} has no start_api_server: its dashboard process may start and probe "
            "the cloud metadata address"
        )
    else:
        services.start_api_server = lambda *args, **kwargs: (None, None)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        yield
    finally:
        if start_api_server is not None:
            services.start_api_server = start_api_server
        if before is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = before


@dataclass(frozen=True)
class SeededDelays:
    """Artificial sampling delays for tests of timing-dependent modes: uniform in [0, ``spread_s``) from a
    stream seeded by (seed, request id), plus ``per_prompt_char_s`` per character of the request's prompts
    (slow requests correlated with prompt length, as long prompts are on real engines)."""

    seed: int
    spread_s: float = 0.2
    per_prompt_char_s: float = 0.002

    def __call__(self, request: RolloutRequest) -> float:
        u = random.Random(derive_seed(self.seed, request.step, request.request_id)).random()
        return u * self.spread_s + self.per_prompt_char_s * sum(len(p.prompt) for p in request.problems)


@dataclass
class Ticket:
    """A request in flight: which actor, which attempt, since when."""

    request: RolloutRequest
    worker: int
    attempt: int
    ref: object
    issued_at: float


class RayEngine(RegisteredEngine):
    """``rollout.workers`` Ray actors, each holding the engine ``ray.worker_engine`` names."""

    name = "ray"
    capabilities = EngineCapabilities(owns_weights=True, runs_ahead=True, many_workers=True, extra="ray")
    options = ("rollout.workers", "rollout.mode", "rollout.request_timeout_s", "rollout.max_request_retries", "ray")

    @classmethod
    def labels(cls) -> list[str]:
        held = [name for name, engine in ENGINES.items() if engine.capabilities.in_worker and name != "local"]
        return [cls.name, *(f"{cls.name}+{name}" for name in held)]

    @classmethod
    def choosing(cls, label: str) -> dict:
        held = label.partition("+")[2]
        return {"rollout.engine": cls.name, **({"ray.worker_engine": held} if held else {})}

    @classmethod
    def reads(cls, label: str) -> tuple[str, ...]:
        """Ray's own options and those of the engine its actors hold."""
        held = label.partition("+")[2]
        return (*cls.options, *(ENGINES.get(held).reads(held) if held else ()))

    @classmethod
    def serves(cls, sections: EngineSections) -> EngineCapabilities:
        """What its actors' engine serves, with Ray's own: weights of its own, running ahead, many workers."""
        held_engine = ENGINES.get(sections.ray.worker_engine)
        if not held_engine.capabilities.in_worker:
            able = [name for name, engine in ENGINES.items() if engine.capabilities.in_worker]
            raise ValueError(
                f"ray.worker_engine {held_engine.name!r} is not an engine a Ray actor can hold; those that are: "
                f"{', '.join(able)}"
            )
        held = held_engine.serves(sections)
        extra = ",".join(filter(None, (cls.capabilities.extra, held.extra)))
        return dataclasses.replace(
            held, owns_weights=True, runs_ahead=True, many_workers=True, in_worker=False, extra=extra
        )

    @classmethod
    def label(cls, sections: EngineSections) -> str:
        held = sections.ray.worker_engine
        return cls.name if held == "local" else f"{cls.name}+{held}"

    @classmethod
    def require(cls, sections: EngineSections) -> None:
        require_ray()
        ENGINES.get(sections.ray.worker_engine).require(sections)

    @classmethod
    def build(cls, policy, version: int, sections: EngineSections, **options) -> RayEngine:
        # options: the tests' fault and delay schedules
        return cls(policy, version, sections.rollout, sections.ray, sections.threads, vllm_cfg=sections.vllm, **options)

    def __init__(
        self,
        policy,
        version: int,
        rollout_cfg,
        ray_cfg,
        threads: int,
        faults=(),
        delays=None,
        vllm_cfg=None,
        placement=None,
    ):
        ray = self.ray = require_ray()
        self.rollout_cfg, self.ray_cfg, self.version = rollout_cfg, ray_cfg, version
        self.held_engine = ENGINES.get(ray_cfg.worker_engine)  # the registered engine each actor holds
        self.dtype = next(policy.model.parameters()).dtype
        self.started_cluster = connect(ray_cfg, rollout_cfg.workers)
        actor = ray.remote(RolloutWorker)
        self.placement = placement  # colocated: (the learner's placement group, its bundles)
        policy_ref = self.policy_ref = ray.put(policy)  # kept alive: a restarted actor is built from it
        threads = ray_cfg.worker_threads or threads or torch.get_num_threads()
        sections = EngineSections(rollout_cfg, ray_cfg, vllm_cfg, threads)
        self.actors = [
            self._placed(actor, i).remote(policy_ref, version, sections, i, tuple(faults), delays)
            for i in range(rollout_cfg.workers)
        ]
        self.weights = {}  # version -> ObjectRef of its trainable tensors (while a request in flight names it)
        self.outstanding: Counter = Counter()  # weights version -> requests in flight naming it
        self.held = [version] * len(self.actors)
        self.pids = [p for p, _ in self._get([a.ping.remote() for a in self.actors], ray_cfg.timeout_s, "starting")]
        # what a weight push carries (vLLM actors: full, merged or adapter, as the first actor decided)
        self.shipping = self._get(self.actors[0].shipping.remote(), ray_cfg.timeout_s, "starting")
        self.restarts = 0

    def _placed(self, actor, i: int):
        """Actor ``i``: anywhere (separate layout), or in bundle ``i mod bundles`` of the learner's placement group."""
        ray_cfg, placed = self.ray_cfg, {}
        if self.placement is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg, bundles = self.placement
            placed = {
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i % bundles)
            }
        return actor.options(
            max_restarts=-1,
            max_task_retries=0,
            num_cpus=ray_cfg.cpus_per_worker,
            num_gpus=ray_cfg.gpus_per_worker,
            **placed,
        )

    def release(self) -> int:
        """Colocated layout: every actor frees its trainable weights before the learner updates; the bytes freed.
        Requests in flight finish first (Ray runs an actor's calls in order)."""
        return sum(self._get([a.release.remote() for a in self.actors], self.ray_cfg.timeout_s, "releasing weights"))

    def apply(self, fn, timeout_s: float):
        """``fn(policy)`` on actor 0's policy (the version it holds), within ``timeout_s``."""
        return self._get(self.actors[0].apply.remote(fn), timeout_s, "running on rollout worker 0")

    def events(self) -> list[list]:
        return self._get([a.events.remote() for a in self.actors], self.ray_cfg.timeout_s, "reading events")

    # ------------------------------------------------------------------ weights

    def publish(self, model: torch.nn.Module, version: int) -> str:
        """Push the learner's new weights to every actor; every actor's digest must equal the learner's (what the
        held engine takes after an update and the digest it answers: ``weights_to_ship``)."""
        named, expected = self.held_engine.weights_to_ship(model, self.shipping, self.dtype)
        return self.load_weights(named, version, expected=expected)

    @property
    def takes_shards(self) -> bool:
        """Its actors load a learner's shards straight from the object store (the local engine's trainable
        tensors; vLLM takes its own shipping, through the controller)."""
        return self.held_engine.name == "local" and self.shipping == "trainable"

    def publish_shards(self, handles: list, version: int) -> str:
        """The learner ranks' shard handles of ``version`` to every actor (no tensor passes through the controller);
        every actor's digest of the pieces must equal the learner's."""
        expected = shards_digest([p for h in handles for p in h.pieces])
        return self._load(("shards", handles), version, expected)

    def load_weights(self, named_tensors, version: int, expected: str | None = None) -> str:
        return self._load(self.ray.put(dict(named_tensors)), version, expected)

    def _loading(self, i: int, version: int):
        """Actor ``i``'s call that loads ``version`` (full tensors from one object, or a learner's shards)."""
        weights = self.weights[version]
        if isinstance(weights, tuple):
            return self.actors[i].load_shards.remote(weights[1], version)
        return self.actors[i].load_weights.remote(weights, version)

    def _load(self, weights, version: int, expected: str | None) -> str:
        # an older version stays while a request in flight names it (async: a re-issued request needs it)
        self.weights = {v: r for v, r in self.weights.items() if self.outstanding[v] > 0}
        self.weights[version] = weights
        loads = [self._loading(i, version) for i in range(len(self.actors))]  # every actor loads at once
        digests = [self._push(i, version, load) for i, load in enumerate(loads)]
        if expected is not None:
            for i, d in enumerate(digests):
                if d != expected:
                    raise RuntimeError(
                        f"rollout worker {i}: weights digest {d[:12]} after loading version {version}, "
                        f"the learner's is {expected[:12]}"
                    )
        self.version = version
        return digests[0]

    def _push(self, i: int, version: int, load=None) -> str:
        """Version ``version`` onto actor ``i`` (``load``: its call already sent), again after the actor died."""
        for _ in range(self.rollout_cfg.max_request_retries + 1):
            try:
                ref, load = load or self._loading(i, version), None
                # the load runs after the requests already queued on the actor (Ray keeps a caller's order)
                queued = 1 + sum(self.outstanding.values())
                digest = self._get(
                    ref, self.rollout_cfg.request_timeout_s * queued, f"loading weights {version} on worker {i}"
                )
                self.held[i] = version
                return digest
            except self._actor_died() as e:
                self._recover(i, e, f"loading weights version {version}")
        raise RuntimeError(
            f"rollout worker {i} died {self.rollout_cfg.max_request_retries + 1} times loading "
            f"weights version {version}"
        )

    # ------------------------------------------------------------------ requests

    def run(self, requests: list[RolloutRequest], ledger=None) -> list[list[Record]]:
        tickets = [self.submit(r, i % len(self.actors), ledger) for i, r in enumerate(requests)]
        return self.wait(tickets, ledger)

    def submit(self, request: RolloutRequest, worker: int, ledger=None, attempt: int = 0) -> Ticket:
        if self.held[worker] != request.weights_version and request.weights_version in self.weights:
            self._push(worker, request.weights_version)  # a restarted actor: give it the version the request names
        if ledger is not None:
            ledger.event("issued", request, worker, attempt)
        ref = self.actors[worker].generate.remote(request)
        self.outstanding[request.weights_version] += 1
        return Ticket(request, worker, attempt, ref, time.time())

    def wait(self, tickets: list[Ticket], ledger=None) -> list[list[Record]]:
        """Every ticket's records, in order; a request whose actor died is issued again (same seeds, same weights)."""
        out: dict[int, list[Record]] = {}
        live = dict(enumerate(tickets))
        while live:
            ready, _ = self.ray.wait([t.ref for t in live.values()], num_returns=1, timeout=1.0)
            if not ready:
                self._check_deadlines(live.values())
                continue
            k = next(k for k, t in live.items() if t.ref == ready[0])
            t = live.pop(k)
            self.outstanding[t.request.weights_version] -= 1
            try:
                out[k] = self._get(t.ref, self.rollout_cfg.request_timeout_s, f"request {t.request.request_id}")
            except self._actor_died() + (self.ray.exceptions.ObjectLostError,) as e:
                # ObjectLostError: the request finished, but its records sat on a node that died before they were
                # read; issued again they come back the same (same seeds, same weights)
                if ledger is not None:
                    ledger.event("failed", t.request, t.worker, t.attempt, error=type(e).__name__)
                if t.attempt >= self.rollout_cfg.max_request_retries:
                    raise RuntimeError(
                        f"request {t.request.request_id} failed {t.attempt + 1} times: its rollout "
                        f"worker {t.worker} died each time"
                    ) from e
                self._recover(t.worker, e, f"request {t.request.request_id}")
                live[k] = self.submit(t.request, t.worker, ledger, t.attempt + 1)
                continue
            if ledger is not None:
                ledger.done(t.request, out[k], t.worker, t.attempt)
        return [out[k] for k in range(len(tickets))]

    def _check_deadlines(self, tickets) -> None:
        now, limit = time.time(), self.rollout_cfg.request_timeout_s
        late = [t for t in tickets if now - t.issued_at > limit]
        if late:
            names = ", ".join(f"{t.request.request_id} (worker {t.worker})" for t in late)
            raise RuntimeError(f"rollout request(s) {names} ran past rollout.request_timeout_s={limit:g}")

    # ------------------------------------------------------------------ failures, shutdown

    def _actor_died(self):
        e = self.ray.exceptions
        return (e.RayActorError, e.ActorUnavailableError)

    def _get(self, refs, timeout: float, what: str):
        """``ray.get`` with a deadline; a wrong-version refusal comes out as ``WeightsVersionError``."""
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError as e:
            raise RuntimeError(f"{what}: no answer within {timeout:g} s") from e
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, WeightsVersionError):
                raise WeightsVersionError(str(e.cause)) from None
            raise

    def _recover(self, i: int, error: Exception, doing: str) -> None:
        """Wait (bounded) for Ray to restart actor ``i``; it then holds the weights it was created with."""
        self.restarts += 1
        deadline = time.time() + self.ray_cfg.timeout_s
        while True:
            try:
                pid, version = self.ray.get(self.actors[i].ping.remote(), timeout=max(1.0, deadline - time.time()))
                self.pids[i], self.held[i] = pid, version
                return
            except self._actor_died() + (self.ray.exceptions.GetTimeoutError,) as e:
                if time.time() > deadline:
                    raise RuntimeError(
                        f"rollout worker {i} died ({doing}: {type(error).__name__}) and was not "
                        f"restarted within ray.timeout_s={self.ray_cfg.timeout_s:g}"
                    ) from e
                time.sleep(0.1)

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - an actor already gone is what we want
                pass
        self.actors = []
        if getattr(self, "started_cluster", False) and self.ray.is_initialized():
            self.ray.shutdown()
            self.started_cluster = False
