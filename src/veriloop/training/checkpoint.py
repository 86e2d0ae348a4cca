"""Resumable checkpoints: ``checkpoints/step-N/`` written whole or not at all.

Each holds ``model/`` (``save_pretrained``: safetensors weights, config, tokenizer),
``optimizer.pt`` (AdamW state), ``rng.pt`` (torch and Python RNG states) and
``trainer_state.json``.  The directory is built under a temporary name and renamed
into place, so a crash mid-write leaves the previous checkpoint as the latest.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from veriloop.io import atomic_write_json
from veriloop.models.loading import Policy, save_policy


@dataclass
class RunState:
    step: int = 0  # last completed step
    policy_version: int = 0  # optimizer steps applied since the starting policy


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    done = [p for p in root.glob("step-*") if p.is_dir() and (p / "trainer_state.json").is_file()]
    return sorted(done, key=lambda p: int(p.name[5:]))


def find_latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(
    run_dir: Path, state: RunState, policy: Policy, optimizer: torch.optim.Optimizer, keep: int
) -> Path:
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_policy(policy.model, policy.tokenizer, tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    atomic_write_json(tmp / "trainer_state.json", asdict(state))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def load_checkpoint(path: Path, optimizer: torch.optim.Optimizer) -> RunState:
    state = RunState(**json.loads((path / "trainer_state.json").read_text()))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return state
