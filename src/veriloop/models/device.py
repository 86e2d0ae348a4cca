"""Where a model lives and in what precision: ``--device`` and ``--dtype``.

* ``device``: ``auto`` (the first CUDA device when torch sees one, else the CPU), ``cpu``,
  ``cuda`` or ``cuda:N``.  Asking for a GPU that is not there is an error, never a silent CPU run.
* ``dtype``: ``float32``, ``bfloat16`` or ``float16`` for the weights of the policy, the reference
  and the sampler.  Whatever the weights, the maths that must be exact runs in float32: the
  log-softmax of the sampled tokens, ratios, advantages, KL and the loss reduction
  (``training/loop/logprobs.py`` casts the logits first), and the optimizer keeps float32 master
  weights and moments for low-precision parameters (``training/loop/optim.py``).
* TF32 matmuls are switched on for CUDA devices that have them (Ampere and newer): float32
  maths there runs on tensor cores with a 10-bit mantissa for the products, as in TRL and verl.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from veriloop.errors import InputError

DType = Literal["float32", "bfloat16", "float16"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` -> a device that exists on this machine."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device {name!r}: this torch build sees no CUDA device (use --device cpu or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return device


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise InputError(f"dtype must be one of {tuple(DTYPES)}, got {name!r}")
    return DTYPES[name]


def enable_tf32(device: torch.device) -> None:
    """TF32 matmuls and convolutions on GPUs with tensor cores for them (compute capability >= 8)."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@dataclass(frozen=True)
class Placement:
    """A resolved (device, dtype) pair; ``cpu``/``float32`` is the default and the tests' reference."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32

    @classmethod
    def of(cls, device: str = "auto", dtype: str = "float32") -> Placement:
        placement = cls(resolve_device(device), resolve_dtype(dtype))
        enable_tf32(placement.device)
        if placement.dtype == torch.bfloat16 and placement.device.type == "cuda":
            if not torch.cuda.is_bf16_supported():
                raise InputError(f"dtype bfloat16: device {placement.device} does not support it (use float16)")
        return placement

    def describe(self) -> dict:
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch.")}
