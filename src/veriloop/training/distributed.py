"""The learner as one torch.distributed group of ``learner.world_size`` ranks (``learner.strategy`` ddp | fsdp2).

The controller keeps its own policy (it samples, evaluates and saves from it); ``DistributedLearner``
has the interface the trainer uses from ``Learner`` and sends each update to W rank processes that
veriloop spawns (``multiprocessing`` "spawn"; one process group that meets through a file, no TCP
store or port; gloo on the CPU, its sockets on the loopback, nccl on GPUs, rank r on GPU r).  Exact by
construction:

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
Checkpoints are ``Learner.save``'s files (``optimizer.pt`` indexed by parameter, fsdp2's full state
converted), so a run resumes under local, ddp or fsdp2 whatever wrote it.  Tested on CPU (gloo), also
bfloat16 (float32 masters) with ddp; nccl and gradient checkpointing with fsdp2 are untested.  The
critic (PPO) trains on the ranks too, always ddp-style (its backbone is not sharded).  Every wait has a deadline
(``learner.timeout_s``): a rank that dies, fails or hangs raises a ``RuntimeError`` naming the rank
and the command, and the group is closed.  Each rank uses ``cfg.threads`` threads when set, else
``torch.get_num_threads() // W`` (at least 1): W ranks together use the cores one process would.
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import socket
import sys
import tempfile
import time
import traceback
import warnings
import weakref
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


class OneRank:
    """The learner's share in a single process: every row, no collectives."""

    def micro_batches(self, learner, batch, mb: torch.Tensor):
        return learner.micro_batches(batch, mb)

    def pad(self, learner, lb, mb: torch.Tensor) -> None:
        """fsdp2: the passes that keep a rank's collectives in step with the others'."""

    def split(self, rows: torch.Tensor, size: int):
        """This process's rows of a mini-batch in pieces of at most ``size``."""
        return rows.split(size)

    def sync_grads(self, model: torch.nn.Module) -> None:
        """ddp: the sum over ranks of the gradients."""

    def summary(self, stats) -> dict:
        return stats.summary()

    def add_up(self, *values: float) -> tuple:
        return values


ONE_RANK = OneRank()


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


def check_spawnable() -> None:
    """Spawned ranks re-import ``__main__``: code from ``python -``, ``python -c`` or some notebooks has no
    file to import, and ranks would die at start."""
    main = sys.modules.get("__main__")
    spec, path = getattr(main, "__spec__", None), getattr(main, "__file__", None)
    if spec is None and not (path and os.path.isfile(path)):
        raise RuntimeError("learner.strategy ddp/fsdp2 spawns learner processes, which re-import __main__; this "
                           "__main__ has no importable file (python -, python -c, a notebook?): run a script or "
                           "`python -m`, or use learner.strategy local")  # fmt: skip


def _send(conn, obj) -> None:
    conn.send_bytes(pickle.dumps(obj))  # plain pickle: tensors are copied, never moved to shared memory


def _recv(conn):
    return pickle.loads(conn.recv_bytes())


def _join_group(rank: int, world: int, store: str, backend: str, timeout_s: float, threads: int) -> None:
    """The rendezvous is a file (no TCP store: no port to pick or race for, nothing listening); gloo's
    own connections go over the loopback."""
    if "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets on the loopback too
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))  # fmt: skip


