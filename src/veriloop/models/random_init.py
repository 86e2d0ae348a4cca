"""Small randomly initialised causal LMs of the common Hugging Face families, with a locally trained tokenizer.

Tests and benchmarks need models that look like the real ones to every piece of code that reads them (the
family's config fields, its cache layout, fused projections, soft-capping, an instruct model's chat template and
its two end tokens) yet build in a second on a CPU, without a model hub.  ``save_random_model`` writes an
ordinary ``save_pretrained`` directory (weights, config, generation_config, tokenizer) that
``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(..., local_files_only=True)`` load.

The tokenizer is a byte-level BPE (as GPT-2, Llama 3 and Qwen use) trained on the given texts, with the
ChatML special tokens of a Qwen-style instruct model: ``<|endoftext|>`` (the base model's end, and the padding),
``<|im_start|>`` and ``<|im_end|>`` (the end of a chat turn).  It adds no BOS or other token when encoding.

Same texts and seed -> the same tokenizer and bit-identical weights.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GenerationConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from veriloop.errors import InputError
from veriloop.io import atomic_write_json

ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "gpt2")
CONFIG_CLASSES = dict(
    llama=LlamaConfig,
    qwen2=Qwen2Config,
    qwen3=Qwen3Config,
    mistral=MistralConfig,
    gemma2=Gemma2Config,
    gemma3=Gemma3TextConfig,
    phi3=Phi3Config,
    gpt2=GPT2Config,
)

END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# Qwen2.5-Instruct's template without its default system prompt and tool calls.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Qwen2's split before the byte-level mapping: digits one at a time, words with their leading space.  Its exact
# pipeline (with NFC) because transformers 5 loads any directory whose config says model_type "qwen2" with
# ``Qwen2Tokenizer``, which rebuilds this pipeline whatever tokenizer.json says: another one would encode
# differently once reloaded.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Gemma 2 and 3 checkpoints all have sliding-window layers.  Their real window (4096) would never be reached by
# the short sequences of a test, leaving the sliding half of the cache untested; 32 tokens is crossed by a
# typical prompt plus completion.  Pass sliding_window=4096 for the real value.
TEST_SLIDING_WINDOW = 32


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int = 512, chat_template: str | None = "chatml", max_length: int = 512
) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts``: every byte is a token, then merges up to ``vocab_size`` tokens
    (fewer when the texts run out of pairs to merge).

    ``chat_template="chatml"``: an instruct tokenizer (ChatML template, EOS ``<|im_end|>``); ``None``: a base
    one (EOS ``<|endoftext|>``).  Padding is ``<|endoftext|>`` and goes on the left, as the sampler wants.
    """
    if chat_template not in ("chatml", None):
        raise InputError(f"chat_template must be 'chatml' or None, got {chat_template!r}")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise InputError(f"vocab_size must be at least {len(alphabet) + len(SPECIAL_TOKENS)} (bytes + specials)")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    # No prefix space and no post-processor: encoding a prompt adds nothing to it (no BOS), as with Qwen.
    split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    # The byte alphabet as the initial alphabet: any text encodes, even bytes the training texts lack.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(list(texts), trainer)  # a list: the trainer is deterministic over a fixed order
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END if chat_template else END_OF_TEXT,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, IM_END] if chat_template else None,
        chat_template=CHATML_TEMPLATE if chat_template else None,
        padding_side="left",
        model_max_length=max_length,
    )


def _check_shape(arch: str, hidden_size: int, num_heads: int, num_kv_heads: int) -> None:
    if arch not in ARCHITECTURES:
        raise InputError(f"unknown architecture {arch!r}; one of {', '.join(ARCHITECTURES)}")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise InputError(
            f"{arch}: hidden_size ({hidden_size}) must be a multiple of num_heads ({num_heads}), "
            f"and num_heads of num_kv_heads ({num_kv_heads})"
        )


def _gemma_fields(arch: str, head_dim: int, num_layers: int) -> dict:
    """Gemma's own fields: head_dim is a field of its own (and the attention scale's), a sliding window."""
    fields = dict(head_dim=head_dim, query_pre_attn_scalar=head_dim, sliding_window=TEST_SLIDING_WINDOW)
    if arch == "gemma3":
        # Gemma 3 makes every 6th layer global; a model of fewer layers would have none: make the last one global
        # so that the cache always mixes both kinds of layer, as in every real Gemma 3.
        fields["layer_types"] = [
            "full_attention" if (i + 1) % 6 == 0 or i == num_layers - 1 else "sliding_attention"
            for i in range(num_layers)
        ]
    return fields  # the soft-capping (Gemma 2: attention 50, final 30; Gemma 3: none) keeps its defaults


