"""Weights leave the learner ranks as shards in buckets: the controller and the engines get handles, not tensors.

After an update each rank packs ITS OWN rows of every trainable tensor (fsdp2: the ``Shard(0)`` local piece of each
DTensor; ddp: rank 0's full tensors, the others nothing) into flat buckets of at most ``learner.sync_bucket_mb``,
one dtype per bucket (the weights' own dtype: what the engines sample with), and stashes each bucket where a reader
can fetch it: Ray's object store (ranks that are Ray actors) or a file in the group's shared directory (ranks that
veriloop spawned).  A ``ShardHandle`` is what travels: per bucket a reference and the layout of its pieces (name,
global shape, first row, rows), and a SHA-256 per piece.

A reader (the controller's copy of the policy, a rollout actor) copies bucket after bucket into its own full tensors
(``assemble_into``), so its memory peaks at one bucket over what it already holds; no rank ever gathers the full
weights.  The digest of a version (``shards_digest``) is the SHA-256 of every piece's name, row span and SHA-256, in
name and row order; a reader recomputes it from its own tensors (``model_shards_digest``) and must agree, so the
engines' check that they sample with the learner's bytes stays without a gather.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Piece:
    """Rows ``[row, row + rows)`` of tensor ``name`` (global shape ``shape``), at ``start`` in its bucket."""

    name: str
    shape: tuple[int, ...]
    row: int
    rows: int
    start: int
    sha256: str

    @property
    def local_shape(self) -> tuple[int, ...]:
        return (self.rows, *self.shape[1:]) if self.shape else ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.local_shape:
            n *= s
        return n


@dataclass(frozen=True)
class Bucket:
    ref: object  # a Ray ObjectRef, or a file path (str)
    dtype: str
    pieces: tuple[Piece, ...]
    nbytes: int


@dataclass(frozen=True)
class ShardHandle:
    """One rank's share of one version of the weights."""

    rank: int
    buckets: tuple[Bucket, ...] = field(default_factory=tuple)

    @property
    def pieces(self) -> list[Piece]:
        return [p for b in self.buckets for p in b.pieces]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)


def local_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's rows of ``t`` and the first of them: a DTensor sharded on dim 0 (fsdp2), or a plain tensor."""
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t.detach(), 0
    # the offset of this rank's chunk, as DTensor computes it (torch.chunk's split of dim 0)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if any(not p.is_shard(0) and not p.is_replicate() for p in t.placements):
        raise ValueError(f"weights sync: a tensor placed as {t.placements}; only Shard(0) and Replicate travel")
    _, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    return t.to_local().detach(), (offset[0] if len(offset) else 0)


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def pack(
    named: list[tuple[str, torch.Tensor]], rank: int, bucket_bytes: int, stash: Callable[[torch.Tensor], object]
) -> ShardHandle:
    """``named`` (name, tensor or DTensor) as this rank's buckets, each stashed as it fills (one bucket at a time in
    memory besides the weights)."""
    buckets, parts, size = [], [], 0

    def flush():
        nonlocal parts, size
        if parts:
            buckets.append(_bucket(parts, stash))
        parts, size = [], 0

    for name, t in named:
        rows, row = local_rows(t)
        rows = rows.cpu()
        if rows.numel() == 0:
            continue  # a rank past the end of a short tensor's rows
        if parts and (size + rows.nbytes > bucket_bytes or parts[0][1].dtype != rows.dtype):
            flush()
        parts.append((name, rows, tuple(t.shape), row))
        size += rows.nbytes
    flush()
    return ShardHandle(rank, tuple(buckets))


def _bucket(parts, stash) -> Bucket:
    pieces, start = [], 0
    for name, rows, shape, row in parts:
        pieces.append(Piece(name, shape, row, rows.shape[0] if shape else 1, start, _sha(rows)))
        start += rows.numel()
    flat = torch.cat([rows.reshape(-1) for _, rows, _, _ in parts])
    return Bucket(stash(flat), str(flat.dtype).removeprefix("torch."), tuple(pieces), flat.nbytes)


