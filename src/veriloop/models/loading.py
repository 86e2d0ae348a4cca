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
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.models.batch import (
    HIDDEN_PATH_MODEL_TYPES,
    PolicyBatch,
    completion_hidden,
    completion_logits,
    logits_from_hidden,
)
from veriloop.models.device import Placement
from veriloop.models.lora import add_adapters, is_adapted, merged_copy, save_adapter
from veriloop.models.tiny import build_char_tokenizer, build_tiny_model
from veriloop.rollout.sampler import Generation, completion_text, generate
from veriloop.tasks.config import CHAT_TEMPLATE_MODES

BUILTIN_BASE = Path(__file__).resolve().parent.parent / "assets" / "base"


class PolicyLoadError(InputError):
    """The model directory or its tokenizer cannot be used as a policy."""


@dataclass(frozen=True)
class PromptFormat:
    """How a problem's prompt text becomes token ids.

    ``chat_template``: ``auto`` puts the prompt through the tokenizer's chat template when it has
    one (as the user turn, after ``system_prompt`` when one is given, with the generation prompt
    that opens the assistant's turn); ``none`` tokenizes the plain text.  The ids the sampler
    reads are the record's ``prompt_ids``: the learner scores exactly those, never re-tokenised text.
    """

    chat_template: str = "auto"
    system_prompt: str = ""

    def __post_init__(self):
        if self.chat_template not in CHAT_TEMPLATE_MODES:
            raise InputError(f"task.chat_template must be one of {CHAT_TEMPLATE_MODES}, got {self.chat_template!r}")

    def uses_template(self, tokenizer) -> bool:
        return self.chat_template == "auto" and bool(getattr(tokenizer, "chat_template", None))

    def check(self, tokenizer, where: str) -> None:
        """Refuse a system prompt that would be dropped (checked when the policy loads, before any run starts)."""
        if self.system_prompt and not self.uses_template(tokenizer):
            raise InputError(
                f"task.system_prompt needs a chat template, and the tokenizer of {where!r} has none "
                "(or task.chat_template is none)"
            )

    def encode(self, tokenizer, text: str) -> list[int]:
        if not self.uses_template(tokenizer):
            self.check(tokenizer, "this policy")
            return tokenizer(text).input_ids
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": text})
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(rendered, add_special_tokens=False).input_ids  # the template writes any BOS itself


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
    prompts: PromptFormat = field(default_factory=lambda: PromptFormat())

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Every token that ends a completion: the tokenizer's EOS and all of generation_config's
        (an instruct model may list several, e.g. ``<|im_end|>`` and ``<|endoftext|>``)."""
        listed = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        listed = [] if listed is None else [listed] if isinstance(listed, int) else list(listed)
        return tuple(dict.fromkeys([self.eos_id, *listed]))

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def encode_prompt(self, text: str) -> list[int]:
        return self.prompts.encode(self.tokenizer, text)

    def sample(
        self,
        prompt_ids: list[list[int]],
        params,
        *,
        generator: torch.Generator | None = None,
        n: int,
        stop_ids: tuple[int, ...] = (),
        row_seeds: list[int] | None = None,
    ) -> Generation:
        return generate(
            self.model,
            prompt_ids,
            params,
            eos_id=self.end_ids,
            pad_id=self.pad_id,
            generator=generator,
            row_seeds=row_seeds,
            n=n,
            stop_ids=stop_ids,
        )

    def completion_text(self, ids: list[int], finish_reason: str) -> str:
        return completion_text(self.tokenizer, ids, finish_reason)

    def completion_logits(self, batch: PolicyBatch) -> torch.Tensor:
        return completion_logits(self.model, batch)

    def completion_hidden(self, batch: PolicyBatch) -> torch.Tensor:
        """Final hidden states at the completion positions (the chunked LM head's input)."""
        if getattr(self.model.config, "model_type", None) not in HIDDEN_PATH_MODEL_TYPES:
            raise NotImplementedError(f"no hidden-state path for model_type {self.model.config.model_type!r}")
        return completion_hidden(self.model, batch)

    @property
    def has_hidden_path(self) -> bool:
        return getattr(getattr(self.model, "config", None), "model_type", None) in HIDDEN_PATH_MODEL_TYPES

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return logits_from_hidden(self.model, hidden)

    def plain_head(self) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(weight, bias) when the LM head is one plain ``nn.Linear`` and the logits are its output as they are
        (no soft-capping, no adapter on it): the fused log-prob kernel then multiplies them itself.  Else None."""
        head = self.model.get_output_embeddings()
        if type(head) is not torch.nn.Linear or getattr(self.model.config, "final_logit_softcapping", None):
            return None
        return head.weight, head.bias

    def save(self, path: str | Path) -> None:
        """A loadable directory; for a LoRA policy, the adapter and the tokenizer (``save_merged`` for both)."""
        save_policy(self.model, self.tokenizer, path)

    @property
    def adapted(self) -> bool:
        """Whether the model carries LoRA adapters (only they train; the base is the frozen reference)."""
        return is_adapted(self.model)

    def save_merged(self, path: str | Path) -> None:
        """``path``: the model a user deploys (a LoRA policy's adapters merged in), and ``path/adapter/``."""
        if not self.adapted:
            return self.save(path)
        save_policy(merged_copy(self.model), self.tokenizer, path)
        save_adapter(self.model, Path(path) / "adapter")

    def with_adapters(self, cfg, seed: int = 0) -> Policy:
        """This policy with fresh LoRA adapters (``models/lora.py``), initialised from ``seed``; only they train."""
        return Policy(add_adapters(self.model, cfg, seed), self.tokenizer, self.source, self.prompts)

    def frozen_copy(self) -> Policy:
        """An independent copy with gradients off (a reference or a behaviour snapshot)."""
        model = copy.deepcopy(self.model).eval()
        model.requires_grad_(False)
        return Policy(model, self.tokenizer, self.source, self.prompts)


def resolve_path(path: str) -> str:
    if path == "builtin:base":
        return str(BUILTIN_BASE)
    return path


def load_policy(
    path: str,
    seed: int = 0,
    init_config=None,
    *,
    placement: Placement | None = None,
    prompts: PromptFormat | None = None,
):
    """Load model + tokenizer from ``path`` (``placement``: device and dtype, default float32 on CPU),
    checking they fit together.

    ``builtin:init`` is a new tiny model (``init_config``: a ``TinyModelConfig``, default one if None)
    initialised from ``seed``.  A directory written by ``CandidatePolicy.save`` loads as a ``CandidatePolicy``.
    """
    placement, prompts = placement or Placement(), prompts or PromptFormat()
    if path == "builtin:init":
        tok = build_char_tokenizer(init_config.max_positions) if init_config is not None else build_char_tokenizer()
        model = build_tiny_model(tok, init_config, seed=seed).to(placement.device, placement.dtype)
        prompts.check(tok, path)
        return Policy(model, tok, path, prompts)
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
        model = AutoModelForCausalLM.from_pretrained(real, local_files_only=True, dtype=placement.dtype)
    except (OSError, ValueError) as e:
        raise PolicyLoadError(f"cannot load a causal LM from {real!r}: {e}") from None
    check_compatible(model, tok, real)
    prompts.check(tok, real)
    model.to(placement.device).eval()
    return Policy(model, tok, path, prompts)


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
