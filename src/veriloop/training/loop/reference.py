"""The reference policy: the frozen anchor of the KL term (and of DPO).

Loaded only when something reads it (``kl.beta > 0`` or an objective that needs reference
log-probs); with ``kl.reset_every`` it becomes the current policy every N steps (iterative
RL, DeepSeekMath Algorithm 1).
"""

from __future__ import annotations

import torch

from veriloop.models.batch import PolicyBatch, select, token_budget_split
from veriloop.models.loading import load_policy
from veriloop.models.lora import AdapterDisabledPolicy
from veriloop.rollout.sampler import SamplingParams
from veriloop.training.loop.logprobs import completion_logprobs


class ReferencePolicy:
    """Runs under ``no_grad`` (no activations kept), one micro-batch at a time, the LM head chunked
    as the learner's; the log-probs come back on the CPU, where the learning batch lives."""

    def __init__(self, policy, micro_batch_size: int, chunk_tokens: int = 0, max_tokens: int = 0):
        self.policy, self.micro_batch_size, self.chunk_tokens = policy, micro_batch_size, chunk_tokens
        self.max_tokens = max_tokens  # update.max_tokens_per_micro_batch, as the learner's

    @property
    def model(self) -> torch.nn.Module:
        return self.policy.model

    @classmethod
    def build(cls, cfg, start, objective):
        """The configured reference (``cfg.reference``, else a frozen copy of the starting policy), or None."""
        if cfg.kl.beta <= 0 and not objective.needs_reference:
            return None  # no reference model, and no reference pass, when nothing uses it
        if cfg.reference:
            frozen = load_policy(cfg.reference, placement=cfg.placement(), prompts=cfg.prompt_format()).frozen_copy()
        elif cfg.lora.enabled:  # the base under the adapters: no second copy of the weights
            frozen = AdapterDisabledPolicy(start)
        else:
            frozen = start.frozen_copy()
        u = cfg.update
        return cls(frozen, u.micro_batch_size, u.logprob_chunk_tokens, u.max_tokens_per_micro_batch)

    @torch.no_grad()
    def logprobs(self, batch: PolicyBatch, temperature: float, full: bool) -> torch.Tensor:
        """Log-probs of the completion tokens ``[N, T]`` (or whole distributions ``[N, T, V]`` with ``full``)."""
        out = None
        rows_all = torch.arange(batch.input_ids.shape[0])
        lengths = batch.attention_mask.sum(dim=1)
        for rows in token_budget_split(lengths, rows_all, self.micro_batch_size, self.max_tokens):
            sub = select(batch, rows)
            tl = completion_logprobs(
                self.policy,
                sub,
                SamplingParams(temperature=temperature),
                "scaled",
                want_full=full,
                chunk_tokens=self.chunk_tokens,
                entropy=False,
            )
            lp = (tl.full if full else tl.scaled).cpu()
            if out is None:
                shape = (batch.input_ids.shape[0], batch.completion_ids.shape[1], *lp.shape[2:])
                out = torch.zeros(shape, dtype=lp.dtype)
            out[rows, : lp.shape[1]] = lp
        return out

    def reset_to(self, policy) -> None:
        """Iterative RL: the reference becomes the current policy."""
        self.policy.model.load_state_dict(policy.model.state_dict())