def rank_main(rank: int, world: int, store: str, conn, backend: str, timeout_s: float, threads: int) -> None:
    """A learner rank: join the group, take the policy (and critic), then serve the controller's commands."""
    parent = os.getppid()
    try:
        _join_group(rank, world, store, backend, timeout_s, threads)
        worker = RankWorker(rank, world, *_recv(conn))
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
    """What a rank holds (its learner and critic) and the commands it serves; rank 0 answers with results."""

    def __init__(self, rank: int, world: int, policy, cfg, critic, share: type = RankShare):
        from veriloop.training.learner import Learner

        self.rank, self.steps = rank, 0
        self.sharded = cfg.learner.strategy == "fsdp2"
        if policy.device.type == "cuda":  # nccl: rank r on GPU r (the pickle brought the controller's GPU)
            policy.model.to(torch.device("cuda", torch.cuda.current_device()))
            if critic is not None:
                critic.model.to(policy.device)
        if self.sharded:
            fully_shard_model(policy.model, world)
        self.learner = Learner(policy, cfg, on_step=self._count)
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

    def update(self, arg):
        lb, kl_beta, gen_state, lr = arg
        self.learner.set_lr(lr)
        gen, self.steps = self._gen(gen_state), 0
        stats = self.learner.update(lb, kl_beta, gen)
        weights = self.trainable_weights()
        return (stats, self.steps, gen.get_state(), weights) if self.rank == 0 else None

    def critic_update(self, arg):
        batch, returns, old_values, gen_state = arg
        gen = self._gen(gen_state)
        stats = self.critic.update(batch, returns, old_values, gen)
        weights = {k: v.detach().clone() for k, v in self.critic.model.state_dict().items()}
        return (stats, gen.get_state(), weights) if self.rank == 0 else None

    def trainable_weights(self) -> dict:
        model = self.learner.policy.model
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        if not self.sharded:
            return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {n: full[n] for n in names} if self.rank == 0 else {}

    def optimizer_state(self, _=None):
        """The optimizer state as ``Learner.save`` writes it (parameters by index), for every strategy."""
        learner = self.learner
        if not self.sharded:
            return learner.optimizer.state_dict() if self.rank == 0 else None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_optimizer_state_dict(learner.policy.model, learner.optimizer, options=opts)
        return _by_index(full) if self.rank == 0 else None

    def load(self, arg):
        weights, optimizer_state = arg
        learner = self.learner
        if not self.sharded:
            params = dict(learner.policy.model.named_parameters())
            with torch.no_grad():
                for name, value in weights.items():
                    params[name].copy_(value)
            learner.optimizer.load_state_dict(optimizer_state)
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        names = {id(p): n for n, p in learner.policy.model.named_parameters()}
        order = [[names[id(p)] for p in g["params"]] for g in learner.optimizer.param_groups]
        set_state_dict(learner.policy.model, learner.optimizer, model_state_dict=weights,
                       optim_state_dict=_by_name(optimizer_state, order),
                       options=StateDictOptions(full_state_dict=True, strict=False))  # fmt: skip
        return None

    def critic_state(self, _=None):
        return self.critic.state_dict() if self.rank == 0 else None

    def load_critic_state(self, state) -> None:
        self.critic.load_state_dict(state)


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


