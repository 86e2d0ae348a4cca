"""Weight sync without a full gather: the controller's memory while one update's weights reach it.

    python benchmarks/weight_sync.py [--buckets 4,16,64] [--repeats 5] [--hidden 512] [--layers 12] [--no-actor]
        [--json F] [--quick]

A simulated cluster on this machine (``rollout/ray_cluster.py``: the head, where this process is the controller,
with no CPU for ranks; two nodes of one CPU each; a third node without CPUs for the rollout actor) runs the learner
as 2 nodes x 1 fsdp2 rank (``learner.placement ray``), on the built-in Llama made large (``policy builtin:init``,
``--hidden``/``--layers``: 50M parameters at the defaults, float32).  For each ``learner.sync_bucket_mb`` of
``--buckets``, ``--repeats`` times two updates of one learning batch:

* ``shards`` (the sync as it is), after the first: ``DistributedLearner.update`` gets every rank's ``ShardHandle``
  and copies bucket after bucket into the controller's policy (``_assemble``, timed and measured around that call);
* ``rollout actor`` (unless ``--no-actor``): a ``RolloutWorker`` on the third node loads the same handles
  (``load_shards``, as ``RayEngine.publish_shards`` has it do), measured in the actor;
* ``full copy`` (the shape of the sync before it: rank 0 gathered the full weights and sent them whole through a
  pipe), after the second update, in ``_assemble``'s place: every bucket fetched and copied into the controller's
  own memory before the first is copied into its policy.

Each is the first reader of its buckets on its node, so its time includes their crossing between object stores.

Memory is the process's private anonymous memory (``/proc/<pid>/statm``: resident minus file-backed and shared
pages, the ``Anonymous:`` of ``smaps_rollup`` without its walk of every mapping, ~5 ms a read here), NOT its RSS:
Ray's object store is a shared mapping (/dev/shm) whose touched pages stay in RSS after they are released.  A
separate process samples it every ~1 ms (no GIL between it and the copy it watches); the figure is the peak minus
the first sample, taken just before the sync.  glibc's malloc is set to hand every block over 128 KiB back to the
OS when freed (``mallopt(M_MMAP_THRESHOLD)``, and ``malloc_trim`` before each baseline), so the peak is what the
sync holds at once, not what the allocator keeps cached from the sync before.  ``--quick``: the tiny built-in
model, buckets of 0.01 MiB, one repeat.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, result_args, save, stamp_line  # noqa: E402

MIB = 2**20
# samples the anonymous memory of pid argv[1]: on "start" the baseline, then every ~1 ms until "stop"
SAMPLER = r"""
import os, select, sys
statm, page = f"/proc/{sys.argv[1]}/statm", os.sysconf("SC_PAGE_SIZE")
def anon():
    with open(statm) as f:
        _, resident, shared, *_ = f.read().split()
    return (int(resident) - int(shared)) * page
while os.read(0, 6):
    base = peak = anon()
    n = 1
    print("ready", flush=True)
    while not select.select([0], [], [], 0.001)[0]:
        peak, n = max(peak, anon()), n + 1
    os.read(0, 5)
    print(base, peak, anon(), n, flush=True)
"""


def fixed_malloc() -> None:
    """Blocks over 128 KiB mmap'd and unmapped at free (glibc would raise the threshold to 32 MiB after the first
    big free, then keep freed buckets in its heap): what the sync holds is then what the process holds."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: the figures may include cached blocks


def trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def smaps_anonymous_mib() -> float:
    """``Anonymous:`` of smaps_rollup (the slow, authoritative reading), to cross-check the sampler's baseline."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Peak:
    """The peak anonymous memory of process ``pid`` while a callable runs, from a sampler process."""

    def __init__(self, pid: int):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SAMPLER, str(pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def measure(self, fn):
        """``fn()``, and its peak, end and baseline memory (MiB), wall time and samples."""
        trim()
        smaps = smaps_anonymous_mib()
        self.proc.stdin.write("start\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - started
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        base, peak, end, n = (int(v) for v in self.proc.stdout.readline().split())
        return out, {
            "peak_mib": (peak - base) / MIB,
            "end_mib": (end - base) / MIB,
            "wall_s": wall,
            "baseline_mib": base / MIB,
            "baseline_smaps_mib": smaps,
            "samples": n,
        }

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def options(a, run_dir: str) -> dict:
    """The controller's run: the built-in Llama at ``a``'s size, a small batch (the update's cost is not measured)."""
    return {
        "policy": "builtin:init",
        "model.hidden_size": a.hidden,
        "model.intermediate_size": 4 * a.hidden,
        "model.num_layers": a.layers,
        "model.num_heads": max(1, a.hidden // 64),
        "rollout.prompts_per_step": 2,
        "rollout.group_size": 2,
        "sampling.max_new_tokens": 8,
        "update.micro_batch_size": 2,
        "update.mask_truncated": False,
        "update.skip_zero_advantage": False,  # a random model earns no reward: keep its rows all the same
        "task.arithmetic.heldout_size": 8,
        "eval_every": 0,
        "device": "cpu",
        "run_dir": run_dir,
    }


def learning_batch(opts: dict):
    """The start policy and one learning batch, as the trainer makes them."""
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    trainer = Trainer(build_config(TrainConfig, {}, opts), progress=False)
    try:
        records, _, _ = trainer.collector.collect(1, 0)
        return trainer.policy, trainer.learning_signal(records).batch
    finally:
        trainer.close()


def synced(learner, peak: Peak, lb, seed: int, assemble) -> dict:
    """One update whose sync (``_assemble``, replaced by ``assemble``: the same arguments) is measured; each way is
    the first reader of its update's buckets (they cross from the ranks' nodes to the head's object store)."""
    import torch

    seen = {}

    def measured(model, handles, trainable):
        out, seen["m"] = peak.measure(lambda: assemble(model, handles, trainable))
        return out

    learner._assemble = measured
    try:
        learner.update(lb, 0.0, torch.Generator().manual_seed(seed))
    finally:
        del learner._assemble  # the class's method again
    return seen["m"]


def full_copy(model, handles: list, trainable: bool) -> int:
    """The weights arriving whole: every bucket's bytes in this process's own memory (as the old path's pipe
    delivered rank 0's full state dict) before the first is copied into the policy."""
    import torch

    from veriloop.rollout.weight_shards import fetch

    tensors = {n: p for n, p in model.named_parameters() if p.requires_grad}
    buckets = [b for h in handles for b in h.buckets]
    # a private copy of each: a fetch that maps the object store (zero-copy) would otherwise hide the full copy
    flats = [torch.as_tensor(fetch(b)).clone() for b in buckets]
    with torch.no_grad():
        for bucket, flat in zip(buckets, flats):
            for p in bucket.pieces:
                target = tensors[p.name][p.row : p.row + p.rows] if p.shape else tensors[p.name]
                target.copy_(flat[p.start : p.start + p.numel].view(p.local_shape))
    return sum(b.nbytes for b in buckets)


def measured_worker():
    """``RolloutWorker`` with a measured ``load_shards`` (made here: Ray ships a class of ``__main__`` by value)."""
    from veriloop.rollout.ray_worker import RolloutWorker

    class MeasuredWorker(RolloutWorker):
        def measured_load(self, handles: list, version: int):
            fixed_malloc()
            peak = Peak(os.getpid())
            try:
                return peak.measure(lambda: self.load_shards(handles, version))
            finally:
                peak.close()

    return MeasuredWorker


def start_actor(cfg, policy):
    """A rollout actor on a node of its own (node 3: no CPU, no rank), holding its own copy of the policy."""
    import ray

    from veriloop.rollout.engine import EngineSections

    cls = ray.remote(measured_worker()).options(num_cpus=0, resources={"node3": 0.01}, max_restarts=0)
    actor = cls.remote(ray.put(policy), 0, EngineSections.of(cfg), 0)
    ray.get(actor.ping.remote())
    return actor


def actor_sync(actor, learner, version: int) -> dict:
    import ray

    from veriloop.rollout.weight_shards import shards_digest

    digest, m = ray.get(actor.measured_load.remote(learner.handles, version))
    if digest != shards_digest([p for h in learner.handles for p in h.pieces]):
        raise RuntimeError(f"the rollout actor's digest after version {version} is not the learner's")
    return m


def run_bucket(a, opts: dict, policy, lb, mib: float, peak: Peak) -> dict:
    """One learner at ``learner.sync_bucket_mb`` ``mib``: ``a.repeats`` times the three syncs, on two updates."""
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.distributed.strategies import DistributedLearner

    learner_opts = {"strategy": "fsdp2", "world_size": 2, "placement": "ray", "nodes": 2, "sync_bucket_mb": mib}
    cfg = build_config(TrainConfig, {}, {**opts, **{f"learner.{k}": v for k, v in learner_opts.items()}})
    learner = DistributedLearner(policy, cfg)
    actor = None if a.no_actor else start_actor(cfg, policy)
    repeats = []
    try:
        for r in range(a.repeats):
            row = {"shards": synced(learner, peak, lb, 2 * r, learner._assemble)}
            if actor is not None:  # this update's buckets, from the ranks' nodes to the actor's
                row["actor"] = actor_sync(actor, learner, 2 * r + 1)
            row["full"] = synced(learner, peak, lb, 2 * r + 1, full_copy)
            repeats.append(row)
            print(f"bucket {mib:g} MiB, repeat {r}: " + _row_summary(row), file=sys.stderr, flush=True)
        sizes = [b.nbytes for h in learner.handles for b in h.buckets]
    finally:
        learner.close()
        if actor is not None:
            import ray

            ray.kill(actor)
    return {"bucket_mb": mib, "buckets": len(sizes), "largest_bucket_mib": max(sizes) / MIB, "repeats": repeats}


def _row_summary(row: dict) -> str:
    return ", ".join(f"{k} +{m['peak_mib']:.1f} MiB in {m['wall_s']:.3f} s" for k, m in row.items())


def ray_tmpdir() -> None:
    """Ray's sockets live under $TMPDIR/ray/session_*/ (a Unix socket's path: at most 107 bytes): a long TMPDIR
    (a test's scratch directory) would break them, so Ray then uses /tmp as it does by default."""
    if "RAY_TMPDIR" not in os.environ and len(tempfile.gettempdir()) > 40:
        os.environ["RAY_TMPDIR"] = "/tmp"


def run(a) -> dict:
    from veriloop.rollout.ray_cluster import simulated_cluster

    fixed_malloc()
    ray_tmpdir()
    with tempfile.TemporaryDirectory(prefix="weight-sync-") as tmp:
        opts = options(a, f"{tmp}/run")
        policy, lb = learning_batch(opts)
        trainable = [p for p in policy.model.parameters() if p.requires_grad]
        model = {
            "hidden": a.hidden,
            "layers": a.layers,
            "params": sum(p.numel() for p in policy.model.parameters()),
            "trainable_mib": sum(p.numel() * p.element_size() for p in trainable) / MIB,
            "dtype": str(trainable[0].dtype).removeprefix("torch."),
        }
        print(f"model: {model}", file=sys.stderr, flush=True)
        peak = Peak(os.getpid())
        try:
            with simulated_cluster([1, 1, 0], head_cpus=0, object_store_mib=a.store_mib):
                runs = [run_bucket(a, opts, policy, lb, mib, peak) for mib in a.bucket_list]
        finally:
            peak.close()
    return {"model": model, "runs": runs}


# ---------------------------------------------------------------------------------------------- the page

PAGE = "weight-sync"
PATHS = (("shards", "shards"), ("full", "full copy"), ("actor", "rollout actor"))


def table_lines(r: dict) -> list[str]:
    m = r["model"]
    paths = [(k, label) for k, label in PATHS if all(k in rep for run in r["runs"] for rep in run["repeats"])]
    head = "| `learner.sync_bucket_mb` | buckets | largest bucket MiB |"
    head += "".join(f" {label}: peak MiB | {label}: s |" for _, label in paths) + " shards ÷ bucket |"
    out = [
        f"Model: {m['params']:,} parameters ({m['hidden']} wide, {m['layers']} layers), trainable "
        f"{m['trainable_mib']:.1f} MiB in {m['dtype']}; mean ± sd over {len(r['runs'][0]['repeats'])} repeats.",
        "",
        head,
        "|---:|---:|---:|" + "---:|---:|" * len(paths) + "---:|",
    ]
    for run in r["runs"]:
        cells = [f"{run['bucket_mb']:g}", str(run["buckets"]), f"{run['largest_bucket_mib']:.2f}"]
        for k, _ in paths:
            cells.append(fmt([rep[k]["peak_mib"] for rep in run["repeats"]], 1))
            cells.append(fmt([rep[k]["wall_s"] for rep in run["repeats"]], 3))
        cells.append(fmt([rep["shards"]["peak_mib"] / run["largest_bucket_mib"] for rep in run["repeats"]], 2))
        out.append("| " + " | ".join(cells) + " |")
    return out


def render(results: list[dict]) -> str:
    lines = [
        "# Weight sync without a full gather",
        "",
        "`benchmarks/weight_sync.py`: after each update of a learner of 2 nodes x 1 fsdp2 rank (`learner.placement "
        "ray`), each rank's own rows leave it in buckets of at most `learner.sync_bucket_mb` through Ray's object "
        "store, and the controller copies them into its policy bucket after bucket (**shards**). **Rollout "
        "actor**: a rollout actor on a node of its own loading the same buckets itself "
        "(`RolloutWorker.load_shards`), measured in the actor. **Full copy** (after the next update, in the "
        "shards path's place) is the weights arriving whole, as when rank 0 gathered the full state dict and sent "
        "it to the controller through a pipe: every bucket fetched and copied into the controller's own memory "
        "before the first is copied into its policy. *Shards ÷ bucket*: the shards path's peak in largest "
        "buckets (the aim: at most 1).",
        "",
        "*Peak MiB* is the process's peak private anonymous memory during the sync minus its value just before "
        "(`/proc/<pid>/statm` resident minus shared pages, sampled every ~1 ms by a separate process), not RSS: "
        "the object store is a shared mapping whose pages stay in RSS after they are released. glibc's malloc is "
        "set to return every block over 128 KiB to the OS when freed, so the peak is what the sync holds at "
        "once. *s*: the sync's wall time (fetching every bucket from the ranks' nodes, and copying; the ranks' "
        "packing is part of the update before it).",
        "",
        "What this shows: on this machine, a simulated cluster of Ray nodes that share one machine's memory and "
        "CPUs (the buckets cross from one node's object store to another's through the loopback), on the CPU. "
        "What it does not show: GPUs (no device-to-host copy, no NCCL), a real network's bandwidth, or models "
        "larger than a few hundred MiB.",
    ]
    for r in results:
        lines += ["", *table_lines(r), "", stamp_line(r)]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--buckets", default="4,16,64", help="learner.sync_bucket_mb values, MiB")
    p.add_argument("--repeats", type=int, default=5, help="pairs of updates (each sync measured) per bucket size")
    p.add_argument("--hidden", type=int, default=512, help="the built-in model's width (MLP 4x, heads of 64)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--store_mib", type=int, default=1024, help="each simulated node's object store")
    p.add_argument("--no-actor", action="store_true", help="skip the rollout actor's measurement")
    result_args(p, "weight_sync")
    a = p.parse_args()
    if a.quick:
        a.buckets, a.repeats, a.hidden, a.layers, a.store_mib = "0.01", 1, 64, 2, 128
    a.bucket_list = [float(v) for v in a.buckets.split(",") if v.strip()]
    if not a.bucket_list or a.repeats < 1:
        p.error("--buckets needs at least one size and --repeats at least 1")
    result = run(a)
    print("\n".join(table_lines(result)))
    save(a, "weight_sync", {"args": vars(a), **result})


if __name__ == "__main__":
    main()
