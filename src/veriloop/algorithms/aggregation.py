"""Loss aggregation: how per-token values ``[N, T]`` become one scalar.

Modes (``mask`` is 1 on valid completion tokens, 0 on padding):

* ``seq-mean-token-mean``: average each completion over its own tokens, then average
  the completions (GRPO as written in DeepSeekMath).  Every answer weighs the same
  whatever its length.
* ``token-mean``: average over all valid tokens of the batch (DAPO).  Long answers
  weigh more.  Unchanged by splitting the batch, provided the normaliser is the whole
  batch's token count (see ``aggregation_weight``).
* ``seq-mean-token-sum-norm``: sum each completion's tokens, divide by the constant
  ``max_len`` (default: T), then average the completions (Dr. GRPO): no length bias
  from the normaliser.

The seeds' example: two answers with values +1 on 2 tokens and -1 on 4 tokens give 0
per answer-then-group and -1/3 per token.
"""

from __future__ import annotations

import typing
from typing import Literal

import torch

Aggregation = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
AGGREGATION_MODES = typing.get_args(Aggregation)


def aggregate_loss(values: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Scalar aggregate of ``values[N, T]`` over the valid entries of ``mask[N, T]``."""
    if values.shape != mask.shape or values.dim() != 2:
        raise ValueError(f"values and mask must both be [N, T]; got {tuple(values.shape)} and {tuple(mask.shape)}")
    m = mask.to(values.dtype)
    # where(), not multiplication: a non-finite value under the mask must not leak in.
    masked = torch.where(mask.bool(), values, torch.zeros_like(values))
    if mode == "token-mean":
        return masked.sum() / m.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(dim=1) / m.sum(dim=1).clamp(min=1)
        return per_seq.mean()
    if mode == "seq-mean-token-sum-norm":
        norm = values.shape[1] if max_len is None else max_len
        if norm <= 0:
            raise ValueError(f"max_len must be positive, got {norm}")
        return (masked.sum(dim=1) / norm).mean()
    raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {AGGREGATION_MODES}")


def aggregation_weight(mask_part: torch.Tensor, mask_total: torch.Tensor, mode: str) -> float:
    """Weight of a micro-batch's aggregate so that the weighted sum equals the full batch's.

    token-mean: tokens in the part / tokens in the batch; the sequence-mean modes:
    sequences in the part / sequences in the batch.
    """
    if mode == "token-mean":
        return float(mask_part.sum()) / max(float(mask_total.sum()), 1.0)
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum-norm"):
        return mask_part.shape[0] / mask_total.shape[0]
    raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {AGGREGATION_MODES}")
