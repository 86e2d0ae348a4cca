"""A learner's share of each mini-batch.  ``OneRank`` is the identity for one process (``LocalLearner`` and
``Critic`` hold ``ONE_RANK``): every row, no collectives.  A rank of a distributed learner holds a ``RankShare``
instead (training/distributed/ranks.py): its rows ``mb[r::W]``, the gradient sum, the all-reduced statistics."""

from __future__ import annotations

import torch


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
