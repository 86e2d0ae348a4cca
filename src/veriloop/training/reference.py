"""The reference policy: the frozen anchor of the KL term (and of DPO).

Loaded only when something reads it (``kl.beta > 0`` or an objective that needs reference
log-probs); with ``kl.reset_every`` it becomes the current policy every N steps (iterative
RL, DeepSeekMath Algorithm 1).
"""

from __future__ import annotations

import torch

from veriloop.models.batch import PolicyBatch, select
from veriloop.models.loading import load_policy


class ReferencePolicy:
    def __init__(self, policy, micro_batch_size: int):
        self.policy, self.micro_batch_size = policy, micro_batch_size

    @property
    def model(self) -> torch.nn.Module:
        return self.policy.model

    @classmethod
    def build(cls, cfg, start, objective):
        """The configured reference (``cfg.reference``, else a frozen copy of the starting policy), or None."""
        if cfg.kl.beta <= 0 and not objective.needs_reference:
            return None  # no reference model, and no reference pass, when nothing uses it
        frozen = load_policy(cfg.reference).frozen_copy() if cfg.reference else start.frozen_copy()
        return cls(frozen, cfg.update.micro_batch_size)

    @torch.no_grad()
    def logprobs(self, batch: PolicyBatch, temperature: float, full: bool) -> torch.Tensor:
        """Log-probs of the completion tokens ``[N, T]`` (or whole distributions ``[N, T, V]`` with ``full``)."""
        out = None
        for rows in torch.arange(batch.input_ids.shape[0]).split(self.micro_batch_size):
            sub = select(batch, rows)
            lp = torch.log_softmax(self.policy.completion_logits(sub) / temperature, dim=-1)
            if not full:
                lp = lp.gather(-1, sub.completion_ids[..., None]).squeeze(-1)
            if out is None:
                shape = (batch.input_ids.shape[0], batch.completion_ids.shape[1], *lp.shape[2:])
                out = torch.zeros(shape, dtype=lp.dtype)
            out[rows, : lp.shape[1]] = lp
        return out

    def reset_to(self, policy) -> None:
        """Iterative RL: the reference becomes the current policy."""
        self.policy.model.load_state_dict(policy.model.state_dict())
