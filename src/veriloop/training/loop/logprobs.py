"""Which distribution a log-prob is taken under, and how it is computed without ``[N, T, V]`` in float32.

* ``"sampling"`` - the distribution the sampler drew from (temperature, then top-k and
  top-p): ratio objectives divide by the behaviour log-prob recorded under it, so the
  ratio compares like with like.
* ``"model"`` - the model's own distribution (temperature 1): likelihood (SFT, RFT) and DPO.
* the KL and the entropy compare the *temperature-scaled full* distributions; reference
  log-probs are taken under the KL's distribution, unless the objective itself reads them
  (DPO), then under the objective's.

Memory at real vocabulary sizes: the logits of a 150k vocabulary over a micro-batch of
8 x 512 tokens are 2.4 GB in float32.  ``completion_logprobs`` therefore runs the LM head
over ``chunk_tokens`` completion tokens at a time (only tokens the mask keeps), casts each
chunk's logits to float32 for the log-softmax, keeps the three numbers per token the learner
needs (the token's log-prob under the objective's distribution and under the scaled full
one, and the entropy), and under autograd recomputes a chunk in the backward pass instead of
holding its logits.  Where the objective's distribution is the scaled full one and the head is a
plain linear layer, one fused kernel (``HeadLogprobs``: one exp per logit forward and backward, the
gradient written out) does it; otherwise autograd through ``torch.utils.checkpoint`` of the generic
computation (top-k, top-p, end-token bans, soft-capped or adapted heads).  When the logits of every position of the
micro-batch fit in one chunk's budget it takes the plain path (the model's own logits,
gathered): the built-in model's numbers are the same bit for bit as before chunking existed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from veriloop.algorithms import entropy_from_logprobs, sampling_logprobs, suppress_end_tokens
from veriloop.models.memory import HEAD_CHUNK_ELEMENTS

CHUNK_ELEMENTS = HEAD_CHUNK_ELEMENTS  # the auto chunk's float32 logits (models/memory.py says why this size)


class TokenLogprobs(NamedTuple):
    """Per completion token ``[N, T]`` (0 where the completion mask is 0)."""

    sampled: torch.Tensor  # log-prob under the objective's distribution ("sampling", "model" or "scaled")
    scaled: torch.Tensor  # log-prob under the temperature-scaled full distribution (the KL's)
    entropy: torch.Tensor | None  # entropy of the temperature-scaled full distribution (None when not asked)
    full: torch.Tensor | None = None  # [N, T, V] temperature-scaled log-softmax, only when asked (exact KL)


def temperature_of(sampling) -> float:
    return sampling.temperature if sampling.temperature > 0 else 1.0  # greedy: the model's own scale


def token_logprobs(
    logits: torch.Tensor,
    ids: torch.Tensor,
    sampling,
    distribution: str,
    end_ids=(),
    positions: torch.Tensor | None = None,
):
    """(log-probs of ``ids`` under ``distribution``, temperature-scaled full log-probs ``[.., V]``).

    With ``sampling.min_new_tokens`` the sampling distribution had no end token (``end_ids``) before that
    many new tokens; ``positions`` (each token's completion position, default: the logits' second-to-last
    axis) says which tokens were drawn so.  The model's and the scaled distributions stay whole."""
    temperature = temperature_of(sampling)
    full = torch.log_softmax(logits / temperature, dim=-1)
    if distribution == "scaled":  # the temperature-scaled full distribution itself (the KL's, the reference's)
        dist = full
    elif distribution == "model":
        dist = full if temperature == 1.0 else torch.log_softmax(logits, dim=-1)
    elif getattr(sampling, "min_new_tokens", 0) > 0:
        if positions is None:
            positions = torch.arange(logits.shape[-2], device=logits.device).expand(logits.shape[:-1])
        masked = suppress_end_tokens(logits, end_ids, positions, sampling.min_new_tokens)
        dist = sampling_logprobs(masked, temperature, sampling.top_k, sampling.top_p)
    elif sampling.top_k == 0 and sampling.top_p == 1.0:
        dist = full
    else:
        dist = sampling_logprobs(logits, temperature, sampling.top_k, sampling.top_p)
    return dist.gather(-1, ids[..., None]).squeeze(-1), full


def can_leave_support(sampling, distribution: str) -> bool:
    """Can a sampled token have probability 0 under ``distribution``?  Only under the sampling distribution when
    it cuts tokens (top-k, top-p, or the end-token ban of min_new_tokens); a full softmax of finite logits gives
    every token some probability."""
    truncated = sampling.top_k > 0 or sampling.top_p < 1.0 or getattr(sampling, "min_new_tokens", 0) > 0
    return distribution == "sampling" and sampling.temperature > 0 and truncated