def file_stash(directory: str) -> Callable[[torch.Tensor], str]:
    """A stash for spawned ranks: each bucket a file in the group's directory (read once, then removed)."""

    def stash(flat: torch.Tensor) -> str:
        path = os.path.join(directory, f"bucket-{uuid.uuid4().hex}.pt")
        torch.save(flat, path)
        return path

    return stash


def ray_stash(flat: torch.Tensor):
    """A stash for ranks that are Ray actors: the bucket into the object store as a numpy array (read back as a
    zero-copy view of the shared store; a torch tensor would be copied out, twice its size, measured); a dtype
    numpy lacks (bfloat16) travels as the integers of its width."""
    import ray

    if flat.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)
    return ray.put(flat.numpy())


def fetch(bucket: Bucket, remove: bool = False) -> torch.Tensor:
    if isinstance(bucket.ref, str):
        flat = torch.load(bucket.ref, weights_only=True, mmap=True)
        if remove:
            os.unlink(bucket.ref)  # the mapping stays readable until dropped
        return flat
    import warnings

    import ray

    with warnings.catch_warnings():  # a read-only view of the shared store: only ever read (copied from)
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        flat = torch.from_numpy(ray.get(bucket.ref))
    return flat.view(getattr(torch, bucket.dtype))


def assemble_into(tensors: dict[str, torch.Tensor], handles: list[ShardHandle], remove: bool = False) -> int:
    """Copy every piece of ``handles`` into ``tensors`` (name -> full tensor), bucket after bucket; the bytes read."""
    read = 0
    with torch.no_grad():
        for handle in handles:
            for bucket in handle.buckets:
                flat = fetch(bucket, remove)
                for p in bucket.pieces:
                    if p.name not in tensors:
                        raise KeyError(f"weights sync: the learner sent {p.name!r}, which this model does not have")
                    target = tensors[p.name]
                    (target[p.row : p.row + p.rows] if p.shape else target).copy_(
                        flat[p.start : p.start + p.numel].view(p.local_shape)
                    )  # no name for the view: it would keep this bucket alive while the next one is fetched
                read += bucket.nbytes
                del flat
    return read


def shards_digest(pieces: list[Piece]) -> str:
    """SHA-256 of every piece's name, global shape, row span and SHA-256, in name and row order."""
    h = hashlib.sha256()
    for p in sorted(pieces, key=lambda p: (p.name, p.row)):
        h.update(f"{p.name}|{p.shape}|{p.row}|{p.rows}|{p.sha256}|".encode())
    return h.hexdigest()


def model_shards_digest(tensors: dict[str, torch.Tensor], pieces: list[Piece]) -> str:
    """``shards_digest`` recomputed from a reader's own full tensors, cut along the learner's pieces."""
    mine = []
    for p in pieces:
        t = tensors[p.name].detach().cpu()
        rows = t[p.row : p.row + p.rows] if p.shape else t
        mine.append(Piece(p.name, tuple(t.shape), p.row, p.rows, p.start, _sha(rows)))
    return shards_digest(mine)


def covers(tensors: dict[str, torch.Tensor], handles: list[ShardHandle], names: list[str]) -> None:
    """Every row of every tensor in ``names`` is in exactly one piece (else the version is incomplete)."""
    rows: dict[str, int] = {}
    for p in (p for h in handles for p in h.pieces):
        rows[p.name] = rows.get(p.name, 0) + p.rows
    for name in names:
        want = tensors[name].shape[0] if tensors[name].dim() else 1
        if rows.get(name, 0) != want:
            raise RuntimeError(f"weights sync: {name} arrived with {rows.get(name, 0)} of its {want} rows")


def release_weights(model: torch.nn.Module) -> dict:
    """Free ``model``'s trainable tensors (each left an empty tensor of its dtype and device); what
    ``take_back`` needs to make room for them again: {parameter: (shape, dtype, device)}."""
    freed = {p: (tuple(p.shape), p.dtype, p.device) for p in model.parameters() if p.requires_grad}
    with torch.no_grad():
        for p in freed:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # hand the freed blocks back to the device, not to torch's cache
    return freed


def take_back(freed: dict) -> None:
    """Room again for the tensors ``release_weights`` freed (uninitialised: a sync fills them)."""
    with torch.no_grad():
        for p, (shape, dtype, device) in freed.items():
            p.data = torch.empty(shape, dtype=dtype, device=device)
