"""The rank side of ``learner.strategy`` ddp | fsdp2: each rank's share of a mini-batch and its collectives.

``RankShare`` (a ``OneRank``, training/loop/share.py: the identity for one process) is rank r of W: the
rows ``mb[r::W]``, the gradient sum, the all-reduced statistics.  ``rank_main`` is the process ``ProcessRanks``
(``groups.py``) spawns: it joins the group, builds a ``RankWorker`` (a ``Learner``, and the critic, on its copy of
the policy) and answers commands; a Ray-placed rank (``groups.RankActor``) holds the same ``RankWorker``.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from veriloop.registry import LEARNERS
from veriloop.rollout.weight_shards import ShardHandle, file_stash, pack
from veriloop.training.loop.learner import load_weights
from veriloop.training.loop.sharded_checkpoint import SHARDED, load_sharded, read_weights, save_sharded
from veriloop.training.loop.share import OneRank


class RankShare(OneRank):
    """Rank ``rank`` of ``world`` in the group: its rows of each mini-batch, and the collectives."""

    def __init__(self, rank: int, world: int, sharded: torch.nn.Module | None = None):
        self.rank, self.world = rank, world
        self.sharded = sharded  # fsdp2: the fully_shard root, whose every forward and backward is a collective
        self.passes, self.done = 0, 0

    def share(self, rows: torch.Tensor, rank: int | None = None) -> torch.Tensor:
        return rows[(self.rank if rank is None else rank) :: self.world]

    def split(self, rows: torch.Tensor, size: int):
        n = [len(self.share(rows, r)) for r in range(self.world)]
        mine = list(self.share(rows).split(size)) if n[self.rank] else []  # no rows split into one empty piece
        return self._in_step(mine, max(-(-k // size) for k in n))

    def _pieces(self, learner, batch, rows):
        return list(learner.micro_batches(batch, rows)) if len(rows) else []  # a split of no rows is not []

    def micro_batches(self, learner, batch, mb):
        mine = self._pieces(learner, batch, self.share(mb))
        if self.sharded is None:
            return mine
        return self._in_step(mine, max(len(self._pieces(learner, batch, self.share(mb, r))) for r in range(self.world)))

    def _in_step(self, pieces: list, passes: int):
        """fsdp2: every rank runs ``passes`` (the most any rank has) forward/backward passes, ``pad`` the
        missing ones; gradients sync (reduce-scatter) on the last."""
        if self.sharded is None:
            return pieces
        self.passes, self.done = passes, 0
        return self._counted(pieces)

    def _counted(self, pieces):
        for rows in pieces:
            self._next_pass()
            yield rows

    def _next_pass(self) -> None:
        self.sharded.set_requires_gradient_sync(self.done == self.passes - 1)
        self.done += 1

    def pad(self, learner, lb, mb) -> None:
        while self.sharded is not None and self.done < self.passes:  # weight 0: the gradient adds exact zeros
            self._next_pass()
            lp = learner.logprobs(learner.sub_batch(lb, mb[:1]), entropy=False).sampled
            (0.0 * lp.sum()).backward()

    def sync_grads(self, model: torch.nn.Module) -> None:
        if model is self.sharded:
            return  # fsdp2 reduce-scattered them
        params = [p for p in model.parameters() if p.requires_grad]
        has = torch.tensor([float(p.grad is not None) for p in params], dtype=torch.float64)
        dist.all_reduce(has, op=dist.ReduceOp.MAX)  # a gradient on some rank: every rank takes part
        live = [p for p, h in zip(params, has.tolist()) if h]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for dtype in dict.fromkeys(p.dtype for p in live):  # one buffer per dtype, in the same order on every rank
            group = [p for p in live if p.dtype == dtype]
            flat = torch.cat([p.grad.reshape(-1) for p in group])
            dist.all_reduce(flat)
            for p, g in zip(group, flat.split([p.numel() for p in group])):
                p.grad.copy_(g.view_as(p.grad))

    def summary(self, stats) -> dict:
        shares = [None] * self.world  # each rank's per-token values of its own rows
        dist.all_gather_object(shares, stats.tokens)
        stats.tokens = {
            name: {row: v for share in shares for row, v in share.get(name, {}).items()}
            for name in sorted(set().union(*shares))
        }
        keys = [None] * self.world
        dist.all_gather_object(keys, sorted(stats.sums))  # a rank without rows has no "kl", "entropy", ...
        keys = sorted(set().union(*keys))
        totals = torch.tensor([[stats.sums.get(k, 0.0), stats.counts.get(k, 0.0)] for k in keys], dtype=torch.float64)
        dist.all_reduce(totals)
        stats.sums = dict(zip(keys, totals[:, 0].tolist()))
        stats.counts = dict(zip(keys, totals[:, 1].tolist()))
        if "loss" in stats.counts:  # every rank counted each mini-batch once; its loss is the sum of the parts
            stats.counts["loss"] /= self.world
        extremes = torch.tensor([stats.ratio_min, -stats.ratio_max], dtype=torch.float64)
        dist.all_reduce(extremes, op=dist.ReduceOp.MIN)
        stats.ratio_min, stats.ratio_max = extremes[0].item(), -extremes[1].item()
        return stats.summary()  # grad norms: already global (taken after the gradient sum)

    def add_up(self, *values: float) -> tuple:
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return tuple(t.tolist())


# ---------------------------------------------------------------------- the rank process


def _send(conn, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))  # plain pickle: tensors are copied, never moved to shared memory


def _recv(conn):
    return pickle.loads(conn.recv_bytes())


def _join_group(rank: int, world: int, init_method: str, backend: str, timeout_s: float, threads: int) -> None:
    """Join the group at ``init_method``: a file (spawned ranks: no TCP store, no port to pick or race for) or
    ``tcp://host:port`` (Ray-placed ranks, rank 0's node).  On the loopback, gloo's own sockets stay on it."""
    loopback = init_method.startswith("file://") or init_method.startswith("tcp://127.")
    if loopback and "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )


