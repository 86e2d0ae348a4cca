"""KL divergence between the current policy and the reference, per token.

The tokens were sampled from the current (or behaviour) policy ``q``; with
``log_r = log p_ref(y) - log q(y)`` Schulman's estimators of ``KL(q || p_ref)`` are

    k1 = -log_r                    unbiased, can be negative
    k2 = log_r**2 / 2              biased, low variance
    k3 = exp(log_r) - 1 - log_r    unbiased and always >= 0 (GRPO's choice)

``kl_exact`` sums ``q (log q - log p)`` over a whole distribution, for when the support
is small enough to enumerate (and to test the estimators against).  In the trainer the
estimator ``"exact"`` sums it over the whole vocabulary at every visited position (the
next-token distributions are enumerable even when sequences are not).

Placement is the trainer's choice: as a loss term (GRPO) or subtracted from the reward
(PPO-RLHF), with a fixed or an adaptive weight (``FixedKLController`` /
``AdaptiveKLController``).

Reused or lagged samples (``update.inner_updates`` > 1, ``rollout.lag``): the tokens were drawn
by the behaviour policy ``b``, not by the current ``q``, so the mean of ``k`` over them estimates
``E_b[k]``, not ``KL(q || p_ref)``.  ``importance_weighted_kl`` multiplies each token's estimate
by ``w = q(y) / b(y)`` (``E_b[w k] = E_q[k]``, seeds 002 section 4: old samples without a
correction of their weights no longer give the current policy's expectation).  The weight is per
token, detached and unclipped: per token, it corrects the draw of each token given its prefix, not
the distribution of the prefixes (the product of the ratios along the prefix would, at a variance
that grows with the length), as PPO's ratio does; detached, the gradient is
``E_b[w grad k] = E_q[grad k]``, the on-policy estimator's (k2: grad KL(q || p_ref); k3:
grad KL(p_ref || q)), so the option changes which distribution the samples stand for, not what the
term optimises.
"""

from __future__ import annotations

import typing
from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3", "exact"]
KL_ESTIMATORS = typing.get_args(KLEstimator)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(current || reference) from the sampled tokens' log-probs (nats)."""
    log_r = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        return torch.expm1(log_r) - log_r
    if estimator == "exact":
        raise ValueError("the exact KL needs whole distributions: use kl_exact(logp, ref_logp)")
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def importance_weighted_kl(kl: torch.Tensor, logprobs: torch.Tensor, behavior_logprobs: torch.Tensor) -> torch.Tensor:
    """``w * kl`` per token, ``w = exp(logprobs - behavior_logprobs)`` detached: the estimate ``kl`` of tokens
    drawn by the behaviour policy, reweighted to stand for tokens of the current policy (``logprobs``: the
    current policy's, under the distribution the behaviour's were recorded under)."""
    weight = torch.exp(logprobs.detach() - behavior_logprobs.to(logprobs.dtype))
    return weight * kl


def kl_exact(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """``sum_a p_a (log p_a - log q_a)`` over the last dim; ``0 log 0 = 0``."""
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - ref_logp), torch.zeros_like(p))
    return terms.sum(dim=-1)


class FixedKLController:
    """A constant KL weight (the usual choice when the KL is a loss term)."""

    def __init__(self, beta: float):
        if beta < 0:
            raise ValueError(f"kl beta must be >= 0, got {beta}")
        self.beta = beta

    def update(self, observed_kl: float, n_steps: int) -> float:
        return self.beta


class AdaptiveKLController:
    """Ziegler et al. (2019): steer the KL towards ``target`` over ``horizon`` samples.

    ``e = clip(KL / target - 1, -0.2, 0.2)``;  ``beta <- beta * (1 + e * n / horizon)``.
    """

    def __init__(self, beta: float, target: float, horizon: int):
        if beta <= 0 or target <= 0 or horizon <= 0:
            raise ValueError("adaptive KL needs beta, target and horizon > 0")
        self.beta, self.target, self.horizon = beta, target, horizon

    def update(self, observed_kl: float, n_steps: int) -> float:
        error = max(-0.2, min(0.2, observed_kl / self.target - 1.0))
        self.beta *= 1.0 + error * n_steps / self.horizon
        return self.beta