class DistributedLearner:
    """``Learner``'s interface, run by ``cfg.learner.world_size`` rank processes; the controller's ``policy``
    (and ``critic``) get the updated weights after each update (only trainable tensors travel)."""

    def __init__(self, policy, cfg, on_step=lambda: None, critic=None, *, rank_share: type = RankShare):
        from veriloop.registry import OBJECTIVES

        self.policy, self.cfg, self.critic, self.on_step = policy, cfg, critic, on_step
        self.rank_share = rank_share  # each rank's share and collectives (a test substitutes a wrong one)
        self.objective = OBJECTIVES.get(cfg.loss.policy_loss)
        self.lr, self.procs, self.conns, self.closed = cfg.optim.lr, [], [], False
        self._start_group()
        atexit.register(_close_ref, weakref.ref(self))

    def _start(self) -> None:
        import multiprocessing

        check_spawnable()
        lc, ctx = self.cfg.learner, multiprocessing.get_context("spawn")
        world, self.store_dir = lc.world_size, tempfile.mkdtemp(prefix="veriloop-learner-")
        store = os.path.join(self.store_dir, "rendezvous")
        backend = lc.backend if lc.backend != "auto" else ("nccl" if self.device.type == "cuda" else "gloo")
        threads = max(1, self.cfg.threads or torch.get_num_threads() // world)
        # one pickle: the critic's optimizer keeps its parameters
        payload = pickle.dumps((self.policy, self.cfg, self.critic, self.rank_share))
        for rank in range(world):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=rank_main, args=(rank, world, store, theirs, backend, lc.timeout_s, threads),
                               daemon=True, name=f"veriloop-learner-rank{rank}")  # fmt: skip
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

    def _start_group(self) -> None:
        """Start the ranks; a group that fails to form is started once more (a rendezvous on a busy machine's
        loopback can be refused), with a warning; a second failure raises."""
        try:
            self._start()
        except RuntimeError as e:
            warnings.warn(f"learner group failed to start, starting it once more: {e}", stacklevel=3)
            self.procs, self.conns, self.closed = [], [], False
            self._start()

    @property
    def device(self) -> torch.device:
        return getattr(self.policy, "device", torch.device("cpu"))

    # ------------------------------------------------------------------ messaging

    def _call(self, cmd: str, arg=None):
        """Send ``cmd`` to every rank; rank 0's answer."""
        if self.closed:
            raise RuntimeError(f"learner group is closed (after a failure or close()); cannot run {cmd}")
        data = pickle.dumps((cmd, arg))
        for rank, conn in enumerate(self.conns):
            try:
                conn.send_bytes(data)
            except OSError as e:
                self._fail(f"learner rank {rank} cannot take {cmd} ({e}){self._deaths()}")
        return self._replies(cmd)[0]

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
                self._fail(f"learner rank(s) {late} did not answer {cmd} within learner.timeout_s="
                           f"{self.cfg.learner.timeout_s}s")  # fmt: skip
        return [answers[r] for r in range(len(self.conns))]

    def _answer(self, rank: int, cmd: str):
        try:
            status, value = _recv(self.conns[rank])
        except (EOFError, OSError):
            self._fail(f"learner rank {rank} died during {cmd}{self._deaths()}")
        if status == "error":
            dead = self._died_within(2.0, besides=rank)  # a broken collective is often the echo of another rank's death
            if dead is not None:
                self._fail(f"learner rank {dead} died during {cmd} (exit code {self.procs[dead].exitcode}); "
                           f"rank {rank} then failed:\n{value}")  # fmt: skip
            self._fail(f"learner rank {rank} failed during {cmd}:\n{value}")
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

    def _fail(self, message: str):
        self.close()
        raise RuntimeError(message)

    # ------------------------------------------------------------------ the learner's interface

    def update(self, lb, kl_beta: float, seed_generator: torch.Generator) -> dict:
        stats, steps, gen_state, weights = self._call("update", (lb, kl_beta, seed_generator.get_state(), self.lr))
        _copy_into(self.policy.model, weights)
        seed_generator.set_state(gen_state)  # the critic's draws continue where the learner's ended
        for _ in range(steps):
            self.on_step()
        return stats

    def critic_update(self, batch, returns, old_values, seed_generator: torch.Generator) -> dict:
        stats, gen_state, weights = self._call("critic_update", (batch, returns, old_values,
                                                                 seed_generator.get_state()))  # fmt: skip
        with torch.no_grad():
            self.critic.model.load_state_dict(weights)
        seed_generator.set_state(gen_state)
        return stats

    def set_lr(self, lr: float) -> None:
        self.lr = lr  # sent with the next update

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        return list(self.policy.model.state_dict().items())

    def save(self, directory: Path) -> None:
        """``Learner.save``'s files: ``model/`` from the controller's policy, ``optimizer.pt`` (parameters by
        index, whatever the strategy: a checkpoint resumes under local, ddp or fsdp2)."""
        self.policy.save(directory / "model")
        torch.save(self._call("optimizer_state"), directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        from veriloop.training.learner import load_weights

        load_weights(self.policy, directory / "model")
        state = torch.load(directory / "optimizer.pt", weights_only=True, map_location="cpu")
        self._call("load", (_trainable(self.policy.model), state))

    def critic_state_dict(self) -> dict:
        """The critic's model and optimizer (the optimizer lives on the ranks)."""
        return self._call("critic_state")

    def load_critic_state_dict(self, state: dict) -> None:
        self.critic.model.load_state_dict(state["model"])
        self._call("load_critic_state", state)

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

    def __del__(self):
        if getattr(self, "procs", None):
            self.close()


def _close_ref(ref) -> None:
    learner = ref()
    if learner is not None:
        learner.close()


def _trainable(model: torch.nn.Module) -> dict:
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def _copy_into(model: torch.nn.Module, weights: dict) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def build_learner(policy, cfg, on_step=lambda: None, critic=None):
    """``Learner`` for ``learner.strategy`` local, else a ``DistributedLearner`` of ``learner.world_size`` ranks."""
    if cfg.learner.strategy == "local":
        from veriloop.training.learner import Learner

        return Learner(policy, cfg, on_step=on_step)
    return DistributedLearner(policy, cfg, on_step=on_step, critic=critic)
