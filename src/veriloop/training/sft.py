"""Supervised fine-tuning on the task's teacher traces (the cold start).

Loss: token-mean cross-entropy over completion tokens (EOS included); prompt tokens
are context only.  Data is drawn afresh every step from the task's train split and
written by the task's teacher, noisy-teacher settings included.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.io import atomic_write_json, atomic_write_jsonl, atomic_write_yaml
from veriloop.models.batch import build_policy_batch, completion_logits
from veriloop.models.loading import Policy, load_policy, save_policy
from veriloop.models.tiny import build_char_tokenizer, build_tiny_model
from veriloop.training.config import to_dict
from veriloop.training.optim import build_optimizer, clip_grad_norm, lr_at, set_lr
from veriloop.training.run_config import SFTConfig


def sft_loss(model: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]], pad_id: int):
    """Token-mean negative log-likelihood of the completions; returns (loss, tokens)."""
    batch = build_policy_batch(prompts, completions, pad_id)
    logits = completion_logits(model, batch)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.completion_ids, reduction="none")  # [N, Tc]
    tokens = batch.completion_mask.sum()
    return (nll * batch.completion_mask).sum() / tokens, int(tokens)


def _initial_policy(cfg: SFTConfig) -> Policy:
    if cfg.policy == "builtin:init":
        tok = build_char_tokenizer(cfg.model.max_positions)
        return Policy(build_tiny_model(tok, cfg.model, seed=cfg.seed), tok, "builtin:init")
    return load_policy(cfg.policy)


def _has_validation(cfg: SFTConfig) -> bool:
    return cfg.task.name != "jsonl" or bool(cfg.task.validation_data)


def run_sft(cfg: SFTConfig, progress: bool = True) -> dict:
    """Train, evaluate periodically, save the final model; returns the final metrics row."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task = cfg.task.build()
    if not hasattr(task, "teacher_completion"):
        raise ValueError(f"task {cfg.task.name!r} has no teacher traces to fine-tune on")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_yaml(run_dir / "config.yaml", to_dict(cfg))
    torch.manual_seed(cfg.seed)
    policy = _initial_policy(cfg)
    model, tok = policy.model, policy.tokenizer
    model.train()
    optimizer = build_optimizer(model, cfg.optim)
    rng = random.Random(cfg.seed)
    # periodic monitoring reads validation (never the held-out set); a dataset without one is not monitored
    validation = task.validation()[: cfg.eval_problems] if cfg.eval_every and _has_validation(cfg) else []
    eval_cfg = EvalConfig(n_samples=0)
    metrics: list[dict] = []
    start = time.time()
    # With a time budget the step count is only a cap: show rate and elapsed time, not a fake ETA.
    bar = tqdm(
        desc="sft", unit="step", disable=not progress, dynamic_ncols=True, total=None if cfg.max_minutes else cfg.steps
    )
    row: dict = {}
    for step in range(cfg.steps):
        lr = lr_at(step, cfg.steps, cfg.optim)
        set_lr(optimizer, lr)
        problems = task.train_batch(cfg.batch_size, rng)
        prompts = [tok(p.prompt).input_ids for p in problems]
        completions = [
            tok(task.teacher_completion(p, rng), add_special_tokens=False).input_ids + [tok.eos_token_id]
            for p in problems
        ]
        loss, tokens = sft_loss(model, prompts, completions, tok.pad_token_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = clip_grad_norm(model, cfg.optim.grad_clip)
        optimizer.step()
        elapsed = time.time() - start
        row = {
            "step": step + 1,
            "loss": float(loss.detach()),
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": tokens,
            "elapsed_s": round(elapsed, 2),
        }
        last = step + 1 == cfg.steps or (cfg.max_minutes and elapsed > cfg.max_minutes * 60)
        if cfg.eval_every and ((step + 1) % cfg.eval_every == 0 or last) and validation:
            result = evaluate(Policy(model, tok, "training"), validation, cfg.task.eval_verifiers(), eval_cfg)
            model.train()
            row["validation_greedy_accuracy"] = result.greedy_accuracy
            if result.wrong_steps_rate is not None:
                row["validation_wrong_steps_rate"] = result.wrong_steps_rate
            bar.write(
                f"step {step + 1}: loss {float(loss.detach()):.4f}, "
                f"validation greedy accuracy {result.greedy_accuracy:.3f}"
            )
        metrics.append(row)
        if len(metrics) % 100 == 0:
            atomic_write_jsonl(run_dir / "metrics.jsonl", metrics)
        bar.set_postfix(loss=f"{float(loss.detach()):.4f}", lr=f"{lr:.2e}")
        bar.update(1)
        if last:
            break
    bar.close()
    atomic_write_jsonl(run_dir / "metrics.jsonl", metrics)
    model.eval()
    provenance = {
        "made_by": "veriloop sft",
        "config": to_dict(cfg),
        "steps_done": row.get("step", 0),
        "wall_time_s": round(time.time() - start, 1),
        "final": row,
    }
    targets = [run_dir / "model"] + ([Path(cfg.export)] if cfg.export else [])
    for target in targets:
        save_policy(model, tok, target)
        atomic_write_json(target / "veriloop_sft.json", provenance)
    return row
