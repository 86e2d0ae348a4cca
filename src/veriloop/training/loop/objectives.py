"""Policy objectives: what the learner maximises, and what each needs from a learning batch.

Each entry of the registry ``OBJECTIVES`` is an ``Objective`` declaring its needs - the
kind of coefficient it takes (advantages or 0/1 weights), the behaviour log-probs as ratio
denominators, reference log-probs, pairs - and the distribution its log-probs are taken
under (``distribution``, see ``training/loop/logprobs.py``) and what one term of its loss is
(``learns_from``): token objectives give ``per_token`` values that the learner's token passes
aggregate; DPO learns from pairs, in the learner's pair passes.  The learner reads these
declarations; neither it nor the trainer compares objective names.
"""

from __future__ import annotations

import torch

from veriloop.algorithms import (
    clipped_surrogate,
    dual_clip_surrogate,
    gspo_surrogate,
    likelihood_objective,
    pg_objective,
)


def dpo_pairs(rewards: torch.Tensor, threshold: float, how: str = "threshold") -> list[tuple[int, int]]:
    """(chosen, rejected) flat indices of the ``[B, G]`` rewards' completions.

    ``threshold``: a prompt's accepted (reward >= threshold) and rejected completions, zipped in order.
    ``best-worst``: one pair a prompt, its highest reward over its lowest (the first of equals), where they differ:
    the pair a reward model's unbounded scores give (no threshold means anything on them)."""
    if how not in ("threshold", "best-worst"):
        raise ValueError(f"DPO pairs are threshold or best-worst, got {how!r}")
    B, G = rewards.shape
    pairs = []
    for b in range(B):
        row = rewards[b].tolist()
        if how == "best-worst":
            best = max(range(G), key=lambda g: (row[g], -g))
            worst = min(range(G), key=lambda g: (row[g], g))
            if row[best] > row[worst]:
                pairs.append((b * G + best, b * G + worst))
            continue
        accepted = [b * G + g for g in range(G) if row[g] >= threshold]
        rejected = [b * G + g for g in range(G) if row[g] < threshold]
        pairs.extend(zip(accepted, rejected))
    return pairs


class Objective:
    """A per-token objective ``per_token(logprobs, denominators, advantages, mask, loss_cfg)`` to maximise."""

    description = ""
    coefficients = "advantage"  # the estimator kind it takes: "advantage" | "coefficient" (0/1 weights)
    needs_behavior = True  # ratio denominators: the records' behaviour log-probs
    needs_reference = False  # reference log-probs whatever kl.beta (DPO's anchor)
    per_completion_advantage = False  # reads one advantage per completion (GSPO's sequence ratio)
    learns_from_demonstrations = False  # can train on traces no model sampled (task-teacher)
    min_group_size = 1
    distribution = "sampling"  # log-probs under the sampler's distribution ("sampling") or the model's ("model")
    learns_from = "tokens"  # "tokens": per_token values, aggregated | "pairs": (chosen, rejected) pairs (DPO)
    own_options: tuple[str, ...] = ()  # the loss.* options of this objective's own formula (clip widths, beta)

    @property
    def reads(self) -> tuple[str, ...]:
        """The loss.* options it reads (others set by the user are refused): a token objective's per-token values
        are aggregated (``aggregation``) with an entropy bonus (``entropy_coef``), one with a ratio has the
        learner's truncated-IS correction (``tis_cap``), and one under the sampling distribution the rule for tokens
        outside its support (``off_support``)."""
        ratio = ("tis_cap",) if self.needs_behavior else ()
        support = ("off_support",) if self.distribution == "sampling" else ()
        return (*self.own_options, "aggregation", "entropy_coef", *ratio, *support)

    def per_token(self, lp, den, adv, mask, c) -> torch.Tensor:
        raise NotImplementedError

    def check(self, cfg) -> None:
        """Refuse configurations this objective cannot honour (raise ValueError naming the option)."""

    def select_rows(self, records, rewards, advantages, cfg):
        """``(rows, pairs)`` to learn from; ``None`` = the trainer's default row selection."""
        return None