def rank_main(rank: int, world: int, store: str, conn, backend: str, timeout_s: float, threads: int) -> None:
    """A learner rank: join the group, take the policy (and critic), then serve the controller's commands."""
    # Ctrl-C or a preemption's SIGTERM sent to the whole process group is the controller's to handle (it finishes
    # the step with the ranks, checkpoints, then closes them); a rank stopping on its own would lose the step.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    try:
        _join_group(rank, world, f"file://{store}", backend, timeout_s, threads)
        worker = RankWorker(rank, world, *_recv(conn))
        worker.stash = file_stash(os.path.dirname(store))  # buckets of weights: files the controller reads
        _send(conn, ("ok", None))
    except BaseException:
        _send(conn, ("error", traceback.format_exc()))
        return
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent:  # the controller is gone
                break
            continue
        try:
            cmd, arg = _recv(conn)
        except EOFError:
            break
        if cmd == "close":
            break
        try:
            _send(conn, ("ok", getattr(worker, cmd)(arg)))
        except BaseException:
            _send(conn, ("error", traceback.format_exc()))
            break  # the group may be out of step: this rank is done
    if dist.is_initialized():
        dist.destroy_process_group()


def fully_shard_model(model: torch.nn.Module, world: int) -> None:
    """FSDP2: ``fully_shard`` on every decoder layer, then the root, over a CPU (or CUDA) device mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers.modeling_layers import GradientCheckpointingLayer

    device = next(model.parameters()).device.type
    mesh = init_device_mesh(device, (world,))
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"learner.strategy fsdp2: {type(model).__name__} has no decoder layers to shard")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for unit in layers + [model]:  # the sum of the ranks' gradients (the weights are global), as a plain SUM
        unit.set_gradient_divide_factor(1.0)  # (gloo has no pre-multiplied sum)
        unit.set_force_sum_reduction_for_comms(True)


class RankWorker:
    """What a rank holds (its learner and critic) and the commands it serves.  Weights leave a rank as a
    ``ShardHandle`` (its own rows, in buckets it stashes: rollout/weight_shards.py), checkpoints are written by the
    ranks themselves (training/loop/sharded_checkpoint.py, optimizer.pt, critic.pt): what a rank answers is
    statistics and handles."""

    def __init__(self, rank: int, world: int, policy, cfg, critic, share: type = RankShare):
        self.rank, self.world, self.steps = rank, world, 0
        self.bucket_bytes = int(cfg.learner.sync_bucket_mb * 2**20)
        self.stash = None  # set by the host: a file per bucket (spawned ranks) or ray.put (Ray actors)
        self.sharded = LEARNERS.get(cfg.learner.strategy).capabilities.shards_weights
        if policy.device.type == "cuda":  # nccl: rank r on GPU r (the pickle brought the controller's GPU)
            policy.model.to(torch.device("cuda", torch.cuda.current_device()))
            if critic is not None:
                critic.model.to(policy.device)
        if self.sharded:
            fully_shard_model(policy.model, world)
        self.learner = LEARNERS.get("local")(policy, cfg, on_step=self._count)
        self.learner.ranks = share(rank, world, sharded=policy.model if self.sharded else None)
        self.critic = critic
        if critic is not None:
            critic.ranks = RankShare(rank, world)  # ddp-style: the critic's backbone is not sharded

    def _count(self) -> None:
        self.steps += 1

    def _gen(self, state) -> torch.Generator:
        gen = torch.Generator()
        gen.set_state(state)
        return gen

    def _handle(self, named: list, replicated: bool) -> ShardHandle:
        """This rank's pieces of ``named``: a replicated tensor travels from rank 0 only."""
        if replicated and self.rank != 0:
            return ShardHandle(self.rank)
        return pack(named, self.rank, self.bucket_bytes, self.stash)

    def update(self, arg):
        lb, kl_beta, gen_state, lr = arg
        self.learner.set_lr(lr)
        gen, self.steps = self._gen(gen_state), 0
        stats = self.learner.update(lb, kl_beta, gen)
        handle = self._handle(self.trainable(), replicated=not self.sharded)
        return (stats, self.steps, gen.get_state(), handle) if self.rank == 0 else (None, None, None, handle)

    def critic_update(self, arg):
        batch, returns, old_values, gen_state = arg
        gen = self._gen(gen_state)
        stats = self.critic.update(batch, returns, old_values, gen)
        handle = self._handle(list(self.critic.model.state_dict().items()), replicated=True)
        return (stats, gen.get_state(), handle) if self.rank == 0 else (None, None, handle)

    def handles(self, _=None) -> ShardHandle:
        """This rank's shards of the weights it holds now."""
        return self._handle(self.trainable(), replicated=not self.sharded)

    def trainable(self) -> list:
        return [(n, p) for n, p in self.learner.policy.model.named_parameters() if p.requires_grad]

    def save(self, directory: str) -> None:
        """The optimizer (and fsdp2's weights) into the checkpoint directory, from the ranks themselves."""
        learner = self.learner
        if self.sharded:
            save_sharded(learner.policy.model, learner.optimizer, Path(directory) / SHARDED)
        elif self.rank == 0:
            torch.save(learner.optimizer.state_dict(), Path(directory) / "optimizer.pt")
        if self.critic is not None and self.rank == 0:  # ddp-style: every rank holds the whole critic
            torch.save(self.critic.state_dict(), Path(directory) / "critic.pt")

    def load(self, directory: str) -> None:
        """Resume from a checkpoint whatever wrote it: fsdp2's sharded state (any world size), or ``model/`` and
        ``optimizer.pt`` (local, ddp), each rank reading the files itself."""
        learner, directory = self.learner, Path(directory)
        if self.critic is not None:
            self.critic.load_state_dict(torch.load(directory / "critic.pt", weights_only=True, map_location="cpu"))
        if (directory / SHARDED).is_dir():
            load_sharded(learner.policy.model, learner.optimizer, directory / SHARDED, distributed=self.sharded)
            return
        optimizer_state = torch.load(directory / "optimizer.pt", weights_only=True, map_location="cpu")
        if not self.sharded:
            load_weights(learner.policy, directory / "model")
            learner.optimizer.load_state_dict(optimizer_state)
            return
        weights = read_weights(directory / "model", learner.policy.model)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        names = {id(p): n for n, p in learner.policy.model.named_parameters()}
        order = [[names[id(p)] for p in g["params"]] for g in learner.optimizer.param_groups]
        set_state_dict(
            learner.policy.model,
            learner.optimizer,
            model_state_dict=weights,
            optim_state_dict=_by_name(optimizer_state, order),
            options=StateDictOptions(full_state_dict=True, strict=False),
        )


def _by_index(full: dict) -> dict:
    """A full optimizer state keyed by parameter names -> keyed by index, as ``optimizer.state_dict()``."""
    index, groups = {}, []
    for g in full["param_groups"]:
        for name in g["params"]:
            index[name] = len(index)
        groups.append({**g, "params": [index[n] for n in g["params"]]})
    return {"state": {index[n]: s for n, s in full["state"].items()}, "param_groups": groups}


def _by_name(state: dict, order: list[list[str]]) -> dict:
    """The inverse of ``_by_index``, with the names of the optimizer's parameters in group order."""
    names = [n for group in order for n in group]
    groups = [{**g, "params": list(o)} for g, o in zip(state["param_groups"], order)]
    return {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}


# ---------------------------------------------------------------------- the controller's side
