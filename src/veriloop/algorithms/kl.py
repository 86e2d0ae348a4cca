"""KL divergence between the current policy and the reference, per token.

The tokens were sampled from the current (or behaviour) policy ``q``; with
``log_r = log p_ref(y) - log q(y)`` Schulman's estimators of ``KL(q || p_ref)`` are

    k1 = -log_r                    unbiased, can be negative
    k2 = log_r**2 / 2              biased, low variance
    k3 = exp(log_r) - 1 - log_r    unbiased and always >= 0 (GRPO's choice)

``kl_exact`` sums ``q (log q - log p)`` over a whole distribution, for when the support
is small enough to enumerate (and to test the estimators against).
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(current || reference) from the sampled tokens' log-probs (nats)."""
    log_r = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        return torch.expm1(log_r) - log_r
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def kl_exact(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``sum_a p_a (log p_a - log q_a)`` over the last dim; ``0 log 0 = 0``."""
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - ref_logp), torch.zeros_like(p))
    return terms.sum(dim=-1)
