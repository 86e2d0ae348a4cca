"""The built-in tiny policy: a standard Llama with a character-level tokenizer.

Both are ordinary Hugging Face objects saved with ``save_pretrained``, so
``AutoModelForCausalLM`` / ``AutoTokenizer`` (and TRL or vLLM) load them from the
directory.  Nothing here touches a model hub.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Printable ASCII plus newline: enough for arithmetic traces and plain-text tasks.
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]


def build_char_tokenizer(max_length: int = 256) -> PreTrainedTokenizerFast:
    """One token per character; ``<bos>`` prepended; unknown characters map to ``<unk>``."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=max_length,
    )


@dataclass
class TinyModelConfig:
    """Shape of the built-in Llama (defaults give about 1.1M parameters)."""

    hidden_size: int = field(default=128, metadata={"help": "model width"})
    intermediate_size: int = field(default=512, metadata={"help": "MLP width"})
    num_layers: int = field(default=4, metadata={"help": "decoder layers"})
    num_heads: int = field(default=4, metadata={"help": "attention heads"})
    max_positions: int = field(default=256, metadata={"help": "longest prompt + completion, in tokens"})


def build_tiny_model(tokenizer: PreTrainedTokenizerFast, cfg: TinyModelConfig | None = None, seed: int = 0):
    """A freshly initialised ``LlamaForCausalLM`` sized for ``tokenizer``."""
    cfg = cfg or TinyModelConfig()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
