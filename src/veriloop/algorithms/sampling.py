"""Likelihoods under the sampling transforms (temperature, top-k, top-p).

The behaviour distribution that actually produced a token is not the raw softmax:

    logits / temperature  ->  keep the top_k largest  ->  keep the smallest set of
    most likely tokens whose probability reaches top_p  ->  renormalise

(the order transformers' ``generate`` applies them).  ``sampling_logprobs`` returns the
log-probs of that distribution, ``-inf`` outside its support.  The seeds' example:
``p = [0.6, 0.3, 0.1]``, temperature 2, top-p 0.8 gives ``[0.5858, 0.4142, 0]``.
"""

from __future__ import annotations

import torch


def sampling_logprobs(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Log-probs ``[..., V]`` of the behaviour distribution defined by the transforms."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    scores = logits / temperature if temperature != 1.0 else logits  # never written in place below
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        # Keep a token iff the mass of the tokens more likely than it is below top_p.  Summed
        # from the least likely end (as transformers does), so tiny tail probabilities are not
        # lost to rounding: drop where the mass of tokens at most as likely is <= 1 - top_p.
        sorted_scores, order = torch.sort(scores, dim=-1, descending=False)
        tail_mass = torch.cumsum(torch.softmax(sorted_scores, dim=-1), dim=-1)
        drop_sorted = tail_mass <= 1.0 - top_p
        drop_sorted[..., -1] = False  # the most likely token always stays
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scores, dim=-1)


def suppress_end_tokens(logits: torch.Tensor, end_ids, positions: torch.Tensor, min_new_tokens: int) -> torch.Tensor:
    """``logits`` with the end tokens at ``-inf`` wherever the completion position is below ``min_new_tokens``
    (as transformers' ``min_new_tokens``: a row cannot end before it has that many tokens).  ``positions``
    holds each row's completion position (0 = the first new token), shaped as ``logits`` without its
    last dimension; applied before temperature, top-k and top-p, so the behaviour distribution of an
    early token is the renormalised one without the end tokens."""
    if min_new_tokens <= 0 or not len(end_ids):
        return logits
    ids = torch.as_tensor(list(end_ids), dtype=torch.long, device=logits.device)
    is_end = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    is_end[ids[ids < logits.shape[-1]]] = True
    early = positions.to(logits.device) < min_new_tokens
    return logits.masked_fill(early[..., None] & is_end, float("-inf"))


def entropy_from_logprobs(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy ``-sum p log p`` over the last dim (nats), ``0 log 0 = 0``."""
    p = logprobs.exp()
    return -torch.where(p > 0, p * logprobs, torch.zeros_like(p)).sum(dim=-1)
