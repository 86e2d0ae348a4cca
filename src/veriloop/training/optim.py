"""Optimizer and learning-rate schedule shared by every trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class OptimConfig:
    """The optimizer (AdamW or SGD) with linear warm-up, then constant or cosine decay."""

    name: str = field(default="adamw", metadata={"help": "adamw | sgd"})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay (matrices only)"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    adam_eps: float = field(default=1e-8, metadata={"help": "AdamW epsilon"})
    momentum: float = field(default=0.0, metadata={"help": "SGD momentum"})
    grad_clip: float = field(default=1.0, metadata={"help": "clip the global grad norm to this; 0 = off"})
    warmup_steps: int = field(default=0, metadata={"help": "optimizer steps of linear warm-up"})
    schedule: str = field(default="constant", metadata={"help": "after warm-up: constant | cosine (to 10%)"})

    def __post_init__(self):
        if self.name not in ("adamw", "sgd"):
            raise ValueError(f"optim.name must be adamw or sgd, got {self.name!r}")
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"optim.schedule must be constant or cosine, got {self.schedule!r}")
        if self.grad_clip < 0:
            raise ValueError(f"optim.grad_clip must be >= 0, got {self.grad_clip}")


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW or SGD; weight decay only on matrices (not norms, biases or 1-D parameters)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [g for g in ({"params": decay, "weight_decay": cfg.weight_decay},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]  # fmt: skip
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps)


def lr_at(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``total_steps``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Global grad norm before clipping (clipping skipped when ``max_norm`` is 0)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.nn.utils.get_total_norm([p.grad for p in params]))
