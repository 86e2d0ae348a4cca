"""Resumable checkpoints: ``checkpoints/step-N/`` written whole or not at all, and checked before use.

Each holds the learner's state (``Learner.save``: ``model/``, ``save_pretrained``'s safetensors
weights, config and tokenizer; ``optimizer.pt``), ``rng.pt`` (torch and Python RNG states) and
``trainer_state.json``; and, where the run has them, ``critic.pt``, ``reference/`` (after an
iterative-RL reset), ``pending/`` (batches sampled ahead with ``rollout.lag``) and ``ledger.jsonl``
(the rollout ledger as of this step, ``rollout/ledger.py``).  Last comes ``manifest.json``: every
other file's relative path, size and SHA-256.

The directory is built under a temporary name (``.step-N.tmp``), every file and directory in it is
fsync'ed, the manifest written, and only then is it renamed into place (and ``checkpoints/`` fsync'ed),
so a kill or power loss mid-write leaves the previous checkpoint as the latest; older checkpoints are
pruned (``keep_checkpoints``) only after that.  Resuming (``run_dir.open_run_dir``) removes what a kill left
behind (``.step-N.tmp``, hidden ``.*.tmp`` files), takes the latest checkpoint that matches its
manifest (a damaged one is named, with its first bad file, and set aside as ``.step-N.damaged``), and
when there is none starts the run over from step 0 in the same directory.  A pruned checkpoint is renamed
``.step-N.old`` before it is removed, so a kill mid-removal leaves nothing under a checkpoint's name.
Checkpoints of versions before manifests are loaded unverified, with a warning.

Each checkpoint also holds the run's resolved config (``config.yaml``) and its ``metrics.jsonl`` as of its
step, which resuming checks against (``run_dir.py``: a resumed run is the same run).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import yaml

from veriloop.errors import InputError
from veriloop.io import (
    atomic_write_bytes,
    atomic_write_json,
    fsync_dir,
    fsync_file,
    step_name,
    steps_in,
)
from veriloop.rollout.records import RecordStore

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# What a run writes into its directory as it goes (besides config.yaml and checkpoints/); a run started over
# from step 0 discards these.  Trackers' folders (tensorboard/, wandb/, mlruns/) are left alone, as on any resume.
RUN_OUTPUTS = ("metrics.jsonl", "ledger.jsonl", "rollouts", "prm", "final")
CONFIG, HISTORY, METRICS = "config.yaml", "history.jsonl", "metrics.jsonl"


@dataclass
class RunState:
    step: int = 0  # last completed step
    policy_version: int = 0  # optimizer steps applied since the starting policy
    kl_beta: float = 0.0  # the KL weight now (an adaptive controller moves it)
    reference_step: int = 0  # step at which the reference was last reset to the policy (0 = never)


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / step_name(step)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoints (renamed into place, with their trainer state), oldest first; not verified."""
    return [p for _, p in steps_in(run_dir / "checkpoints") if p.is_dir() and (p / "trainer_state.json").is_file()]


def find_latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------------- manifests


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()  # chunked reads


def write_manifest(directory: Path) -> None:
    """fsync every file and directory under ``directory``, then write ``manifest.json`` (path, size, SHA-256 of
    every other file) and fsync it: a checkpoint is renamed into place only after this."""
    entries = []
    for path in sorted(directory.rglob("*")):
        if path.is_dir() or path.name == MANIFEST:
            continue
        fsync_file(path)
        entries.append(
            {"path": path.relative_to(directory).as_posix(), "size": path.stat().st_size, "sha256": _sha256(path)}
        )
    for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
        fsync_dir(sub)
    atomic_write_json(directory / MANIFEST, {"format": MANIFEST_FORMAT, "files": entries})  # fsyncs it and its dir


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_checkpoint(path: Path) -> tuple[str, str]:
    """``("ok", "")`` when every file the manifest lists is there with its size and SHA-256; ``("unverified",
    why)`` for a checkpoint of an older veriloop (no manifest, and its trainer state names none); else
    ``("bad", what)``: the first bad file and what is wrong with it."""
    manifest = _read_json(path / MANIFEST)
    if manifest is None:
        state = _read_json(path / "trainer_state.json")
        if not isinstance(state, dict):
            what = "missing" if not (path / "trainer_state.json").exists() else "unreadable"
            return "bad", f"trainer_state.json is {what} and there is no {MANIFEST}"
        if "manifest" in state:  # written with one: it was lost or damaged
            return "bad", f"{MANIFEST} is {'unreadable' if (path / MANIFEST).exists() else 'missing'}"
        return "unverified", f"no {MANIFEST} (written by a veriloop before checkpoint manifests)"
    try:
        files = [(str(e["path"]), int(e["size"]), str(e["sha256"])) for e in manifest["files"]]
    except (KeyError, TypeError, ValueError):
        return "bad", f"{MANIFEST} is unreadable (not a list of files with path, size and sha256)"
    if not any(name == "trainer_state.json" for name, _, _ in files):
        return "bad", f"{MANIFEST} does not list trainer_state.json"
    for name, size, _ in files:  # sizes first: a truncated file is found without hashing the others
        f = path / name
        if not f.is_file():
            return "bad", f"{name} is missing"
        if f.stat().st_size != size:
            return "bad", f"{name} has {f.stat().st_size} bytes, the manifest says {size}"
    for name, _, digest in files:
        if _sha256(path / name) != digest:
            return "bad", f"{name} does not match its SHA-256 in the manifest"
    return "ok", ""


