"""One-token decode steps for Llama-family models with a preallocated KV cache.

transformers' decode step rebuilds a 4-D attention mask and concatenates the growing
cache every step; for a small model on a CPU that bookkeeping costs as much as the
maths.  This decoder keeps the cache in one preallocated tensor per layer, writes each
new key/value into its column, fuses the q/k/v and gate/up projections into one matmul
each, and attends with a plain masked softmax.  It reads the model's own weights and
modules (norms, rotary embedding, activation), so it decodes exactly the model
transformers loaded; ``tests/test_static_decode_on_cpu.py`` checks its logits against
the model's own forward pass.

Supported: ``model_type`` in llama, qwen2, qwen3, mistral without a sliding window or a
length-dependent rotary scaling.
Anything else falls back to the transformers forward in ``sampler.generate``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def supports(model: torch.nn.Module, max_len: int) -> bool:
    cfg = getattr(model, "config", None)
    if hasattr(model, "peft_config"):  # LoRA: the adapted projections are not plain weight matrices
        return False
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    window = getattr(cfg, "sliding_window", None)
    if window is not None and getattr(cfg, "use_sliding_window", True) and window < max_len:
        return False
    scaling = getattr(cfg, "rope_scaling", None) or {}
    if scaling.get("rope_type", scaling.get("type")) in ("dynamic", "longrope"):
        return False  # rotary tables that depend on the sequence length seen so far
    inner = getattr(model, "model", None)
    return inner is not None and hasattr(inner, "rotary_emb") and hasattr(model, "lm_head")


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm as one fused op (same formula: w * x / sqrt(mean(x^2) + eps))."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticDecoder:
    """Decode state for ``batch`` rows with room for ``max_len`` positions."""

    def __init__(self, model: torch.nn.Module, batch: int, max_len: int, prefill_cache, prefill_mask: torch.Tensor):
        cfg = model.config
        self.model, self.inner = model, model.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scaling = self.head_dim**-0.5
        self.layers = list(self.inner.layers)
        self.fused = [self._fuse(layer) for layer in self.layers]
        dtype, self.device = self.inner.embed_tokens.weight.dtype, self.inner.embed_tokens.weight.device
        P = prefill_mask.shape[1]
        shape = (batch, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in self.layers]
        for i, layer_cache in enumerate(prefill_cache.layers):
            self.keys[i][:, :, :P] = layer_cache.keys
            self.values[i][:, :, :P] = layer_cache.values
        # Additive attention bias [B, 1, 1, L]: 0 where a key may be attended, -inf elsewhere
        # (left padding, and columns not written yet).
        self.bias = torch.full((batch, 1, 1, max_len), float("-inf"), dtype=dtype, device=self.device)
        self.bias[:, 0, 0, :P].masked_fill_(prefill_mask.bool(), 0.0)
        self.column = P  # where the next token's key/value go
        # cos/sin of every rotary position, computed once by the model's own rotary module.
        positions = torch.arange(max_len, device=self.device)[None, :]
        self.cos_table, self.sin_table = (t[0] for t in self.inner.rotary_emb(self.keys[0], positions))

    @staticmethod
    def _fuse(layer) -> tuple:
        attn, mlp = layer.self_attn, layer.mlp
        w_qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        b_qkv = None
        if attn.q_proj.bias is not None:
            b_qkv = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        w_gu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        b_gu = torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias]) if mlp.gate_proj.bias is not None else None
        return w_qkv, b_qkv, w_gu, b_gu

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` of the batch (finished rows leave); copies only the filled columns."""
        filled, rows = self.column, rows.to(self.device)

        def compact(buf: torch.Tensor) -> torch.Tensor:
            out = torch.empty((rows.shape[0], *buf.shape[1:]), dtype=buf.dtype, device=buf.device)
            out[:, :, :filled] = buf[rows, :, :filled]
            return out

        self.keys = [compact(k) for k in self.keys]
        self.values = [compact(v) for v in self.values]
        self.bias = self.bias.index_select(0, rows)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` after appending ``tokens[B]`` at rotary positions ``positions[B]``."""
        B, col = tokens.shape[0], self.column
        tokens, positions = tokens.to(self.device), positions.to(self.device)
        h = self.inner.embed_tokens(tokens)[:, None, :]  # [B, 1, C]
        cos = self.cos_table[positions][:, None, None, :]  # [B, 1, 1, D]
        sin = self.sin_table[positions][:, None, None, :]
        self.bias[:, :, :, col] = 0.0
        bias = self.bias[:, :, :, : col + 1]  # [B, 1, 1, L]
        groups = self.heads // self.kv_heads
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, layer in enumerate(self.layers):
            w_qkv, b_qkv, w_gu, b_gu = self.fused[i]
            attn = layer.self_attn
            x = _rms_norm(layer.input_layernorm, h)
            qkv = F.linear(x, w_qkv, b_qkv)  # [B, 1, q + 2 kv]
            q = qkv[..., :q_size].view(B, 1, self.heads, self.head_dim)
            k = qkv[..., q_size : q_size + kv_size].view(B, 1, self.kv_heads, self.head_dim)
            v = qkv[..., q_size + kv_size :].view(B, self.kv_heads, self.head_dim)
            if hasattr(attn, "q_norm"):  # qwen3 normalises each head before the rotation
                q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
            q = q.transpose(1, 2)  # [B, H, 1, D]
            k = k.transpose(1, 2)  # [B, Hkv, 1, D]
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.keys[i][:, :, col] = k[:, :, 0]
            self.values[i][:, :, col] = v
            keys = self.keys[i][:, :, : col + 1]  # [B, Hkv, L, D]
            values = self.values[i][:, :, : col + 1]
            qg = q.reshape(B, self.kv_heads, groups, self.head_dim)  # heads grouped by their shared kv head
            scores = torch.matmul(qg, keys.transpose(-1, -2)) * self.scaling + bias  # [B, Hkv, g, L]
            out = torch.matmul(torch.softmax(scores, dim=-1), values)  # [B, Hkv, g, D]
            h = h + attn.o_proj(out.reshape(B, 1, q_size))
            x = _rms_norm(layer.post_attention_layernorm, h)
            gate, up = F.linear(x, w_gu, b_gu).chunk(2, dim=-1)  # llama's mlp_bias: biases of both
            h = h + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        self.column += 1
        return self.model.lm_head(_rms_norm(self.inner.norm, h))[:, 0].float()