def off_support_tokens(lp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, T]`` bool: the loss tokens whose log-prob is -inf (outside the support of the distribution it was
    taken under: seed 003 s.8.2, importance sampling cannot recover their contribution from this batch)."""
    return torch.isneginf(lp.detach()) & mask.bool()


def _token_stats(
    logits: torch.Tensor,
    ids: torch.Tensor,
    positions: torch.Tensor,
    sampling,
    distribution: str,
    entropy: bool,
    end_ids=(),
):
    """(sampled, scaled[, entropy]) of float32 ``logits [M, V]`` at ``ids [M]`` (completion ``positions [M]``)."""
    lp, full = token_logprobs(logits.float(), ids, sampling, distribution, end_ids, positions)
    scaled = full.gather(-1, ids[..., None]).squeeze(-1)
    if not entropy:
        return lp, scaled
    # H = -sum p log p; entr(p) = -p log p is 0 at p = 0, and the full log-softmax of finite logits is finite
    return lp, scaled, torch.special.entr(full.exp()).sum(dim=-1)


class HeadLogprobs(torch.autograd.Function):
    """Per token, the log-prob of ``ids`` and the entropy of ``softmax(h W^T / T)``, with a backward written out.

    Forward: ``z = (h W^T + b) / T`` in float32, ``m = logsumexp(z)``, ``log p(id) = z[id] - m`` and
    ``H = -sum_v p_v log p_v``; nothing of size ``[M, V]`` is kept.  Backward recomputes ``z`` once and forms the
    logits' gradient in place from the two incoming gradients (``g`` of the log-probs, ``e`` of the entropies):
    ``dlogp/dz = onehot - p`` and ``dH/dz = -p (log p + H)``, so ``dz = onehot * g - p (g + e (log p + H))``,
    then ``dh = dz W / T`` and ``dW = (dz / T)^T h``.  Against autograd through ``log_softmax``, ``exp`` and ``entr``
    (each saving or recomputing an ``[M, V]`` tensor) this is a few passes over the chunk's logits instead of about
    a dozen: at a 151,936-token vocabulary those passes, not the matmuls, were most of the update."""

    @staticmethod
    def forward(ctx, h, weight, bias, ids, temperature: float, want_entropy: bool):
        z = _scaled_logits(h, weight, bias, temperature)
        # one exp per logit (exp is most of the cost of a pass at 2 threads): z - max, p~ = exp(z - max),
        # s = sum p~, m = max + log s, and H = log s - sum(p~ (z - max)) / s
        top = z.amax(dim=-1, keepdim=True)
        z = z.sub_(top)  # in place: z is this chunk's own
        p = z.exp()
        s = p.sum(dim=-1)
        log_s = s.log()
        m = top.squeeze(-1) + log_s  # logsumexp(z), which the backward subtracts from the recomputed logits
        lp = z.gather(-1, ids[:, None]).squeeze(-1) - log_s
        entropy = None
        if want_entropy:
            entropy = log_s - p.mul_(z).sum(dim=-1) / s
        ctx.save_for_backward(h, weight, bias, ids, m, entropy if want_entropy else m)
        ctx.temperature, ctx.want_entropy = temperature, want_entropy
        return (lp, entropy) if want_entropy else (lp, torch.zeros_like(lp))

    @staticmethod
    def backward(ctx, grad_lp, grad_entropy):
        h, weight, bias, ids, m, entropy = ctx.saved_tensors
        logp = _scaled_logits(h, weight, bias, ctx.temperature).sub_(m[:, None])
        p = logp.exp()
        g = grad_lp if grad_lp is not None else torch.zeros_like(m)
        if ctx.want_entropy and grad_entropy is not None:  # g + e (log p + H), in logp's memory
            dz = logp.add_(entropy[:, None]).mul_(grad_entropy[:, None]).add_(g[:, None])
        else:
            dz = logp.copy_(g[:, None].expand_as(logp))
        dz.mul_(p).neg_().scatter_add_(-1, ids[:, None], g[:, None])  # onehot * g - p (...)
        dz = dz.div_(ctx.temperature).to(h.dtype)
        grad_h = dz @ weight if ctx.needs_input_grad[0] else None
        grad_w = dz.t() @ h if ctx.needs_input_grad[1] else None
        grad_b = dz.sum(dim=0) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None, None, None


def _scaled_logits(h, weight, bias, temperature: float) -> torch.Tensor:
    z = torch.nn.functional.linear(h, weight, bias)  # the head in the model's dtype, as logits_from_hidden
    z = z.float() if z.element_size() < 4 else z  # the softmax in float32 (float64 stays: gradcheck)
    return z if temperature == 1.0 else z.div_(temperature)


def fused_distribution(sampling, distribution: str) -> bool:
    """Whether the objective's distribution is the temperature-scaled full one (then one fused pass gives both):
    the KL's own, the model's at temperature 1, or the sampler's without top-k, top-p or an end-token ban."""
    if distribution == "scaled":
        return True
    if distribution == "model":
        return temperature_of(sampling) == 1.0
    return sampling.top_k == 0 and sampling.top_p == 1.0 and getattr(sampling, "min_new_tokens", 0) == 0


