"""What a model's training pass holds in memory, estimated from its shapes: the activations autograd keeps per
token, and from them how many sequences one micro-batch may hold within a budget (``update.micro_batch_memory_mib``).

Per token and decoder layer, in the model's dtype, autograd keeps about ``12 h + 4 kv + 5 I`` values (``h`` the
hidden size, ``kv`` the width of the keys and values, ``I`` the MLP's inner size): the two norms' inputs and
outputs, the projections' inputs and outputs, the rotary copies of q and k, the attention output, the MLP's gate,
up, activation and product.  Calibrated on the peer contract's model (hidden 256, 4 layers, MLP 1,024, float32):
micro-batches of 8 and 64 rows of 72 tokens peaked at 570 and 1,119 MiB of RSS, 9.8 MiB per row; this formula
gives 10.6, 8% over (``docs/configuration.md``: micro-batches).  With gradient checkpointing a layer keeps only its
input (``h``), plus one layer's full set while it is recomputed.  The LM head's float32 logits, their log-softmax and
probabilities (``3 x 4 x V`` bytes per completion token) are bounded by the log-prob chunk
(``HEAD_CHUNK_ELEMENTS``) when the vocabulary is large: at most ``3 x 4 x HEAD_CHUNK_ELEMENTS`` bytes.
"""

from __future__ import annotations

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# The LM head's auto chunk (veriloop.training.loop.logprobs reads it): as many tokens as keep one chunk's float32
# logits at <= 2**25 values (128 MiB; 220 tokens at a 151,936-token vocabulary).  Smaller chunks starve the head's
# matmuls: at 110 tokens the weight gradient's [V, M] x [M, H] product ran at 72 GFLOP/s against 91-104 from 256
# tokens up (2 threads), +5 s a step.
HEAD_CHUNK_ELEMENTS = 1 << 25


def model_shapes(model) -> dict:
    """The sizes the memory estimates read from a transformers config (hidden, layers, vocab, MLP, K/V width)."""
    config = model.config
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_dim = getattr(config, "num_key_value_heads", heads) * (getattr(config, "head_dim", None) or hidden // heads)
    return {
        "hidden": hidden,
        "layers": config.num_hidden_layers,
        "vocab": config.vocab_size,
        "intermediate": getattr(config, "intermediate_size", 4 * hidden),
        "kv_dim": kv_dim,
    }


def body_bytes_per_token(shapes: dict, dtype_bytes: int, checkpointing: bool) -> int:
    """Activation bytes autograd keeps per token for the decoder's layers (and the embedding's output)."""
    h, kv, inner = shapes["hidden"], shapes["kv_dim"], shapes["intermediate"]
    layer = 12 * h + 4 * kv + 5 * inner
    kept = shapes["layers"] * (h if checkpointing else layer) + (layer if checkpointing else 0) + h
    return kept * dtype_bytes


def micro_batch_bytes(shapes: dict, dtype_bytes: int, checkpointing: bool, rows: int, length: int, new: int) -> int:
    """Estimated activation bytes of a micro-batch of ``rows`` sequences of ``length`` tokens, ``new`` of them
    completion tokens (the LM head's share bounded by one log-prob chunk)."""
    body = rows * length * body_bytes_per_token(shapes, dtype_bytes, checkpointing)
    return body + min(12 * shapes["vocab"] * rows * new, 12 * HEAD_CHUNK_ELEMENTS)


def rows_within(budget_bytes: float, shapes: dict, dtype_bytes: int, checkpointing: bool, length: int, new: int) -> int:
    """The most sequences of ``length`` tokens (``new`` of them completion) whose activations fit in
    ``budget_bytes``; at least 1 (one row that does not fit still has to run, alone)."""
    body = length * body_bytes_per_token(shapes, dtype_bytes, checkpointing)
    head = 12 * shapes["vocab"] * new
    plain = budget_bytes // (body + head)  # the head's logits grow with the rows
    chunked = (budget_bytes - 12 * HEAD_CHUNK_ELEMENTS) // body if budget_bytes > 12 * HEAD_CHUNK_ELEMENTS else 0
    return max(1, int(plain), int(chunked))  # the cost is increasing in rows: the larger bound that holds


def budget_micro_batch_size(update, policy, dtype: str, longest_prompt: int, max_new_tokens: int) -> int:
    """``update.micro_batch_size``, or where it is 0 (the default), the rows of the longest prompt plus
    ``max_new_tokens`` that ``update.micro_batch_memory_mib`` holds, for ``policy``'s shapes."""
    if update.micro_batch_size > 0:
        return update.micro_batch_size
    model = getattr(policy, "model", None)
    if getattr(model, "config", None) is None or not hasattr(model.config, "hidden_size"):
        return DEFAULT_ROWS_WITHOUT_SHAPES  # a policy without a transformers config (the exact-mode candidates)
    length = longest_prompt + max_new_tokens
    budget = update.micro_batch_memory_mib * 2**20
    dtype_bytes = DTYPE_BYTES.get(dtype, 4)
    return rows_within(budget, model_shapes(model), dtype_bytes, update.gradient_checkpointing, length, max_new_tokens)


# a policy whose shapes cannot be read: the fixed size micro-batches had before the budget
DEFAULT_ROWS_WITHOUT_SHAPES = 128
