"""Batched, KV-cached sampling that records the behaviour log-probs.

``generate`` speaks token ids.  It

* prefills each distinct prompt once and copies its KV cache to the ``n`` samples of
  its group (a GRPO group shares its prompt);
* samples from ``sampling_logprobs`` (temperature -> top-k -> top-p), so the log-prob it
  records for each token is the one of the distribution that actually drew it;
* drops finished rows from the batch (and from the cache) as soon as they emit EOS,
  so a batch costs what its live rows cost, not its longest row times its size;
* draws every random number either from per-row streams (``row_seeds``: completion i's
  token at decode step t uses ``u = splitmix64(row_seeds[i], t)``, so a row's tokens do
  not depend on which other rows share its batch) or from one ``torch.Generator``.

``temperature == 0`` is greedy decoding; its behaviour distribution is a point mass,
so the recorded log-probs are 0.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field

import torch
from transformers import DynamicCache

from veriloop.algorithms.sampling import sampling_logprobs, suppress_end_tokens
from veriloop.config import check_typed
from veriloop.rollout import static_decode


@dataclass(frozen=True)
class SamplingParams:
    """How completions are drawn (recorded with every completion)."""

    temperature: float = field(default=1.0, metadata={"help": "softmax temperature; 0 = greedy", "ge": 0})
    top_k: int = field(default=0, metadata={"help": "keep the k most likely tokens; 0 = off", "ge": 0})
    top_p: float = field(
        default=1.0, metadata={"help": "nucleus: smallest set reaching this mass; 1 = off", "gt": 0, "le": 1}
    )
    max_new_tokens: int = field(default=64, metadata={"help": "completion length limit, in tokens", "ge": 1})
    min_new_tokens: int = field(
        default=0,
        metadata={
            "help": "no end token before this many new tokens (fixed-length work; at most max_new_tokens); the "
            "learner's sampling distribution masks them too",
            "ge": 0,
        },
    )
    max_thinking_tokens: int = field(
        default=0,
        metadata={
            "help": "cap on the reasoning part, below max_new_tokens: at the cap the end-of-thinking marker is "
            "forced and the model answers (budget forcing; rollout/thinking.py); 0 = off",
            "ge": 0,
        },
    )
    thinking_end: str = field(
        default="",
        metadata={
            "help": "the end-of-thinking marker budget forcing appends; empty = the task's (;answer= for the built-in "
            "task, \\n#### for GSM8K)"
        },
    )

    def __post_init__(self):
        check_typed(self, "sampling")
        if self.min_new_tokens > self.max_new_tokens:  # the upper bounds relate two options
            raise ValueError(
                f"sampling.min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], "
                f"got {self.min_new_tokens}"
            )
        if self.max_thinking_tokens >= self.max_new_tokens:
            raise ValueError(
                f"sampling.max_thinking_tokens must be in [0, max_new_tokens={self.max_new_tokens}) "
                "(a cap at the completion limit never forces), "
                f"got {self.max_thinking_tokens}"
            )

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Generation:
    """Completions in the order of the expanded batch: prompt 0 sample 0..n-1, prompt 1, ..."""

    completion_ids: list[list[int]]  # EOS included when finish_reason == "eos"
    logprobs: list[list[float]]  # behaviour log-prob of each completion token (nats)
    finish_reasons: list[str]  # "eos" | "length" | "stop" (a token of ``stop_ids``, kept in the completion)

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


def completion_text(tokenizer, ids: list[int], finish_reason: str) -> str:
    """Text of a completion without its final EOS.

    Other special tokens stay visible (``<pad>``, ``<unk>``...): dropping them silently
    would let ``answer=2<unk>0`` read as ``answer=20`` to a verifier.
    """
    body = ids[:-1] if finish_reason == "eos" else ids
    return tokenizer.decode(body, skip_special_tokens=False)


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def _signed(x: int) -> int:
    """The int64 with the bits of ``x mod 2**64`` (torch has no uint64 arithmetic)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN, _MIX1, _MIX2 = (_signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _shift_right(x: torch.Tensor, k: int) -> torch.Tensor:
    return (x >> k) & ((1 << (64 - k)) - 1)  # logical, not arithmetic: the bits are unsigned


def splitmix64(seeds: torch.Tensor, t: int) -> torch.Tensor:
    """The (t+1)-th output of SplitMix64 started at each seed (int64 bits; int64 products wrap mod 2**64)."""
    z = seeds + _signed((t + 1) * 0x9E3779B97F4A7C15)
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


class RowStreams:
    """One counter-based random stream per completion: the uniform of row i at decode step t is
    the top 24 bits of ``splitmix64(seed_i, t)`` (a float32 in [0, 1), like ``torch.rand``).
    A row's draws depend only on its own seed and the step, never on the rows beside it."""

    def __init__(self, seeds: list[int]):
        self.seeds = torch.tensor(seeds, dtype=torch.long)

    def uniforms(self, rows: torch.Tensor, step: int) -> torch.Tensor:
        bits = _shift_right(splitmix64(self.seeds[rows], step), 40)
        return bits.to(torch.float32) * (1.0 / (1 << 24))


class GroupStreams:
    """One ``torch.Generator`` per group of consecutive rows, each drawing exactly the uniforms it
    would draw if its group were sampled alone (one stream for the batch: as many draws per step as
    that batch's live rows, finished ones included until it compacts at ``COMPACT_SHARE``).  So
    several problems' calls become one batch and each problem's tokens stay those of its own call
    (``veriloop search`` batches problems this way)."""

    def __init__(self, generators: list[torch.Generator], sizes: list[int]):
        if len(generators) != len(sizes) or any(s < 1 for s in sizes):
            raise ValueError(f"GroupStreams: {len(generators)} generators for group sizes {sizes}")
        self.generators = generators
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        self.live = [list(range(a, a + s)) for a, s in zip(starts, sizes)]  # each group's own live batch
        self.alive = torch.ones(sum(sizes), dtype=torch.bool)

    def uniforms(self, rows: torch.Tensor, step: int) -> torch.Tensor:
        u = torch.zeros(self.alive.numel())
        for gen, live in zip(self.generators, self.live):
            if self.alive[live].any():  # a group alone stops drawing once all its rows ended
                u[live] = torch.rand(len(live), generator=gen)
        return u[rows]

    def finished(self, ended: torch.Tensor) -> None:
        """Rows that ended at this step; each group compacts its own live batch by the loop's rule."""
        self.alive[ended] = False
        for k, live in enumerate(self.live):
            dead = int((~self.alive[live]).sum())
            if dead >= max(1, COMPACT_SHARE * len(live)):
                self.live[k] = [r for r in live if self.alive[r]]


# Inverse-CDF draws search the cumulative weights in two levels above this vocabulary size: the sums of blocks of
# CDF_BLOCK tokens, then one block's cumulative sum.  A cumulative sum over the whole vocabulary is a sequential
# pass per row; at 151,936 tokens it was 14-19 ms of each decode step on 2 threads.
CDF_BLOCK = 1024


def _inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(token, total weight) per row: the first token whose cumulative weight exceeds ``u x total`` in rows of
    non-negative, unnormalised ``weights [rows, V]``, at uniforms ``u [rows]``; never a token of weight 0."""
    rows, vocab = weights.shape
    block = CDF_BLOCK
    if vocab <= 2 * block:
        cdf = torch.cumsum(weights, dim=-1)
        total = cdf[:, -1]
        target = u.to(cdf.dtype)[:, None] * total[:, None]
        token = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=vocab - 1)
        return _nonzero_at_or_before(weights, token), total
    # the running sums in float64: a float32 running sum over a large vocabulary errs by about one token's share of
    # a near-uniform distribution (it picked another token than float64 in 0.4% of draws at 151,936); each block's
    # own sum (pairwise in float32) errs by ~1e-7 of the block's mass, far below one token's
    whole = vocab // block * block
    sums = weights[:, :whole].reshape(rows, -1, block).sum(dim=-1)
    if whole < vocab:
        sums = torch.cat([sums, weights[:, whole:].sum(dim=-1, keepdim=True)], dim=1)
    sums = sums.double()
    cumulative = torch.cumsum(sums, dim=-1)
    total = cumulative[:, -1]
    target = u.to(torch.float64)[:, None] * total[:, None]
    blk = torch.searchsorted(cumulative, target, right=True).squeeze(1).clamp_(max=sums.shape[1] - 1)
    before = torch.where(blk > 0, cumulative.gather(1, (blk - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
    columns = blk[:, None] * block + torch.arange(block, device=weights.device)
    inside = columns < vocab
    local = weights.gather(1, columns.clamp(max=vocab - 1)).double() * inside
    cdf = before[:, None] + torch.cumsum(local, dim=-1)
    pos = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=block - 1)
    token = (blk * block + pos).clamp_(max=vocab - 1)
    return _nonzero_at_or_before(weights, token), total


def _nonzero_at_or_before(weights: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """``token``, or where rounding put the target past the last token of positive weight (a search that
    returned the last column), the last token of positive weight before it."""
    zero = weights.gather(1, token[:, None]).squeeze(1) <= 0
    if not bool(zero.any()):
        return token
    positions = torch.arange(weights.shape[1], device=weights.device)
    allowed = (weights[zero] > 0) & (positions <= token[zero, None])
    token = token.clone()
    token[zero] = torch.where(allowed, positions, -1).amax(dim=-1).clamp_(min=0)
    return token


def _draw(logprobs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from rows of log-probs at uniforms ``u`` ``[rows]``; never returns a token of
    probability 0."""
    return _inverse_cdf(logprobs.exp(), u)[0]


def _draw_full(logits: torch.Tensor, temperature: float, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, their log-probs) drawn from ``softmax(logits / T)`` without top-k or top-p: one exp per logit and
    no log-softmax; the weights are ``exp(z - max z)`` and ``log p = z - max z - log(sum of the weights)``."""
    z = logits / temperature if temperature != 1.0 else logits
    top = z.amax(dim=-1, keepdim=True)
    weights = (z - top).exp_()  # one new [rows, V] tensor; z (the decoder's logits) is left as it is
    token, total = _inverse_cdf(weights, u.to(weights.device))
    shifted = z.gather(1, token[:, None]) - top
    return token, shifted.squeeze(1) - total.log().to(shifted.dtype)


def cache_argument(model: torch.nn.Module, cache) -> dict:
    """The KV cache as the model's forward names it: ``cache`` from transformers 5.2x, ``past_key_values`` before
    (vLLM's CPU build pins transformers < 5.20).  An unknown keyword is swallowed by ``**kwargs``, and the model
    would then decode every token without its past: wrong tokens, no error."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft forwards **kwargs
    names = inspect.signature(type(inner).forward).parameters
    if "cache" in names:
        return {"cache": cache}
    if "past_key_values" in names:
        return {"past_key_values": cache}
    raise TypeError(f"{type(inner).__name__}.forward takes neither cache nor past_key_values: no KV-cached sampling")


class _HFDecoder:
    """Decode steps through the model's own forward and transformers' DynamicCache."""

    def __init__(self, model, cache, mask):
        self.model, self.cache, self.mask = model, cache, mask
        self.device = mask.device
        self.cache_kw = cache_argument(model, cache)  # once: the cache is the same object, edited in place

    def select(self, rows: torch.Tensor) -> None:
        rows = rows.to(self.device)
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((self.mask.shape[0], 1), dtype=self.mask.dtype, device=self.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        out = self.model(
            input_ids=tokens.to(self.device)[:, None],
            attention_mask=self.mask,
            position_ids=positions.to(self.device)[:, None],
            use_cache=True,
            **self.cache_kw,
        )
        return out.logits[:, -1].float()


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: list[list[int]],
    params: SamplingParams,
    *,
    eos_id: int | tuple[int, ...],
    pad_id: int,
    generator: torch.Generator | None = None,
    row_seeds: list[int] | None = None,
    n: int = 1,
    engine: str = "auto",
    stop_ids: tuple[int, ...] = (),
) -> Generation:
    """Sample ``n`` completions for each prompt (token ids in, token ids out).

    ``engine``: ``"static"`` (preallocated cache, Llama-family models), ``"hf"`` (the
    model's own forward with transformers' cache) or ``"auto"`` (static where supported).
    ``stop_ids``: tokens that also end a row (finish reason ``"stop"``, the token kept), e.g.
    a step separator when a search extends a solution one step at a time.
    ``row_seeds`` (one per completion, prompt-major) gives each completion its own stream, so
    that splitting or reordering the batch changes no token; otherwise ``generator`` draws for
    the whole batch at once.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs a non-empty list of non-empty prompts")
    if row_seeds is not None:
        if len(row_seeds) != len(prompts) * n:
            raise ValueError(f"row_seeds: {len(row_seeds)} seeds for {len(prompts)} prompts x {n} samples")
        generator = RowStreams(row_seeds)
    if params.temperature > 0 and generator is None:
        raise ValueError("sampling with temperature > 0 needs a torch.Generator or row_seeds (determinism)")
    if engine not in ("auto", "static", "hf"):
        raise ValueError(f"engine must be auto, static or hf, got {engine!r}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids, mask = (t.to(device) for t in _left_pad(prompts, pad_id))
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **cache_argument(model, cache),
    )
    logits = out.logits[:, -1].float()
    if n > 1:  # share the prefill across the group
        cache.batch_repeat_interleave(n)
        logits = logits.repeat_interleave(n, dim=0)
        mask = mask.repeat_interleave(n, dim=0)
        positions = positions.repeat_interleave(n, dim=0)
    decoder = _decoder(model, engine, cache, mask, mask.shape[1] + params.max_new_tokens)
    result = _sample_loop(decoder, logits, positions[:, -1].cpu() + 1, params, eos_id, generator, stop_ids)
    model.train(was_training)
    return result


def _decoder(model, engine: str, cache, mask: torch.Tensor, max_len: int):
    """The static-cache decoder where it serves the model (``auto``, ``static``), else transformers' forward."""
    use_static = engine != "hf" and static_decode.supports(model, max_len)
    if engine == "static" and not use_static:
        kind = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise ValueError(
            f"engine static does not serve {kind!r} at this length (families: "
            f"{', '.join(static_decode.SUPPORTED_MODEL_TYPES)}); use engine auto or hf"
        )
    if use_static:
        return static_decode.StaticDecoder(model, mask.shape[0], max_len, cache, mask)
    return _HFDecoder(model, cache, mask)


def _sample_step(logits, params: SamplingParams, generator, rows: torch.Tensor, step: int):
    """(tokens, their behaviour log-probs) of one decode step, on the CPU."""
    if isinstance(generator, (RowStreams, GroupStreams)):
        u = generator.uniforms(rows, step)
    else:  # one stream for the batch: as many draws as live-batch rows (finished ones included)
        u = torch.rand(logits.shape[0], generator=generator)
    if params.top_k == 0 and params.top_p == 1.0:
        drawn, drawn_lp = _draw_full(logits, params.temperature, u)
    else:
        lp = sampling_logprobs(logits, params.temperature, params.top_k, params.top_p)
        drawn = _draw(lp, u.to(lp.device))
        drawn_lp = lp.gather(1, drawn[:, None]).squeeze(1)
    return drawn.cpu(), drawn_lp.float().cpu()


# Finished rows leave the batch once they are this share of it: compacting the cache
# every time one row ends would copy it more often than the dead rows cost to carry.
COMPACT_SHARE = 0.125


def _sample_loop(decoder, logits, next_pos, params: SamplingParams, eos_id, generator, stop_ids=()) -> Generation:
    """Token-by-token sampling.  The logits live on the model's device; the bookkeeping (which rows
    are alive, the tokens and log-probs so far) and every random number live on the CPU, so the
    same seeds draw the same uniforms on any device.  ``eos_id``: one id or several (an instruct
    model's end tokens); the record keeps the token that ended it."""
    total, steps = logits.shape[0], params.max_new_tokens
    eos_ids = torch.tensor(sorted({eos_id} if isinstance(eos_id, int) else set(eos_id)), dtype=torch.long)
    rows = torch.arange(total)  # row i of the live batch is sample rows[i]
    alive = torch.ones(total, dtype=torch.bool)  # rows of the live batch still generating
    out_tokens = torch.full((total, steps), -1, dtype=torch.long)  # [N, T]; -1 after the end
    out_lp = torch.zeros((total, steps))
    ended_by_eos = torch.zeros(total, dtype=torch.bool)
    ended_by_stop = torch.zeros(total, dtype=torch.bool)
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long)
    greedy = params.temperature == 0
    for step in range(steps):
        if step < params.min_new_tokens:  # no end token yet: the behaviour distribution renormalises without them
            logits = suppress_end_tokens(logits, eos_ids, torch.full(logits.shape[:1], step), params.min_new_tokens)
        if greedy:
            tokens = logits.argmax(dim=-1).cpu()
            token_lp = torch.zeros(tokens.shape[0])
        else:
            tokens, token_lp = _sample_step(logits, params, generator, rows, step)
        live_rows = rows[alive]
        out_tokens[live_rows, step] = tokens[alive]
        out_lp[live_rows, step] = token_lp[alive]
        done = torch.isin(tokens, eos_ids) & alive
        ended_by_eos[rows[done]] = True
        if stops.numel():
            stopped = torch.isin(tokens, stops) & alive & ~done
            ended_by_stop[rows[stopped]] = True
            done |= stopped
        alive &= ~done
        if isinstance(generator, GroupStreams):
            generator.finished(rows[done])
        if step == steps - 1 or not alive.any():
            break
        if (~alive).sum() >= max(1, COMPACT_SHARE * alive.numel()):
            keep = alive.nonzero().squeeze(1)
            decoder.select(keep)
            tokens, next_pos, rows, alive = tokens[keep], next_pos[keep], rows[keep], alive[keep]
        logits = decoder.step(tokens, next_pos)
        next_pos = next_pos + 1
    lengths = (out_tokens >= 0).sum(dim=1).tolist()
    token_rows, lp_rows = out_tokens.tolist(), out_lp.tolist()
    completions = [row[:n] for row, n in zip(token_rows, lengths)]
    logps = [row[:n] for row, n in zip(lp_rows, lengths)]
    finish = [
        "eos" if e else "stop" if st else "length" for e, st in zip(ended_by_eos.tolist(), ended_by_stop.tolist())
    ]
    return Generation(completions, logps, finish)
