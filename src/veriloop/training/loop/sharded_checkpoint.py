"""Sharded, resumable checkpoints for the fsdp2 learner (``torch.distributed.checkpoint``), and the full export.

Every fsdp2 rank writes its own shards of the model and of the optimizer state into ``<checkpoint>/sharded/``
(DCP's ``.distcp`` files and ``.metadata``): no rank gathers the whole state and nothing passes through the
controller.  Loading reads the same files at ANY world size (DCP reshards on read), into fsdp2 ranks or, with
``distributed=False``, into one process (the local learner, each ddp rank).  ``export_full`` writes a Hugging Face
``save_pretrained`` directory of the full model from the shards, on demand (``veriloop export``).

Resume at the same world size is bit for bit on CPU (the bytes written are the bytes read); at another world size the
weights and moments are the same bytes, and the steps after differ by the order of the gradient sums.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

SHARDED = "sharded"


def _state(model: torch.nn.Module, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    # keyed by parameter name (not index): a reader with other ranks, or none, finds each tensor by name
    return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)}


def save_sharded(model: torch.nn.Module, optimizer, path: Path) -> None:
    """Every rank calls this (a collective): its shards of the weights and optimizer state into ``path``."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(model, optimizer), checkpoint_id=str(path))


def load_sharded(model: torch.nn.Module, optimizer, path: Path, distributed: bool = True) -> None:
    """``save_sharded``'s files into ``model`` and ``optimizer`` (fsdp2 ranks at any world size, or one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    if not (Path(path) / ".metadata").is_file():
        raise FileNotFoundError(f"{path}: no sharded checkpoint here (its .metadata is missing)")
    state = _state(model, optimizer)  # the targets, with the optimizer's moments initialised to be read into
    with warnings.catch_warnings():  # no process group is the point of distributed=False
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), no_dist=not distributed)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"])


def read_weights(model_dir: Path, model: torch.nn.Module) -> dict:
    """The full tensors of a ``model/`` directory (``save_pretrained``), by this model's trainable names."""
    from veriloop.models.loading import load_policy

    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if any("lora_" in n for n in trainable):
        raise ValueError(
            f"{model_dir}: an fsdp2 LoRA learner resumes from a checkpoint an fsdp2 run wrote (sharded/); this one "
            "has only model/ and optimizer.pt"
        )
    saved = load_policy(str(model_dir)).model.state_dict()
    return {n: t for n, t in saved.items() if n in trainable}


def sharded_model_state(path: Path) -> dict:
    """The full model tensors of a sharded checkpoint, in this process (no process group)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = dcp.FileSystemReader(str(path)).read_metadata()
    state = {
        key: torch.empty(m.size, dtype=m.properties.dtype)
        for key, m in meta.state_dict_metadata.items()
        if key.startswith("model.") and isinstance(m, TensorStorageMetadata)
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), no_dist=True)
    return {key.removeprefix("model."): t for key, t in state.items()}


SKELETON = "weights.json"  # in a model/ without weights: where they are


def save_skeleton(policy, directory: Path) -> None:
    """A ``model/`` with the config and tokenizer only (learner.controller_weights none: the weights are shards)."""
    from veriloop.io import atomic_write_json

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    policy.model.config.save_pretrained(directory)
    policy.tokenizer.save_pretrained(directory)
    atomic_write_json(directory / SKELETON, {"weights": f"../{SHARDED}", "export": "veriloop export CHECKPOINT"})


def _skeleton_policy(model_dir: Path):
    """A model from a skeleton's config (weights uninitialised: the shards fill them) and its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from veriloop.models.loading import Policy

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "dtype", None) or torch.float32)
    return Policy(model, AutoTokenizer.from_pretrained(model_dir, local_files_only=True), str(model_dir))


def export_full(checkpoint: Path, out: Path) -> Path:
    """A ``save_pretrained`` directory of the full model from a checkpoint's shards (config and tokenizer from its
    ``model/``, the weights from ``sharded/``)."""
    from veriloop.models.loading import load_policy

    checkpoint, out = Path(checkpoint), Path(out)
    if not (checkpoint / SHARDED).is_dir():
        raise FileNotFoundError(f"{checkpoint}: no {SHARDED}/ (a checkpoint an fsdp2 learner wrote)")
    model_dir = checkpoint / "model"
    policy = _skeleton_policy(model_dir) if (model_dir / SKELETON).is_file() else load_policy(str(model_dir))
    weights = sharded_model_state(checkpoint / SHARDED)
    missing = [n for n, p in policy.model.named_parameters() if p.requires_grad and n not in weights]
    if missing:
        raise ValueError(f"{checkpoint / SHARDED}: no shards of {missing[:3]} ({len(missing)} tensors)")
    with torch.no_grad():
        params = dict(policy.model.named_parameters())
        for name, value in weights.items():
            if name in params:
                params[name].copy_(value)
    policy.save(out)
    return out
