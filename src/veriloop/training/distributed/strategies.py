"""The learner as one torch.distributed group of ``learner.world_size`` ranks (``learner.strategy`` ddp | fsdp2).

``DistributedLearner`` has the interface the trainer uses from ``Learner`` and sends each update to W ranks
(``groups.py``): processes veriloop spawns on this machine (one process group that meets through a file, no TCP
store or port), or Ray actors a placement group puts on the nodes of a cluster (``learner.placement ray``; a TCP
rendezvous on rank 0's node); gloo on the CPU, nccl on GPUs.  The weights come back as each rank's own rows in
buckets (``rollout/weight_shards.py``), which the controller copies into its policy one bucket at a time, or, with
``learner.controller_weights none``, leaves to the Ray rollout actors (the controller then holds no copy).  Exact
by construction:

* every rank holds the whole learning batch and draws the same mini-batch order from the controller's
  generator state; rank r takes the rows ``mb[r::W]`` of each mini-batch (strided: shares differ by
  at most one row) and weights its micro-batches by the GLOBAL normaliser (``aggregation_weight``
  against the whole mini-batch's mask, times ``kept_share``), so the sum over ranks of the gradients
  is the 1-process gradient;
* ddp: that sum is a manual ``all_reduce(SUM)`` of the flattened gradients (no factor W, no DDP
  wrapper: a rank with no rows adds zeros, and a parameter without a gradient on every rank stays
  without one, as in one process); fsdp2: ``fully_shard`` on every decoder layer and the root, the
  reduce-scatter summing (divide factor 1), gradient sync only on a mini-batch's last backward, and
  every rank running as many forward/backward passes as the rank with the most micro-batches (zero
  weighted passes on a row of the mini-batch) because each forward all-gathers;
* then global grad-norm clipping (every rank sees the same gradients) and the optimizer step;
  statistics are all-reduced (sums, counts, min/max of the ratio) so they are the 1-process ones.

Results differ from one process only by the order of floating-point sums (measured on the tiny model:
<= 1.2e-7 in float32, one rounding of the largest weight; ~1e-17 in float64); fsdp2 at 2 ranks equals
ddp at 2 ranks bit for bit (with gradient clipping off: the sharded norm is summed in another order).
Checkpoints are written by the ranks themselves: ddp's rank 0 its ``optimizer.pt`` (indexed by parameter, as
``Learner.save``), fsdp2's ranks ``torch.distributed.checkpoint`` shards (``loop/sharded_checkpoint.py``), rank 0
the critic's ``critic.pt``; a run resumes under local, ddp or fsdp2, at any world size, whatever wrote it.  Tested
on CPU (gloo), also bfloat16 (float32 masters) with ddp; nccl and gradient checkpointing with fsdp2 are untested.
The critic (PPO) trains on the ranks too, always ddp-style (its backbone is not sharded).  Every wait has a
deadline (``learner.timeout_s``): a rank that dies or hangs raises a ``ClusterFailure`` naming the rank (and its
node), one that raises a ``RuntimeError`` with its traceback, and the group is closed.  Each rank uses
``cfg.threads`` threads when set, else ``torch.get_num_threads() // W`` (at least 1): W ranks together use the
cores one process would.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from pathlib import Path
from typing import ClassVar

import torch

from veriloop.rollout.weight_shards import assemble_into, covers, release_weights
from veriloop.training.distributed.groups import ProcessRanks, RayRanks
from veriloop.training.distributed.ranks import RankShare
from veriloop.training.loop.learner import LearnerCapabilities, load_weights
from veriloop.training.loop.sharded_checkpoint import save_skeleton

log = logging.getLogger(__name__)


class DistributedLearner:
    """A ``Learner`` run by ``cfg.learner.world_size`` ranks (spawned processes, or Ray actors placed by a placement
    group: ``learner.placement``); the controller's ``policy`` (and ``critic``) get the updated weights after each
    update, assembled bucket by bucket from the ranks' shard handles (only trainable tensors travel)."""

    name: ClassVar[str]
    capabilities: ClassVar[LearnerCapabilities]

    def __init__(self, policy, cfg, on_step=lambda: None, critic=None, *, rank_share: type = RankShare, faults=()):
        from veriloop.registry import OBJECTIVES

        self.policy, self.cfg, self.critic, self.on_step = policy, cfg, critic, on_step
        self.rank_share = rank_share  # each rank's share and collectives (a test substitutes a wrong one)
        self.objective = OBJECTIVES.get(cfg.loss.policy_loss)
        self.lr, self.handles = cfg.optim.lr, []
        self.keeps_copy = cfg.learner.controller_weights == "full"  # none: the weights live on the ranks only
        payload = (self.policy, self.cfg, self.critic, self.rank_share)
        group = RayRanks if cfg.learner.placement == "ray" else ProcessRanks
        self.ranks = group(cfg, self.device, faults=faults)
        self.ranks.start_group(payload)
        atexit.register(_close_ref, weakref.ref(self))

    @property
    def device(self) -> torch.device:
        return getattr(self.policy, "device", torch.device("cpu"))

    @property
    def closed(self) -> bool:
        return self.ranks.closed

    def _call(self, cmd: str, arg=None) -> list:
        return self.ranks.call(cmd, arg)

    # ------------------------------------------------------------------ the learner's interface

    def update(self, lb, kl_beta: float, seed_generator: torch.Generator) -> dict:
        answers = self._call("update", (lb, kl_beta, seed_generator.get_state(), self.lr))
        stats, steps, gen_state, _ = answers[0]
        self.handles = [a[3] for a in answers]  # this version's shards: what the rollout engines load
        if self.keeps_copy:
            self._assemble(self.policy.model, self.handles, trainable=True)
        seed_generator.set_state(gen_state)  # the critic's draws continue where the learner's ended
        for _ in range(steps):
            self.on_step()
        return stats

    def _assemble(self, model: torch.nn.Module, handles: list, trainable: bool) -> int:
        """The controller's copy from the ranks' handles, bucket by bucket (its peak: one bucket over its weights)."""
        if trainable:
            tensors = {n: p for n, p in model.named_parameters() if p.requires_grad}
        else:
            tensors = dict(model.state_dict())
        covers(tensors, handles, list(tensors))
        return assemble_into(tensors, handles, remove=self.ranks.files)

    def shard_handles(self) -> list | None:
        """The last update's shard handles where a Ray actor can read them (Ray-placed ranks), else None."""
        return self.handles if self.handles and not self.ranks.files else None

    def critic_update(self, batch, returns, old_values, seed_generator: torch.Generator) -> dict:
        stats, gen_state, handle = self._call(
            "critic_update", (batch, returns, old_values, seed_generator.get_state())
        )[0]
        self._assemble(self.critic.model, [handle], trainable=False)
        seed_generator.set_state(gen_state)
        return stats

    def set_lr(self, lr: float) -> None:
        self.lr = lr  # sent with the next update

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        return list(self.policy.model.state_dict().items())

    def save(self, directory: Path) -> None:
        """``model/`` from the controller's policy; the optimizer from the ranks themselves: ``optimizer.pt`` (ddp,
        rank 0) or ``sharded/`` (fsdp2: every rank its shards of weights and moments, torch.distributed.checkpoint)."""
        if self.keeps_copy:
            self.policy.save(directory / "model")
        else:  # the config and tokenizer only: the weights are the shards (`veriloop export` makes them whole)
            save_skeleton(self.policy, directory / "model")
        self._call("save", str(directory))

    def load(self, directory: Path) -> None:
        """Each rank reads the checkpoint itself (any strategy wrote it; fsdp2's shards at any world size)."""
        if self.keeps_copy:
            load_weights(self.policy, directory / "model")
        self._call("load", str(directory))

    def release_copy(self) -> None:
        """learner.controller_weights none: free the controller's copy (once the rollout actors hold theirs)."""
        if not self.keeps_copy:
            release_weights(self.policy.model)

    def current_handles(self) -> list:
        """The ranks' shards of the weights they hold now (a resumed run's first push to the engines)."""
        self.handles = self._call("handles")
        return self.shard_handles() or []

    def load_critic_state_dict(self, state: dict) -> None:
        """The controller's copy of the critic (the ranks read ``critic.pt`` themselves in ``load``)."""
        self.critic.model.load_state_dict(state["model"])

    def close(self) -> None:
        self.ranks.close()

    def __del__(self):
        if getattr(self, "ranks", None) is not None:
            self.close()


def _close_ref(ref) -> None:
    learner = ref()
    if learner is not None:
        learner.close()


class DDPLearner(DistributedLearner):
    """``learner.strategy ddp``: every rank a full copy, the gradients summed by one all_reduce."""

    name = "ddp"
    capabilities = LearnerCapabilities(distributed=True)


class FSDP2Learner(DistributedLearner):
    """``learner.strategy fsdp2``: ``fully_shard`` per decoder layer and the root."""

    name = "fsdp2"
    capabilities = LearnerCapabilities(distributed=True, shards_weights=True)
