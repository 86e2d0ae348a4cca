"""A scalar head on a backbone's hidden states: the PRM's step score, the PPO critic's value."""

from __future__ import annotations

import torch


class ValueHead(torch.nn.Linear):
    """``Linear(hidden_size, 1)``, zero-initialised (a fresh head reads 0 everywhere), read as one
    scalar per position: ``[..., hidden] -> [...]``.

    A ``Linear`` itself, so its parameters stay ``weight`` and ``bias`` (saved PRM heads and
    critic checkpoints keep their keys).
    """

    def __init__(self, hidden_size: int):
        super().__init__(hidden_size, 1)  # draws Linear's usual init first: the RNG advances as it always did
        torch.nn.init.zeros_(self.weight)
        torch.nn.init.zeros_(self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden).squeeze(-1)
