"""Load any local causal LM + tokenizer, with checks that fail early and say why.

``path`` is a directory written by ``save_pretrained`` (config.json, weights,
tokenizer files) or one of the built-in names:

* ``builtin:base``: the SFT'd base shipped in ``veriloop/assets/base`` (made by ``veriloop sft``);
* ``builtin:init``: a freshly initialised tiny Llama with the character tokenizer.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.models.batch import PolicyBatch, completion_logits
from veriloop.models.tiny import build_char_tokenizer, build_tiny_model
from veriloop.rollout.sampler import Generation, completion_text, generate

BUILTIN_BASE = Path(__file__).resolve().parent.parent / "assets" / "base"


class PolicyLoadError(InputError):
    """The model directory or its tokenizer cannot be used as a policy."""


@dataclass
class Policy:
    """A causal LM and its tokenizer, seen by the trainer through five operations.

    ``encode_prompt`` / ``sample`` / ``completion_text`` produce records;
    ``completion_logits`` is the learner's forward pass; ``save`` writes a loadable directory.
    ``CandidatePolicy`` (exact mode) implements the same five over a fixed list of answers.
    """

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    source: str  # what was asked for (path or builtin name)

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def encode_prompt(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids

    def sample(self, prompt_ids: list[list[int]], params, *, generator: torch.Generator | None = None, n: int,
               stop_ids: tuple[int, ...] = (), row_seeds: list[int] | None = None) -> Generation:  # fmt: skip
        return generate(self.model, prompt_ids, params, eos_id=self.eos_id, pad_id=self.pad_id, generator=generator,
                        row_seeds=row_seeds, n=n, stop_ids=stop_ids)  # fmt: skip

    def completion_text(self, ids: list[int], finish_reason: str) -> str:
        return completion_text(self.tokenizer, ids, finish_reason)

    def completion_logits(self, batch: PolicyBatch) -> torch.Tensor:
        return completion_logits(self.model, batch)

    def save(self, path: str | Path) -> None:
        save_policy(self.model, self.tokenizer, path)

    def frozen_copy(self) -> Policy:
        """An independent copy with gradients off (a reference or a behaviour snapshot)."""
        model = copy.deepcopy(self.model).eval()
        model.requires_grad_(False)
        return Policy(model, self.tokenizer, self.source)


def resolve_path(path: str) -> str:
    if path == "builtin:base":
        return str(BUILTIN_BASE)
    return path


def load_policy(path: str, seed: int = 0, init_config=None):
    """Load model + tokenizer from ``path`` in float32 on CPU, checking they fit together.

    ``builtin:init`` is a new tiny model (``init_config``: a ``TinyModelConfig``, default one if None)
    initialised from ``seed``.  A directory written by ``CandidatePolicy.save`` loads as a ``CandidatePolicy``.
    """
    if path == "builtin:init":
        tok = build_char_tokenizer(init_config.max_positions) if init_config is not None else build_char_tokenizer()
        return Policy(build_tiny_model(tok, init_config, seed=seed), tok, path)
    real = resolve_path(path)
    if not os.path.isdir(real):
        hint = " (the shipped base is missing: remake it with `make base`)" if path == "builtin:base" else ""
        raise PolicyLoadError(f"policy path {real!r} is not a directory{hint}")
    if os.path.isfile(os.path.join(real, "candidates.json")):
        from veriloop.models.candidates import CandidatePolicy

        return CandidatePolicy.load(real)
    if not os.path.isfile(os.path.join(real, "config.json")):
        raise PolicyLoadError(f"policy path {real!r} has no config.json (expected a save_pretrained directory)")
    try:
        tok = AutoTokenizer.from_pretrained(real, local_files_only=True)
    except (OSError, ValueError) as e:
        raise PolicyLoadError(f"cannot load a tokenizer from {real!r}: {e}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(real, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise PolicyLoadError(f"cannot load a causal LM from {real!r}: {e}") from None
    check_compatible(model, tok, real)
    model.eval()
    return Policy(model, tok, path)


def save_policy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> None:
    """``save_pretrained`` both, readable by transformers 4.x and 5.x alike.

    transformers 5 names fast tokenizers ``TokenizersBackend`` in tokenizer_config.json;
    ``PreTrainedTokenizerFast`` means the same to 5.x and is the name 4.x (and the TRL or
    vLLM builds pinned to it) knows.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        atomic_write_json(config_file, config)


def check_compatible(model: torch.nn.Module, tok: PreTrainedTokenizerBase, where: str) -> None:
    vocab = model.get_input_embeddings().num_embeddings
    if len(tok) > vocab:
        raise PolicyLoadError(
            f"tokenizer/model mismatch in {where!r}: the tokenizer has {len(tok)} tokens "
            f"but the model's embedding has only {vocab} rows"
        )
    if tok.eos_token_id is None:
        raise PolicyLoadError(f"tokenizer in {where!r} has no eos_token; completions could never end")
    if tok.pad_token_id is None:
        # Any id works as padding because padded positions are masked; reuse EOS.
        tok.pad_token = tok.eos_token
