"""The Ray actor of ``rollout.engine=ray``: one rollout worker, the engine it holds, and the tests' fault hooks.

``RayEngine`` (``rollout/ray_engine.py``) applies ``ray.remote`` to ``RolloutWorker`` and talks to its actors: it
sends requests, loads weights (whole, or a learner's shards: ``load_shards``), and in the colocated layout has them
``release`` their weights while the learner updates.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import torch

from veriloop.registry import ENGINES
from veriloop.rollout.engine import EngineSections, RolloutRequest, WeightsVersionError
from veriloop.rollout.records import Record
from veriloop.rollout.weight_shards import assemble_into, model_shards_digest, release_weights, take_back


class RolloutWorker:
    """The Ray actor: a ``LocalEngine`` on its own copy of the policy (``ray.remote`` is applied by ``RayEngine``).

    ``faults`` and ``delays`` exist for the tests: a fault SIGKILLs this process during the n-th call of a
    kind (once per marker file, so the restarted actor does not die again); with ``"node": True`` it SIGKILLs
    this actor's raylet first, so the whole node dies (the marker then holds that node's id); a delay sleeps
    before sampling.
    """

    def __init__(self, policy, version: int, sections: EngineSections, index: int, faults=(), delays=None):
        if sections.threads:
            torch.set_num_threads(sections.threads)
        if getattr(policy, "device", torch.device("cpu")).type != "cpu" and not torch.cuda.is_available():
            policy.model.to("cpu")  # a policy put from a GPU controller, on an actor without a GPU
        # the registered engine ray.worker_engine names, in this actor's process
        self.engine = ENGINES.get(sections.ray.worker_engine).build(policy, version, sections)
        self.index, self.faults, self.delays = index, faults, delays
        self.released, self.timeline = None, []  # colocated layout: the freed tensors; every event, in order
        self.calls: Counter = Counter()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def ping(self) -> tuple[int, int]:
        return os.getpid(), self.engine.version

    def shipping(self) -> str:
        return self.engine.shipping

    def load_weights(self, weights: dict, version: int) -> str:
        fault = self._fault("load_weights")
        named = list(weights.items())
        if fault:  # die half-way through the copy: the actor holds a mix of two versions when it is killed
            self.engine.load_weights(named[: len(named) // 2], self.engine.version)
            _die(fault)
        return self.engine.load_weights(named, version)

    def load_shards(self, handles: list, version: int) -> str:
        """A learner's shards (``rollout/weight_shards.py``) into this actor's weights, bucket by bucket, straight
        from the object store; the digest of the pieces as this actor now holds them.  A released actor (colocated
        layout) takes its memory back first: the shards refill every tensor it freed."""
        if self.released is not None:
            take_back(self.released)
            self.released = None
        tensors = dict(self.engine.policy.model.named_parameters())
        assemble_into(tensors, handles)
        self.engine.version = version
        self.timeline.append(("load", version, time.time(), self.held_bytes()))
        return model_shards_digest(tensors, [p for h in handles for p in h.pieces])

    def release(self) -> int:
        """Colocated layout: free the trainable weights (the tensors a sync refills) while the learner updates on
        the same resources; the bytes freed.  Until the next ``load_shards`` this actor refuses to sample."""
        before = self.held_bytes()
        self.released = release_weights(self.engine.policy.model)
        nbytes = before - self.held_bytes()
        self.timeline.append(("release", self.engine.version, time.time(), self.held_bytes()))
        return nbytes

    def apply(self, fn):
        """``fn(policy)`` on this actor's policy (the version it holds): the controller's greedy validation when
        it keeps no copy of the weights (learner.controller_weights none)."""
        if self.released is not None:
            raise WeightsVersionError(f"rollout worker {self.index} released its weights; nothing to evaluate")
        return fn(self.engine.policy)

    def held_bytes(self) -> int:
        return sum(p.nbytes for p in self.engine.policy.model.parameters())

    def events(self) -> list:
        """(event, version, wall time, weight bytes held) of every sample, release and load: the handover's record."""
        return list(self.timeline)

    def generate(self, request: RolloutRequest) -> list[Record]:
        if self.released is not None:  # never sample with weights that were handed over (an anchor's silent failure)
            raise WeightsVersionError(
                f"rollout worker {self.index} released its weights for the learner; request {request.request_id} "
                "came before the next version was loaded"
            )
        self.timeline.append(("generate", request.weights_version, time.time(), self.held_bytes()))
        fault = self._fault("generate")
        if fault:  # die while sampling: at the second decode step of this request
            from veriloop.rollout import sampler

            uniforms = sampler.RowStreams.uniforms

            def dying(streams, rows, step):
                if step == 1:
                    _die(fault)
                return uniforms(streams, rows, step)

            sampler.RowStreams.uniforms = dying
        if self.delays is not None:
            time.sleep(self.delays(request))
        return self.engine.generate(request)

    def _fault(self, kind: str) -> dict | None:
        """The fault to fire now, if any."""
        self.calls[kind] += 1
        for f in self.faults:
            if (f["worker"], f["call"], f["nth"]) == (self.index, kind, self.calls[kind]):
                try:  # O_EXCL: exactly one incarnation fires it
                    os.close(os.open(f["marker"], os.O_CREAT | os.O_EXCL))
                    return f
                except FileExistsError:
                    return None
        return None


def _die(fault: dict) -> None:
    """SIGKILL this actor; for a ``node`` fault its raylet first, as when the machine goes (no drain, no goodbye)."""
    if fault.get("node"):
        import ray

        raylet = os.getppid()  # Ray's raylet starts its workers itself: an actor's parent is its node's raylet
        with open(f"/proc/{raylet}/cmdline", "rb") as f:
            program = os.path.basename(f.read().split(b"\0")[0])
        if program != b"raylet":  # never kill a process we did not mean to
            raise RuntimeError(f"node fault: this actor's parent (pid {raylet}) is {program!r}, not a raylet")
        with open(fault["marker"], "w") as f:  # which node died, for the test to check where the actor came back
            f.write(ray.get_runtime_context().get_node_id())
        os.kill(raylet, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
