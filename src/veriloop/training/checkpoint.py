"""Resumable checkpoints: ``checkpoints/step-N/`` written whole or not at all.

Each holds the learner's state (``Learner.save``: ``model/``, ``save_pretrained``'s safetensors
weights, config and tokenizer; ``optimizer.pt``), ``rng.pt`` (torch and Python RNG states) and
``trainer_state.json``; and, where the run has them, ``critic.pt``, ``reference/`` (after an
iterative-RL reset), ``pending/`` (batches sampled ahead with ``rollout.lag``) and ``ledger.jsonl``
(the rollout ledger as of this step, ``rollout/ledger.py``).  The directory
is built under a temporary name and renamed into place, so a crash mid-write leaves the previous
checkpoint as the latest.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from veriloop.errors import InputError
from veriloop.io import atomic_write_json, atomic_write_yaml, step_name, steps_in
from veriloop.rollout.records import RecordStore


@dataclass
class RunState:
    step: int = 0  # last completed step
    policy_version: int = 0  # optimizer steps applied since the starting policy
    kl_beta: float = 0.0  # the KL weight now (an adaptive controller moves it)
    reference_step: int = 0  # step at which the reference was last reset to the policy (0 = never)


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / step_name(step)


def list_checkpoints(run_dir: Path) -> list[Path]:
    return [p for _, p in steps_in(run_dir / "checkpoints") if p.is_dir() and (p / "trainer_state.json").is_file()]


def find_latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def open_run_dir(run_dir: Path, config: dict, resume: bool) -> Path | None:
    """The checkpoint to resume from (resume), or a new run: refuse a directory that holds one, write config.yaml."""
    if resume:
        checkpoint = find_latest_checkpoint(run_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"nothing to resume in {str(run_dir)!r}: no complete checkpoint")
        return checkpoint
    if (run_dir / "metrics.jsonl").exists() or list_checkpoints(run_dir):
        raise InputError(
            f"run directory {str(run_dir)!r} already holds a run; continue it with "
            f"`veriloop train --resume {run_dir}` or choose another --run_dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_yaml(run_dir / "config.yaml", config)
    return None


def save_checkpoint(run_dir: Path, state: RunState, learner, keep: int, *, critic=None, reference=None,
                    pending: list | None = None, ledger=None) -> Path:  # fmt: skip
    """Learner (weights, optimizer), RNG, trainer state; the critic, a reset reference and batches in flight if any."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    learner.save(tmp)
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    if critic is not None:
        torch.save(critic.state_dict(), tmp / "critic.pt")
    if reference is not None:
        reference.save(tmp / "reference")
    if pending:
        RecordStore(tmp / "pending").write_batches(pending)
    if ledger is not None:
        ledger.save(tmp)
    atomic_write_json(tmp / "trainer_state.json", asdict(state))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return final


def load_checkpoint(path: Path, learner, critic=None, reference=None, pending=None) -> RunState:
    state = RunState(**json.loads((path / "trainer_state.json").read_text()))
    learner.load(path)
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if critic is not None:
        critic.load_state_dict(torch.load(path / "critic.pt", weights_only=False))
    if reference is not None and (path / "reference").is_dir():
        from veriloop.models.loading import load_policy

        reference.model.load_state_dict(load_policy(str(path / "reference")).model.state_dict())
    if pending is not None and (path / "pending").is_dir():
        pending.extend(RecordStore(path / "pending").read_batches())
    return state
