"""Weights in buckets (rollout/weight_shards.py): what ranks pack, readers assemble, and the digest of the pieces.

Ranks here are simulated by cutting each tensor's rows as fsdp2's Shard(0) does (torch.chunk); the real ranks are in
tests/test_distributed_learner_on_cpu.py and tests/test_cluster_learner_on_cpu.py.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.rollout.weight_shards import (
    assemble_into,
    covers,
    file_stash,
    model_shards_digest,
    pack,
    release_weights,
    shards_digest,
    take_back,
)


def _rank_rows(t: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, int]:
    """Rank ``rank``'s rows of ``t`` and the first of them (torch.chunk's split of dim 0, as DTensor's Shard(0))."""
    size = -(-t.shape[0] // world)
    start = min(rank * size, t.shape[0])
    return t[start : start + size], start


def handles_of(named: dict, world: int, bucket_bytes: int, directory) -> list:
    """Every rank's handle: each packs its own rows (``pack`` on a plain tensor takes it whole, so each rank's rows
    are given as a tensor whose global shape and first row the Piece then records)."""
    out = []
    for rank in range(world):
        pieces = []
        for name, t in named.items():
            rows, start = _rank_rows(t, rank, world)
            pieces.append((name, rows, t.shape, start))
        handle = pack([(n, rows) for n, rows, _, _ in pieces], rank, bucket_bytes, file_stash(str(directory)))
        # pack read each rank's rows as a whole tensor: give the pieces their global shape and first row
        fixed = []
        for bucket in handle.buckets:
            meta = {n: (shape, start) for n, _, shape, start in pieces}
            bp = tuple(
                type(p)(p.name, tuple(meta[p.name][0]), meta[p.name][1], p.rows, p.start, p.sha256)
                for p in bucket.pieces
            )
            fixed.append(type(bucket)(bucket.ref, bucket.dtype, bp, bucket.nbytes))
        out.append(type(handle)(rank, tuple(fixed)))
    return out


def test_pieces_round_trip_in_buckets_of_one_dtype(tmp_path):
    torch.manual_seed(0)
    named = {
        "a": torch.randn(7, 5),
        "b": torch.randn(3),
        "c": torch.randn(4, 2).to(torch.bfloat16),
        "d": torch.randn(9, 3, 2),
    }
    handles = handles_of(named, world=3, bucket_bytes=64, directory=tmp_path)
    assert all(len({p.name for p in b.pieces}) == len(b.pieces) for h in handles for b in h.buckets)
    dtypes = [b.dtype for h in handles for b in h.buckets]
    assert "bfloat16" in dtypes and "float32" in dtypes
    for h in handles:  # one dtype per bucket, and no bucket over the size unless one piece is bigger
        for b in h.buckets:
            assert b.nbytes <= 64 or len(b.pieces) == 1
    targets = {n: torch.zeros_like(t) for n, t in named.items()}
    covers(targets, handles, list(targets))
    read = assemble_into(targets, handles, remove=True)
    assert read == sum(t.nbytes for t in named.values())
    assert all(torch.equal(targets[n], t) for n, t in named.items())
    assert not list(tmp_path.iterdir())  # each bucket file removed once read
    pieces = [p for h in handles for p in h.pieces]
    assert model_shards_digest(targets, pieces) == shards_digest(pieces)
    targets["d"][8, 2, 1] += 1e-6  # one value off in the last rank's rows: the digest sees it
    assert model_shards_digest(targets, pieces) != shards_digest(pieces)


def test_a_version_missing_rows_or_naming_an_unknown_tensor_is_refused(tmp_path):
    named = {"a": torch.randn(6, 2), "b": torch.randn(4)}
    handles = handles_of(named, world=2, bucket_bytes=1 << 20, directory=tmp_path)
    targets = {n: torch.zeros_like(t) for n, t in named.items()}
    with pytest.raises(RuntimeError, match="a arrived with 3 of its 6 rows"):
        covers(targets, handles[:1], list(targets))
    with pytest.raises(KeyError, match="the learner sent 'b'"):
        assemble_into({"a": targets["a"]}, handles)


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3), min_size=1, max_size=5),
    world=st.integers(1, 4),
    bucket=st.integers(4, 256),
)
def test_any_tensors_cut_among_any_ranks_come_back_whole(tmp_path_factory, shapes, world, bucket):
    """Whatever the shapes, the number of ranks (some with no rows of a short tensor) and the bucket size: every
    value arrives, every row exactly once, and the digests agree."""
    directory = tmp_path_factory.mktemp("buckets")
    gen = torch.Generator().manual_seed(len(shapes) * 31 + world)
    named = {f"t{i}": torch.randn(*s, generator=gen) for i, s in enumerate(shapes)}
    handles = handles_of(named, world, bucket, directory)
    targets = {n: torch.full_like(t, float("nan")) for n, t in named.items()}
    covers(targets, handles, list(targets))
    assemble_into(targets, handles, remove=True)
    assert all(torch.equal(targets[n], t) for n, t in named.items())
    pieces = [p for h in handles for p in h.pieces]
    assert model_shards_digest(targets, pieces) == shards_digest(pieces)


def test_released_weights_take_no_memory_until_taken_back():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    model[1].requires_grad_(False)  # a frozen part (a LoRA base) stays
    shapes = {n: p.shape for n, p in model.named_parameters()}
    freed = release_weights(model)
    assert [p.numel() for p in model[0].parameters()] == [0, 0] and model[1].weight.numel() == 8
    take_back(freed)
    assert {n: p.shape for n, p in model.named_parameters()} == shapes