def find_resumable_checkpoint(run_dir: Path) -> Path | None:
    """The latest checkpoint that passes ``check_checkpoint``; each newer one that fails is named with its first
    bad file and set aside as ``checkpoints/.step-N.damaged`` (out of every later listing), then the one before
    it is tried.  A checkpoint without a manifest (an older veriloop's) is taken with a warning."""
    for _, path in reversed(steps_in(run_dir / "checkpoints")):
        if not path.is_dir():
            continue
        status, why = check_checkpoint(path)
        if status == "ok":
            return path
        if status == "unverified":
            log.warning(f"checkpoint {path}: {why}; loading it unverified")
            return path
        aside = path.with_name(f".{path.name}.damaged")
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(path, aside)
        fsync_dir(path.parent)
        log.warning(f"checkpoint {path} is damaged: {why}; set aside as {aside.name}, trying the one before it")
    return None


# ---------------------------------------------------------------------------------------------------- config files


def config_bytes(config: dict) -> bytes:
    """config.yaml's bytes: the same config always gives the same bytes (so copies can be compared whole)."""
    return yaml.safe_dump(config, sort_keys=False).encode("utf-8")


def flatten(config: dict, prefix: str = "") -> dict:
    """``{"kl": {"beta": 0.1}}`` -> ``{"kl.beta": 0.1}``: every leaf under its dotted key."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---------------------------------------------------------------------------------------------------- save, load


def save_checkpoint(
    run_dir: Path,
    state: RunState,
    learner,
    keep: int,
    *,
    reference=None,
    pending: list | None = None,
    ledger=None,
    config: dict | None = None,
) -> Path:
    """Learner (weights, optimizer), RNG, trainer state; the critic, a reset reference and batches in flight if any;
    the run's resolved ``config`` and its metrics.jsonl (the rows of the steps done), which a resume checks against.

    Built in ``.step-N.tmp``, fsync'ed with its manifest, renamed into place; only then are older checkpoints
    beyond ``keep`` removed, so the last good one is never gone before the new one is durable."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    learner.save(tmp)  # and critic.pt, the critic's model and optimizer, where the run has one: the learner owns them
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    if reference is not None:
        reference.save(tmp / "reference")
    if pending:
        RecordStore(tmp / "pending").write_batches(pending)
    if ledger is not None:
        ledger.save(tmp)
    if config is not None:
        atomic_write_bytes(tmp / CONFIG, config_bytes(config))
    if (run_dir / METRICS).is_file():
        shutil.copyfile(run_dir / METRICS, tmp / METRICS)
    # "manifest": checkpoints written with one say so, so that a lost manifest.json is told from an old checkpoint
    atomic_write_json(tmp / "trainer_state.json", {**asdict(state), "manifest": MANIFEST})
    write_manifest(tmp)
    replaced = None
    if final.exists():  # this step's checkpoint from an earlier attempt: set aside until the new one is in place
        replaced = final.with_name(f".{final.name}.old")
        if replaced.exists():
            shutil.rmtree(replaced)
        os.replace(final, replaced)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    if replaced is not None:
        shutil.rmtree(replaced)
    complete = set(list_checkpoints(run_dir))
    older = [p for s, p in steps_in(final.parent) if s < state.step and p in complete]
    for old in older[: max(len(older) - (keep - 1), 0)]:
        # renamed out of the listings first: a kill mid-removal leaves a hidden .step-N.old (cleared on resume), not
        # a half checkpoint under its name that no listing counts as complete, so no later prune would remove it
        doomed = old.with_name(f".{old.name}.old")
        if doomed.exists():
            shutil.rmtree(doomed)
        os.replace(old, doomed)
        shutil.rmtree(doomed)
    return final


def _load_data(file: Path):
    """A ``.pt`` file of a run directory read as data only (tensors, numbers, strings, containers): a run
    directory may be someone else's, and a full unpickle would run any code it holds."""
    try:
        return torch.load(file, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise InputError(
            f"{file} holds more than tensors and plain values, so it is not read (a run directory "
            f"is read as data only): {str(e).splitlines()[0][:200]}"
        ) from None


def load_checkpoint(path: Path, learner, reference=None, pending=None) -> RunState:
    saved = json.loads((path / "trainer_state.json").read_text())
    state = RunState(**{f.name: saved[f.name] for f in fields(RunState) if f.name in saved})
    learner.load(path)
    rng = _load_data(path / "rng.pt")
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if learner.critic is not None:
        learner.load_critic_state_dict(_load_data(path / "critic.pt"))
    if reference is not None and (path / "reference").is_dir():
        from veriloop.models.loading import load_policy

        reference.model.load_state_dict(load_policy(str(path / "reference")).model.state_dict())
    if pending is not None and (path / "pending").is_dir():
        pending.extend(RecordStore(path / "pending").read_batches())
    return state
