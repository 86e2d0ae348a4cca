"""Typed batches of (prompt, completion) token sequences and the policy forward pass.

Layout: each row is ``prompt_ids + completion_ids`` right-padded to ``L``; completion
tensors are ``[N, Tc]`` (Tc = longest completion), aligned with the records'
``completion_ids`` and ``behavior_logprobs``.  ``logit_index[i, t]`` is the position whose
logits predict completion token ``t`` of row ``i`` (``len(prompt_i) - 1 + t``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class PolicyBatch(NamedTuple):
    input_ids: torch.Tensor  # [N, L] int64, prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, L] int64
    logit_index: torch.Tensor  # [N, Tc] int64
    completion_ids: torch.Tensor  # [N, Tc] int64 (0 where masked)
    completion_mask: torch.Tensor  # [N, Tc] float32, 1 on completion tokens the model wrote (0: padding, tool output)

    @property
    def num_tokens(self) -> int:
        return int(self.completion_mask.sum())


def build_policy_batch(
    prompts: list[list[int]],
    completions: list[list[int]],
    pad_id: int,
    model_masks: list[list[int] | None] | None = None,
) -> PolicyBatch:
    """``model_masks`` (tool-integrated rollouts): per completion token 1 if the model sampled it; a tool's output
    stays in the sequence (the context the model read) with ``completion_mask`` 0, so no loss reads it."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("build_policy_batch needs equally many (>0) prompts and completions")
    if model_masks is not None and len(model_masks) != len(completions):
        raise ValueError(f"build_policy_batch: {len(model_masks)} model masks for {len(completions)} completions")
    N = len(prompts)
    L = max(len(p) + len(c) for p, c in zip(prompts, completions))
    Tc = max(1, max(len(c) for c in completions))
    input_ids = torch.full((N, L), pad_id, dtype=torch.long)
    attention = torch.zeros((N, L), dtype=torch.long)
    index = torch.zeros((N, Tc), dtype=torch.long)
    comp = torch.zeros((N, Tc), dtype=torch.long)
    cmask = torch.zeros((N, Tc), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if not p:
            raise ValueError(f"row {i}: empty prompt (a completion needs a context to be scored)")
        seq = list(p) + list(c)
        input_ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[i, : len(seq)] = 1
        n = len(c)
        index[i, :n] = torch.arange(len(p) - 1, len(p) - 1 + n)
        index[i, n:] = len(p) - 1  # any valid position; masked
        comp[i, :n] = torch.tensor(c, dtype=torch.long)
        m = model_masks[i] if model_masks is not None else None
        if m is None:
            cmask[i, :n] = 1.0
        elif len(m) != n:
            raise ValueError(f"row {i}: model mask of {len(m)} entries for a completion of {n} tokens")
        else:
            cmask[i, :n] = torch.tensor(m, dtype=torch.float32)
    return PolicyBatch(input_ids, attention, index, comp, cmask)


def to_device(batch: PolicyBatch, device: torch.device) -> PolicyBatch:
    return batch if batch.input_ids.device == device else PolicyBatch(*(t.to(device) for t in batch))


def completion_logits(model: torch.nn.Module, batch: PolicyBatch) -> torch.Tensor:
    """``[N, Tc, V]`` float32 logits that predict each completion token (on the model's device)."""
    batch = to_device(batch, model.get_input_embeddings().weight.device)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits
    idx = batch.logit_index[:, :, None].expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, idx).float()


# Model types whose logits are exactly ``get_output_embeddings()(last_hidden_state)``, up to the
# final soft-capping (gemma2/3) applied in ``logits_from_hidden``: the chunked LM head
# (``training/loop/logprobs.py``) serves them; any other model computes its logits itself.
HIDDEN_PATH_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2")


def completion_hidden(model: torch.nn.Module, batch: PolicyBatch) -> torch.Tensor:
    """``[N, Tc, H]`` final hidden states (after the last norm) at the positions that predict each
    completion token: what the LM head turns into ``completion_logits``."""
    batch = to_device(batch, model.get_input_embeddings().weight.device)
    hidden = model.get_decoder()(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
    ).last_hidden_state
    idx = batch.logit_index[:, :, None].expand(-1, -1, hidden.shape[-1])
    return torch.gather(hidden, 1, idx)


def logits_from_hidden(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # gemma2/3: logits = cap * tanh(logits / cap)
        logits = torch.tanh(logits / cap) * cap
    return logits


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """``[N]`` index of each row's last mask-1 token (0 for a row with none).  Not ``mask.sum - 1``: a tool's
    output leaves holes in the mask, so the count of the model's tokens is not the position of its last one."""
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.zeros_like(positions)).max(dim=1).values


def select(batch: PolicyBatch, rows: torch.Tensor) -> PolicyBatch:
    """The sub-batch of ``rows``, trimmed to its own longest sequence and completion."""
    sub = PolicyBatch(*(t[rows] for t in batch))
    L = int(sub.attention_mask.sum(dim=1).max())
    Tc = int(last_token_index(sub.completion_mask).max()) + 1 if sub.completion_mask.numel() else 1
    return PolicyBatch(
        sub.input_ids[:, :L],
        sub.attention_mask[:, :L],
        sub.logit_index[:, :Tc],
        sub.completion_ids[:, :Tc],
        sub.completion_mask[:, :Tc],
    )


def token_budget_split(lengths: torch.Tensor, rows: torch.Tensor, max_rows: int, max_tokens: int) -> list:
    """Greedy cut of ``rows`` (in order) so each piece has <= ``max_rows`` rows and, when ``max_tokens`` > 0,
    ``len(piece) * max(lengths[piece]) <= max_tokens`` (a row longer than the budget goes alone)."""
    if max_tokens <= 0:
        return list(rows.split(max_rows))
    pieces, start, longest = [], 0, 0
    lens = lengths[rows].tolist()
    for i, n in enumerate(lens):
        width = max(longest, n)
        if i > start and ((i - start + 1) * width > max_tokens or i - start >= max_rows):
            pieces.append(rows[start:i])
            start, width = i, n
        longest = width
    pieces.append(rows[start:])
    return pieces
