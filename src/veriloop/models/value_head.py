"""A scalar head on a backbone's hidden states: the PRM's step score, the PPO critic's value, a reward model's r;
and the hidden states of a right-padded batch that the PRM and the reward model read them from."""

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


def right_padded_hidden(model: torch.nn.Module, sequences: list[list[int]], pad_id: int) -> torch.Tensor:
    """``[N, L, hidden]``: the causal LM ``model``'s last hidden states (its decoder's, before the LM head) of the
    token sequences, right-padded to the longest in one pass; a sequence's positions past its end are padding."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
