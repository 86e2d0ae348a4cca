"""``veriloop train --dry-run`` (and ``sft``): what a run will do, worked out from its config, the model's shapes
and the data, without sampling or updating anything and without making its run directory.

The quantities users get wrong by hand (docs/configuration.md#dry-run):

* per step: prompts ``B`` and completions ``B x G``; tokens, bounded by ``B x G x (longest prompt +
  sampling.max_new_tokens)``;
* per rollout batch: optimizer steps ``mu = update.inner_updates x update.mini_batches``, and micro-batches
  per optimizer step ``ceil(B x G / mini_batches / update.micro_batch_size)``;
* staleness: the policy versions between the one that sampled a batch and the one its last update starts
  from, ``rollout.lag x mu + mu - 1`` (0: fully on-policy);
* memory, an estimate in bytes (the formulas below, fp32 optimizer state as the learner keeps it): the learner's
  weights, gradients and AdamW moments, a float32 master copy when the weights are not float32, the KL
  reference's weights, and the activations of one micro-batch; the sampler's KV cache for every row of a step.
"""

from __future__ import annotations

import math

import torch

from veriloop.models.memory import DTYPE_BYTES, micro_batch_bytes, model_shapes
from veriloop.training.config import TrainConfig
from veriloop.training.run.preflight import resolve_micro_batch_size, sample_problems

__all__ = ["dry_run", "gib", "model_shapes", "plan"]


def gib(n: float) -> str:
    """A byte count in GiB (MiB under one GiB), for the dry runs' tables."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _memory(cfg: TrainConfig, policy, micro: int, length: int, rows_per_step: int) -> tuple[int, ...]:
    """(parameters, trained parameters, learner state bytes, KL reference bytes, activation bytes of one
    micro-batch, sampler KV cache bytes)."""
    upd, new = cfg.update, cfg.sampling.max_new_tokens
    params = sum(p.numel() for p in policy.model.parameters())
    trainable = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    s, shape = DTYPE_BYTES.get(cfg.dtype, 4), model_shapes(policy.model)
    # learner: weights, fp32 gradients and AdamW's two moments, a fp32 master copy of low-precision weights
    state = params * s + trainable * 4 * 3 + (trainable * 4 if s != 4 else 0)
    reference = params * s if cfg.kl.beta > 0 and not cfg.lora.enabled else 0
    # activations autograd keeps for one micro-batch (models/memory.py: the formula and its calibration)
    activations = micro_batch_bytes(shape, s, upd.gradient_checkpointing, micro, length, new)
    kv_cache = rows_per_step * length * shape["layers"] * 2 * shape["kv_dim"] * s
    return params, trainable, state, reference, activations, kv_cache


def plan(cfg: TrainConfig, policy=None, task=None) -> list[tuple[str, str]]:
    """(quantity, value) rows for ``cfg``; ``policy`` and ``task`` as ``Trainer`` takes them (built when None)."""
    from veriloop.training.trainer import Trainer

    task = task or cfg.task.build()
    policy = policy if policy is not None else Trainer._load_start(cfg)
    longest = max(len(policy.encode_prompt(p.prompt)) for p in sample_problems(task, cfg.seed))
    budgeted = cfg.update.micro_batch_size == 0
    cfg = resolve_micro_batch_size(cfg, policy, sample_problems(task, cfg.seed))
    b, g, new = cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.sampling.max_new_tokens
    rows_per_step, length = b * g, longest + new
    upd = cfg.update
    mu = upd.inner_updates * upd.mini_batches
    per_mini = math.ceil(rows_per_step / upd.mini_batches)
    micro = min(upd.micro_batch_size, per_mini)
    params, trainable, state, reference, activations, kv_cache = _memory(cfg, policy, micro, length, rows_per_step)
    shape = model_shapes(policy.model)
    staleness = cfg.rollout.lag * mu + mu - 1
    return [
        (
            "model",
            f"{cfg.policy}: {params / 1e6:.2f}M parameters ({trainable / 1e6:.2f}M trained), hidden "
            f"{shape['hidden']}, {shape['layers']} layers, vocabulary {shape['vocab']}, {cfg.dtype}",
        ),
        ("prompts per step (B)", str(b)),
        ("completions per step (B x G)", f"{rows_per_step} (group size {g})"),
        ("longest prompt", f"{longest} tokens (of the task's longest prompts)"),
        ("tokens per step, at most", f"{rows_per_step * length:,} (B x G x ({longest} + {new} new))"),
        (
            "optimizer steps per batch (mu)",
            f"{mu} (inner_updates {upd.inner_updates} x mini_batches {upd.mini_batches})",
        ),
        (
            "micro-batches per optimizer step",
            f"{math.ceil(per_mini / micro)} of up to {micro} rows"
            + (f" (what update.micro_batch_memory_mib {upd.micro_batch_memory_mib:g} holds)" if budgeted else ""),
        ),
        ("optimizer steps in the run", f"{cfg.steps * mu:,} ({cfg.steps} steps)"),
        (
            "staleness, in policy versions",
            f"up to {staleness} (lag {cfg.rollout.lag} x mu + mu - 1)" + (": on-policy" if staleness == 0 else ""),
        ),
        (
            "learner memory, estimated",
            f"{gib(state + reference + activations)}: weights, gradients and AdamW "
            f"{gib(state)}"
            + (f", KL reference {gib(reference)}" if reference else "")
            + f", activations of one micro-batch {gib(activations)}",
        ),
        (
            "sampler KV cache, estimated",
            f"{gib(kv_cache)} for {rows_per_step} rows of {length} tokens"
            if cfg.rollout.source == "policy"
            else f"none: nothing is sampled (rollout.source {cfg.rollout.source})",
        ),
        ("device", f"{cfg.device} ({'cuda' if torch.cuda.is_available() else 'cpu'} here)"),
    ]


def dry_run(cfg: TrainConfig) -> str:
    """The table ``veriloop train --dry-run`` prints."""
    rows = plan(cfg)
    width = max(len(k) for k, _ in rows)
    lines = [f"veriloop {cfg.algo} --dry-run: nothing is sampled or trained, no run directory is made", ""]
    return "\n".join(lines + [f"{k:<{width}}  {v}" for k, v in rows])