def config_for(
    arch: str,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 512,
    vocab_size: int = 512,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
    **overrides,
) -> PretrainedConfig:
    """The transformers config of a small ``arch`` model; ``overrides`` sets any other field of it.

    Sliding windows: Gemma 2 and 3 get ``TEST_SLIDING_WINDOW`` (every real checkpoint of theirs has one); Mistral
    and Qwen get none, as their current checkpoints.  Overrides change that: ``sliding_window=16`` (Mistral, Gemma),
    ``use_sliding_window=True, sliding_window=16, max_window_layers=0`` (Qwen: layers from max_window_layers on).
    """
    _check_shape(arch, hidden_size, num_heads, num_kv_heads)
    head_dim = hidden_size // num_heads
    ids = dict(bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=None, vocab_size=vocab_size)
    # pad_token_id stays None: as an embedding's padding_idx it would zero that token's row and freeze its
    # gradient, and the padding token is also the base model's EOS.  The pad id lives in generation_config.
    if arch == "gpt2":
        # No dropout (GPT-2 has 0.1): the learner's train-mode forward must give the sampler's log-probs.
        fields = dict(
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_inner=intermediate_size,
            n_positions=max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        return _make(GPT2Config, {**ids, **fields}, overrides)
    fields = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_positions,
    )
    if arch in ("llama", "qwen3", "mistral"):
        fields["head_dim"] = head_dim  # qwen3's default (128) would not follow hidden_size / num_heads
    if arch == "mistral":
        fields["sliding_window"] = None  # as Mistral 7B v0.2 on (the default, 4096, is v0.1's)
    if arch in ("gemma2", "gemma3"):
        fields.update(_gemma_fields(arch, head_dim, num_layers))
    if arch == "phi3":
        fields["original_max_position_embeddings"] = max_positions
    return _make(CONFIG_CLASSES[arch], {**ids, **fields}, overrides)


def _make(cls: type[PretrainedConfig], fields: dict, overrides: dict) -> PretrainedConfig:
    # The config classes take unknown keywords silently: a misspelt override would change nothing.
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise InputError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
    return cls(**{**fields, **overrides})


def _generation_config(tokenizer) -> GenerationConfig:
    """As Qwen2.5-Instruct's: an instruct model stops at ``<|im_end|>`` (the end of its turn) or at
    ``<|endoftext|>``; BOS (never prepended by the tokenizer) and padding are ``<|endoftext|>``."""
    end_of_text, eos = tokenizer.convert_tokens_to_ids(END_OF_TEXT), tokenizer.eos_token_id
    ends = [eos, end_of_text] if eos != end_of_text else eos
    return GenerationConfig(bos_token_id=end_of_text, eos_token_id=ends, pad_token_id=end_of_text)


def build_random_model(
    arch: str,
    tokenizer,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 512,
    vocab_size: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    jitter: float = 0.02,
    **overrides,
) -> PreTrainedModel:
    """A freshly initialised ``arch`` causal LM for ``tokenizer`` (in eval mode).

    ``vocab_size``: embedding rows, ``len(tokenizer)`` when None; more pads the embedding beyond the tokenizer
    (e.g. 150_000 for the memory and speed of a real vocabulary; those rows are random like the rest, so the model
    samples them, nearly always at that size, and they decode to nothing: not for tests that read the text).
    ``jitter``: see ``_jitter_constants``; 0 keeps transformers' initialisation as it is.
    ``overrides``: config fields (see ``config_for``).
    """
    rows = len(tokenizer) if vocab_size is None else vocab_size
    if rows < len(tokenizer):
        raise InputError(f"vocab_size {rows} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    generation = _generation_config(tokenizer)
    config = config_for(
        arch,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_positions=max_positions,
        vocab_size=rows,
        bos_token_id=generation.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,  # one id, as Qwen's config.json; generation_config lists both
        **overrides,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        # Built in float32 then cast: the same seed gives the same weights, rounded, in any dtype.
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _jitter_constants(model, jitter)
    model = model.to(dtype).eval()
    model.generation_config = generation
    return model


@torch.no_grad()
def _jitter_constants(model: torch.nn.Module, scale: float) -> None:
    """Add N(0, scale) noise to every parameter that transformers initialises to a constant: biases (0) and norm
    weights (1, or 0 for Gemma's ``1 + w``).  A trained model's are not constant; left so, code that dropped a
    bias or a norm's weight (a hand-written decode step, say) would give the same numbers and pass its tests."""
    if scale <= 0:
        return
    for param in model.parameters():
        if param.numel() and bool((param == param.flatten()[0]).all()):
            param.add_(torch.randn_like(param) * scale)


def save_random_model(
    directory: str | Path,
    arch: str,
    texts: Iterable[str],
    *,
    tokenizer_vocab_size: int = 512,
    chat_template: str | None = "chatml",
    **kw,
) -> Path:
    """Train the tokenizer on ``texts``, build the model (``kw``: ``build_random_model``'s) and ``save_pretrained``
    both into ``directory``, with the generation_config; returns the directory."""
    directory = Path(directory)
    tokenizer = train_bpe_tokenizer(texts, tokenizer_vocab_size, chat_template, max_length=kw.get("max_positions", 512))
    model = build_random_model(arch, tokenizer, **kw)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)  # writes generation_config.json too
    tokenizer.save_pretrained(directory)
    _name_tokenizer_class_for_4x(directory)
    return directory


def _name_tokenizer_class_for_4x(directory: Path) -> None:
    """transformers 5 writes ``TokenizersBackend`` as the tokenizer class; ``PreTrainedTokenizerFast`` means the
    same to 5.x and is the name 4.x (and the TRL or vLLM builds pinned to it) knows (as ``loading.save_policy``)."""
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        atomic_write_json(config_file, config)