def chunk_size(vocab: int, chunk_tokens: int, device: torch.device | None = None) -> int:
    """Tokens per LM-head chunk: ``chunk_tokens``, or as many as keep one chunk's float32 logits within
    ``CHUNK_ELEMENTS`` (x 4 on a GPU, where many small chunks would cost a kernel launch each)."""
    if chunk_tokens > 0:
        return chunk_tokens
    budget = CHUNK_ELEMENTS * (4 if device is not None and device.type == "cuda" else 1)
    return max(1, budget // max(vocab, 1))


def completion_logprobs(
    policy, batch, sampling, distribution: str, *, want_full: bool = False, chunk_tokens: int = 0, entropy: bool = True
) -> TokenLogprobs:
    """The learner's (and the reference's) per-token numbers of ``batch``'s completions.

    ``chunk_tokens``: completion tokens per LM-head chunk; 0 = auto (``CHUNK_ELEMENTS`` float32
    logits per chunk).  ``want_full`` (the exact KL reads whole distributions) takes the plain path.
    ``entropy=False`` (the reference) skips the entropy.
    """
    mask, end_ids = batch.completion_mask, getattr(policy, "end_ids", ())
    chunked = getattr(policy, "has_hidden_path", False)  # exact mode's candidate policy has no LM head
    vocab = policy.vocab_size if chunked else 1
    per_chunk = chunk_size(vocab, chunk_tokens, getattr(policy, "device", torch.device("cpu")))
    # The plain path computes logits at every position (prompts included): taken only when all of them
    # fit in one chunk's budget, as the built-in model's always do (its numbers stay bit for bit).
    if want_full or not chunked or batch.input_ids.numel() <= per_chunk:
        logits = policy.completion_logits(batch)
        lp, full = token_logprobs(logits, batch.completion_ids, sampling, distribution, end_ids)
        scaled = full.gather(-1, batch.completion_ids[..., None]).squeeze(-1)
        ent = entropy_from_logprobs(full) if entropy else None
        return TokenLogprobs(lp, scaled, ent, full if want_full else None)
    hidden = policy.completion_hidden(batch)  # [N, T, H] in the model's dtype
    mask = mask.to(hidden.device)
    where = mask.reshape(-1).nonzero().squeeze(1).to(hidden.device)
    h, ids = hidden.reshape(-1, hidden.shape[-1])[where], batch.completion_ids.reshape(-1).to(hidden.device)[where]
    positions = where % mask.shape[1]  # each kept token's completion position (min_new_tokens reads it)

    def stats(h_chunk, ids_chunk, pos_chunk):
        return _token_stats(
            policy.logits_from_hidden(h_chunk), ids_chunk, pos_chunk, sampling, distribution, entropy, end_ids
        )

    head = policy.plain_head() if hasattr(policy, "plain_head") else None  # a policy without one: the generic path
    fused = head is not None and fused_distribution(sampling, distribution)
    pieces = []
    for start in range(0, h.shape[0], per_chunk):
        part = slice(start, start + per_chunk)
        if fused:  # one kernel: the token's log-prob under the scaled full distribution is both numbers
            lp, ent = HeadLogprobs.apply(h[part], *head, ids[part], temperature_of(sampling), entropy)
            pieces.append((lp, lp, ent) if entropy else (lp, lp))
            continue
        args = (h[part], ids[part], positions[part])
        grad = torch.is_grad_enabled() and args[0].requires_grad
        pieces.append(checkpoint(stats, *args, use_reentrant=False) if grad else stats(*args))
    out = []
    for values in zip(*pieces):
        flat = torch.zeros(mask.numel(), dtype=torch.float32, device=hidden.device)
        out.append(flat.index_put((where,), torch.cat(values)).view(mask.shape))
    return TokenLogprobs(*out) if entropy else TokenLogprobs(*out, None)


def reference_temperature(objective, sampling) -> float:
    """The reference's log-probs: under the objective's distribution when it reads them, else the KL's."""
    if objective.needs_reference and objective.distribution == "model":
        return 1.0
    return temperature_of(sampling)
