"""A Bradley-Terry reward model: a causal-LM backbone with a scalar head read at the completion's last token.

``r(x, y) = w . h_T + b`` where ``h_T`` is the backbone's last hidden state at the last token of prompt + completion.
Under Bradley-Terry, ``P(y_c preferred to y_r | x) = sigmoid(r(x, y_c) - r(x, y_r))``, so training minimises
``-log sigmoid(r_c - r_r)`` over the pairs (``bradley_terry_loss``); only differences of r are learned, so a reward
is meaningful against another completion of the same prompt (what a group-relative estimator or a DPO pair reads),
not as an absolute number.  A saved reward model is a directory: the backbone (``save_pretrained``, loadable on its
own), ``rm_head.safetensors`` and ``rm.json`` (training settings and metrics).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.models.loading import Policy, load_policy, save_policy
from veriloop.models.value_head import ValueHead, right_padded_hidden


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """``mean(-log sigmoid(r_c - r_r))`` over the pairs (``logsigmoid``: no overflow at large margins)."""
    return -torch.nn.functional.logsigmoid(chosen - rejected).mean()


class RewardModel(torch.nn.Module):
    """``backbone`` is a ``Policy`` (causal LM + tokenizer); the head is one linear unit, zero at the start."""

    def __init__(self, backbone: Policy, meta: dict | None = None):
        super().__init__()
        self.policy, self.backbone = backbone, backbone.model
        self.head = ValueHead(self.backbone.config.hidden_size)
        self.meta = dict(meta or {})

    def encode(self, prompt: str, completion: str) -> list[int]:
        ids = self.policy.encode_prompt(prompt)
        return ids + (self.policy.tokenizer(completion, add_special_tokens=False).input_ids if completion else [])

    def rewards(self, sequences: list[list[int]]) -> torch.Tensor:
        """``[N]`` head outputs at each sequence's last token (one right-padded pass)."""
        if any(not s for s in sequences):
            raise InputError("a reward model reads at least one token (an empty prompt and completion has none)")
        hidden = right_padded_hidden(self.backbone, sequences, self.policy.pad_id)
        last = torch.tensor([len(s) - 1 for s in sequences])
        return self.head(hidden[torch.arange(len(sequences)), last])

    @torch.no_grad()
    def score(self, prompts: list[str], completions: list[str], batch_size: int = 64) -> list[float]:
        was = self.training
        self.eval()
        out: list[float] = []
        for i in range(0, len(completions), batch_size):
            seqs = [self.encode(p, c) for p, c in zip(prompts[i : i + batch_size], completions[i : i + batch_size])]
            out += self.rewards(seqs).tolist()
        self.train(was)
        return out

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        save_policy(self.backbone, self.policy.tokenizer, path)
        save_file({k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, path / "rm_head.safetensors")
        self.meta = {**self.meta, **(extra or {}), "kind": "bradley-terry"}
        atomic_write_json(path / "rm.json", self.meta)


def load_reward_model(path: str | Path) -> RewardModel:
    path = Path(path)
    meta_file = path / "rm.json"
    if not meta_file.is_file():
        raise InputError(
            f"{str(path)!r} is not a reward model directory (no rm.json; train one with `veriloop rm train`)"
        )
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{str(meta_file)!r} is not valid JSON ({e.msg})") from None
    rm = RewardModel(load_policy(str(path)), meta)
    rm.head.load_state_dict(load_file(path / "rm_head.safetensors"))
    rm.eval()
    return rm
