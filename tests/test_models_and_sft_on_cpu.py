"""The built-in model and tokenizer are plain transformers objects; SFT learns; the shipped base."""

import json
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from veriloop.config import build_config
from veriloop.models.loading import BUILTIN_BASE, load_policy
from veriloop.models.tiny import build_char_tokenizer, build_tiny_model
from veriloop.training.config import TrainConfig
from veriloop.training.recipes import SFT_COMMAND_DEFAULTS
from veriloop.training.trainer import Trainer


def test_char_tokenizer_round_trip():
    tok = build_char_tokenizer()
    ids = tok("(2+3)*4?").input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == 9
    assert tok.decode(ids, skip_special_tokens=True) == "(2+3)*4?"
    assert tok.decode(tok("answer=20", add_special_tokens=False).input_ids) == "answer=20"
    assert tok.convert_ids_to_tokens(tok("答", add_special_tokens=False).input_ids) == ["<unk>"]


def test_default_model_size():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok)
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 5_000_000
    assert type(model).__name__ == "LlamaForCausalLM"


def test_sft_learns_and_saves_a_loadable_model(tmp_path):
    cfg = build_config(
        TrainConfig,
        SFT_COMMAND_DEFAULTS,
        {
            "run_dir": str(tmp_path / "run"),
            "export": str(tmp_path / "export"),
            "steps": 60,
            "rollout.prompts_per_step": 32,
            "eval_every": 0,
            "model.hidden_size": 64,
            "model.intermediate_size": 128,
            "model.num_layers": 2,
            "model.num_heads": 2,
            "optim.warmup_steps": 10,
            "task.arithmetic.heldout_size": 10,
        },
    )
    Trainer(cfg, progress=False).train()
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10  # it learns the trace format
    for d in (tmp_path / "run" / "final", tmp_path / "export"):
        model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
        assert tok("1+1?").input_ids[0] == tok.bos_token_id and model.config.vocab_size >= len(tok)
    prov = json.loads((tmp_path / "export" / "veriloop_sft.json").read_text())
    assert prov["made_by"] == "veriloop sft" and prov["steps_done"] == 60


def test_shipped_base_is_small_and_loadable():
    size = sum(os.path.getsize(BUILTIN_BASE / f) for f in os.listdir(BUILTIN_BASE))
    assert size <= 10 * 1024 * 1024
    policy = load_policy("builtin:base")
    ids = torch.tensor([policy.tokenizer("(2+3)*4?").input_ids])
    out = policy.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=40,
        pad_token_id=policy.pad_id,
        eos_token_id=policy.eos_id,
    )
    text = policy.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert text.startswith("2+3=5;") and "answer=" in text
    prov = json.loads((BUILTIN_BASE / "veriloop_sft.json").read_text())
    assert prov["made_by"] == "veriloop sft"
