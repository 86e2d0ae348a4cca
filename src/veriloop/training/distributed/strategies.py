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
import logging
import os
import pickle
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import ClassVar

import torch

from veriloop.training.distributed.ranks import RankShare, _recv, rank_main
from veriloop.training.loop.learner import LearnerCapabilities, load_weights

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


class DistributedLearner:
    """A ``Learner`` run by ``cfg.learner.world_size`` rank processes; the controller's ``policy`` (and ``critic``)
    get the updated weights after each update (only trainable tensors travel)."""

    name: ClassVar[str]
    capabilities: ClassVar[LearnerCapabilities]

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

    def _start_group(self) -> None:
        """Start the ranks; a group that fails to form is started once more (a rendezvous on a busy machine's
        loopback can be refused), with a warning; a second failure raises."""
        try:
            self._start()
        except RuntimeError as e:
            log.warning(f"learner group failed to start, starting it once more: {e}")
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
        stats, gen_state, weights = self._call(
            "critic_update", (batch, returns, old_values, seed_generator.get_state())
        )
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


class DDPLearner(DistributedLearner):
    """``learner.strategy ddp``: every rank a full copy, the gradients summed by one all_reduce."""

    name = "ddp"
    capabilities = LearnerCapabilities(distributed=True)


class FSDP2Learner(DistributedLearner):
    """``learner.strategy fsdp2``: ``fully_shard`` per decoder layer and the root."""

    name = "fsdp2"
    capabilities = LearnerCapabilities(distributed=True, shards_weights=True)
