"""Optimizer and learning-rate schedule shared by every trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from veriloop.config import check_typed
from veriloop.options import OptionScope, check_declared, declare, dotted_defaults


@dataclass
class OptimConfig:
    """The optimizer (AdamW or SGD) with linear warm-up, then constant or cosine decay."""

    name: Literal["adamw", "sgd"] = field(default="adamw", metadata={"help": "the optimizer"})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate", "gt": 0})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay (matrices only)"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    adam_eps: float = field(default=1e-8, metadata={"help": "AdamW epsilon"})
    momentum: float = field(default=0.0, metadata={"help": "SGD momentum"})
    grad_clip: float = field(default=1.0, metadata={"help": "clip the global grad norm to this; 0 = off", "ge": 0})
    warmup_steps: int = field(default=0, metadata={"help": "optimizer steps of linear warm-up"})
    schedule: Literal["constant", "cosine"] = field(
        default="constant", metadata={"help": "after warm-up: constant, or cosine decay to 10%"}
    )

    def __post_init__(self):
        check_typed(self, "optim")
        check_declared(self)


# What each optimizer reads of optim.* (its name aside); the schedule and the clipping are every optimizer's.
_EVERY_OPTIMIZER = ("lr", "weight_decay", "grad_clip", "warmup_steps", "schedule")
OPTIMIZER_OPTIONS = {"adamw": (*_EVERY_OPTIMIZER, "beta1", "beta2", "adam_eps"), "sgd": (*_EVERY_OPTIMIZER, "momentum")}
OPTIMIZER_SCOPE = OptionScope(
    "optimizer",
    "name",
    tuple(k for k in dotted_defaults(OptimConfig) if k != "name"),
    OPTIMIZER_OPTIONS,
    prefix="optim.",
)
declare(OptimConfig, [OPTIMIZER_SCOPE], ("name",))


# float16 starts its dynamic loss scale here (as torch.amp.GradScaler does)
FLOAT16_LOSS_SCALE = 2.0**16


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig):
    """AdamW or SGD; weight decay only on matrices (not norms, biases or 1-D parameters).  Low-precision
    trainable parameters get float32 master weights and moments (``MasterWeightsOptimizer``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    low = {p.dtype for p in params} - {torch.float32, torch.float64}
    if low:
        return MasterWeightsOptimizer(model, cfg, FLOAT16_LOSS_SCALE if torch.float16 in low else 1.0)
    return _optimizer_over([(p, p) for p in params], cfg)


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


def clip_grad_norm(model: torch.nn.Module, max_norm: float, optimizer=None) -> float:
    """Global grad norm before clipping (clipping skipped when ``max_norm`` is 0); with float32 masters
    (``MasterWeightsOptimizer``) the norm and the clipping are those of the masters' gradients."""
    if isinstance(optimizer, MasterWeightsOptimizer):
        norm = torch.nn.utils.get_total_norm(optimizer.master_grads())
        if max_norm > 0:
            torch.nn.utils.clip_grads_with_norm_([m for m in optimizer.masters if m.grad is not None], max_norm, norm)
        return float(norm)
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(torch.nn.utils.get_total_norm([p.grad for p in params]))


class MasterWeightsOptimizer:
    """AdamW/SGD on float32 master copies of low-precision (bfloat16/float16) parameters.

    The model keeps its parameters in low precision for the forward and backward passes; each
    step copies their gradients into float32 masters (divided by the loss scale), the inner
    optimizer updates the masters with float32 moments, and the parameters get the masters'
    values rounded back.  Without masters, a bfloat16 weight could not take an update smaller than
    2**-8 of itself and small learning rates would do nothing.

    float16 has a narrow exponent: the loss is multiplied by ``loss_scale`` before ``backward``
    (``backward_scaled``) so that small gradients do not underflow; a step whose gradients are not
    finite is skipped and the scale halved; after ``growth_interval`` good steps it doubles.
    """

    def __init__(self, model: torch.nn.Module, cfg: OptimConfig, loss_scale: float = 1.0, growth_interval: int = 1000):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.inner = _optimizer_over(list(zip(self.params, self.masters)), cfg)
        self.loss_scale, self.growth_interval, self.good_steps = loss_scale, growth_interval, 0
        self.skipped_steps = 0

    @property
    def param_groups(self):
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, m in zip(self.params, self.masters):
            p.grad = None
            m.grad = None

    def master_grads(self) -> list[torch.Tensor]:
        """float32 gradients of the masters (unscaled); computed from the parameters' on first call after backward."""
        for p, m in zip(self.params, self.masters):
            if m.grad is None and p.grad is not None:
                m.grad = p.grad.float() / self.loss_scale
        return [m.grad for m in self.masters if m.grad is not None]

    def step(self) -> bool:
        grads = self.master_grads()
        if self.loss_scale != 1.0 and not all(torch.isfinite(g).all() for g in grads):
            self.loss_scale, self.good_steps = self.loss_scale / 2, 0  # overflow: skip, retry smaller
            self.skipped_steps += 1
            return False
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters):
                p.copy_(m)
        self.good_steps += 1
        if self.loss_scale != 1.0 and self.good_steps % self.growth_interval == 0:
            self.loss_scale *= 2
        return True

    def state_dict(self) -> dict:
        return {
            "inner": self.inner.state_dict(),
            "masters": [m.detach() for m in self.masters],  # saved, not copied
            "loss_scale": self.loss_scale,
            "good_steps": self.good_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state["inner"])
        with torch.no_grad():
            for p, m, saved in zip(self.params, self.masters, state["masters"]):
                m.copy_(saved)
                p.copy_(saved)
        self.loss_scale, self.good_steps = state["loss_scale"], state["good_steps"]


def _optimizer_over(pairs: list[tuple[torch.nn.Parameter, torch.Tensor]], cfg: OptimConfig) -> torch.optim.Optimizer:
    """``cfg``'s optimizer over the second of each pair, decaying where the first is a matrix."""
    decay = [m for p, m in pairs if p.dim() >= 2]
    no_decay = [m for p, m in pairs if p.dim() < 2]
    groups = [
        g
        for g in ({"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0})
        if g["params"]
    ]
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps)


def backward_scaled(optimizer, loss: torch.Tensor) -> None:
    """``loss.backward()``, times the optimizer's loss scale where it has one (float16 masters)."""
    scale = getattr(optimizer, "loss_scale", 1.0)
    (loss * scale if scale != 1.0 else loss).backward()
