"""LoRA adapters through ``peft``: train a few low-rank matrices, keep the base frozen and shared.

With ``lora.r > 0`` the policy's model is wrapped by ``peft.get_peft_model``: every targeted linear
layer ``W`` becomes ``W + (alpha / r) * B A`` with ``A`` (r x in, random) and ``B`` (out x r, zero, so
training starts at the base model exactly).  Only ``A`` and ``B`` train, so the optimizer's moments
cover them alone.

* The reference policy is the same model with its adapters switched off (``AdapterDisabledPolicy``:
  ``disable_adapter()`` around each forward): no second copy of the weights in memory.
* A checkpoint's ``model/`` holds the adapter (``adapter_config.json``, ``adapter_model.safetensors``)
  and the tokenizer; ``final/`` holds the merged model (a plain transformers directory that
  transformers and vLLM load) and ``final/adapter/`` the adapter.
* The sampler runs the adapted model through transformers' forward (the static-cache decoder reads
  plain weight matrices, so it does not serve a wrapped model).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch

from veriloop.config import check_typed
from veriloop.errors import InputError


@dataclass
class LoraConfig:
    """Low-rank adapters (peft); ``r = 0`` trains every weight."""

    r: int = field(default=0, metadata={"help": "LoRA rank; 0 = full fine-tuning (no adapters)", "ge": 0})
    alpha: float = field(default=16.0, metadata={"help": "LoRA alpha: the update is scaled by alpha / r", "gt": 0})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the adapters' input", "ge": 0, "lt": 1})
    target_modules: str = field(
        default="all-linear",
        metadata={
            "help": "comma-separated module names (q_proj,v_proj,...) or all-linear (every linear but the LM head)"
        },
    )

    def __post_init__(self):
        check_typed(self, "lora")
        if not self.target_modules.strip():
            raise ValueError("lora.target_modules must name modules or be all-linear")

    @property
    def enabled(self) -> bool:
        return self.r > 0

    def targets(self) -> str | list[str]:
        names = [n.strip() for n in self.target_modules.split(",") if n.strip()]
        return "all-linear" if names == ["all-linear"] else names


def _peft():
    try:
        import peft
    except ImportError:
        raise InputError("lora.r > 0 needs the peft package: pip install 'veriloop[lora]'") from None
    return peft


def is_adapted(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries peft adapters (``Policy.adapted`` asks this for its model; the one definition)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def add_adapters(model: torch.nn.Module, cfg: LoraConfig, seed: int) -> torch.nn.Module:
    """``model`` wrapped with fresh trainable adapters (the base weights frozen); ``A`` drawn from ``seed``."""
    peft = _peft()
    config = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.targets(),
        task_type="CAUSAL_LM",
        bias="none",
    )
    try:
        with torch.random.fork_rng(devices=[]):  # the adapters' init, not the caller's stream, reads this seed
            torch.manual_seed(seed)
            return peft.get_peft_model(model, config)
    except ValueError as e:  # e.g. a target module name the model does not have
        raise InputError(f"lora.target_modules={cfg.target_modules!r}: {e}") from None


def save_adapter(model: torch.nn.Module, path: Path) -> None:
    model.save_pretrained(path)  # a PeftModel writes only adapter_config.json and adapter_model.safetensors


def load_adapter_weights(model: torch.nn.Module, path: Path) -> None:
    """Put the adapter saved in ``path`` into ``model``'s adapters (same config), in place."""
    peft = _peft()
    state = peft.utils.load_peft_weights(str(path), device=str(next(model.parameters()).device))
    result = peft.set_peft_model_state_dict(model, state)
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise InputError(f"adapter in {str(path)!r} does not fit this model: unexpected {missing[:3]}")


def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain transformers model with the adapters merged into its weights (the adapted model untouched)."""
    return copy.deepcopy(model).merge_and_unload()


class AdapterDisabledPolicy:
    """The base model under the adapters: the reference of a LoRA run, sharing every weight with the policy."""

    def __init__(self, policy):
        self.inner = policy

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _off(self):
        return self.inner.model.disable_adapter() if self.inner.adapted else contextlib.nullcontext()

    def completion_logits(self, batch):
        with self._off():
            return self.inner.completion_logits(batch)

    def completion_hidden(self, batch):
        with self._off():
            return self.inner.completion_hidden(batch)

    def logits_from_hidden(self, hidden):
        with self._off():
            return self.inner.logits_from_hidden(hidden)

    def sample(self, *args, **kwargs):  # rollout.source initial samples from the reference
        with self._off():
            return self.inner.sample(*args, **kwargs)

    def frozen_copy(self):
        return AdapterDisabledPolicy(self.inner.frozen_copy())