class _Ratio(Objective):
    def __init__(self, fn, description: str, per_completion: bool = False, own_options: tuple[str, ...] = ()):
        self.fn, self.description, self.per_completion_advantage = fn, description, per_completion
        self.own_options = own_options

    def per_token(self, lp, den, adv, mask, c) -> torch.Tensor:
        return self.fn(lp, den, adv, mask, c)


class Likelihood(Objective):
    """``sum adv_t * log pi(y_t)``: SFT, RFT and distillation with 0/1 coefficients."""

    description = "coefficient x log-likelihood (SFT, RFT, distillation)"
    coefficients, needs_behavior, learns_from_demonstrations, distribution = "coefficient", False, True, "model"

    def per_token(self, lp, den, adv, mask, c) -> torch.Tensor:
        return likelihood_objective(lp, adv)


class DPO(Objective):
    """DPO on (accepted, rejected) pairs of one prompt: whole-sequence log-prob sums against the reference."""

    description = "-log sigmoid(beta * margin) on accepted/rejected pairs"
    coefficients, needs_behavior, needs_reference, min_group_size, distribution = "coefficient", False, True, 2, "model"
    learns_from = "pairs"

    # -log sigmoid(beta * margin) of whole-sequence log-prob sums against the reference: no per-token aggregation,
    # entropy bonus or rollout-engine correction (the reference is its KL anchor, weighted by loss.dpo_beta)
    reads = ("dpo_beta", "dpo_pairs")

    def check(self, cfg) -> None:
        if cfg.advantage.estimator != "filter":
            raise ValueError("loss.policy_loss=dpo pairs accepted with rejected: set advantage.estimator filter")
        if cfg.kl.beta > 0:
            raise ValueError(
                "kl.beta does not apply to loss.policy_loss=dpo: its loss is -log sigmoid(beta * margin) of "
                "whole-sequence log-prob sums against the reference, which is its KL anchor (weighted by "
                "loss.dpo_beta); set kl.beta 0"
            )

    def select_rows(self, records, rewards, advantages, cfg):
        flat_pairs = dpo_pairs(rewards, cfg.advantage.accept_threshold, cfg.loss.dpo_pairs)
        members = sorted({i for p in flat_pairs for i in p})
        where = {row: k for k, row in enumerate(members)}
        pairs = torch.tensor([[where[a], where[b]] for a, b in flat_pairs], dtype=torch.long).view(-1, 2)
        return torch.tensor(members, dtype=torch.long), pairs


# the built-in objectives, registered by training/__init__.py under these names
BUILT_IN = {
    "clip": _Ratio(
        lambda lp, den, adv, mask, c: clipped_surrogate(torch.exp(lp - den), adv, c.clip_eps_low, c.clip_eps_high),
        "PPO clipped surrogate",
        own_options=("clip_eps_low", "clip_eps_high"),
    ),
    "dual-clip": _Ratio(
        lambda lp, den, adv, mask, c: dual_clip_surrogate(
            torch.exp(lp - den), adv, c.clip_eps_low, c.clip_eps_high, c.clip_ratio_c
        ),
        "dual-clip surrogate (bounded below for negative advantages)",
        own_options=("clip_eps_low", "clip_eps_high", "clip_ratio_c"),
    ),
    "gspo": _Ratio(
        lambda lp, den, adv, mask, c: gspo_surrogate(lp, den, adv[:, 0], mask, c.clip_eps_low, c.clip_eps_high),
        "GSPO: clipped sequence-level (length-normalised) ratio",
        per_completion=True,
        own_options=("clip_eps_low", "clip_eps_high"),
    ),
    "pg": _Ratio(
        lambda lp, den, adv, mask, c: pg_objective(torch.exp(lp - den), adv),
        "ratio x advantage, unclipped (REINFORCE with importance weights)",
    ),
    "likelihood": Likelihood(),
    "dpo": DPO(),
}
