"""A process reward model: a causal-LM backbone with a scalar head read at each step's end.

``score = sigmoid(w . h_t + b)`` where ``h_t`` is the backbone's last hidden state at the
token that closes the step (``veriloop.prm.step_read_positions``): the probability that the
solution is still on a path to the right answer after that step.

Losses over the labelled steps (mean over steps):

* ``bce``: binary cross-entropy against hard labels ``h_k`` in {0, 1};
* ``soft_ce``: the same cross-entropy against soft labels ``s_k`` in [0, 1]
  (``-(s log p + (1 - s) log(1 - p))``, minimised at ``p = s``);
* ``mse``: ``(p - s_k)^2`` on the probability.

A solution's score aggregates its step scores: ``min`` (the weakest step), ``prod`` (all steps
right, as if independent) or ``last`` (the final step's score).  A saved PRM is a directory:
the backbone (``save_pretrained``, loadable on its own), ``prm_head.safetensors`` and
``prm.json`` (splitter, prompt template, training settings and metrics).
"""

from __future__ import annotations

import json
import math
import typing
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.models.loading import Policy, load_policy, save_policy
from veriloop.models.value_head import ValueHead
from veriloop.prm.steps import split_steps, step_read_positions

PRMAggregation = Literal["min", "prod", "last"]
AGGREGATIONS = typing.get_args(PRMAggregation)
PRMLoss = Literal["bce", "soft_ce", "mse"]
PRM_LOSSES = typing.get_args(PRMLoss)


def aggregate(step_scores: list[float], how: str = "min") -> float:
    """One score for a solution from its step scores; a solution without steps scores 0."""
    if how not in AGGREGATIONS:
        raise InputError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")
    if not step_scores:
        return 0.0
    if how == "min":
        return min(step_scores)
    if how == "prod":
        return math.prod(step_scores)
    return step_scores[-1]


def prm_loss(logits: torch.Tensor, labels: torch.Tensor, loss: str) -> torch.Tensor:
    """Mean loss over labelled steps; ``logits`` and ``labels`` are 1-D and aligned."""
    if loss not in PRM_LOSSES:
        raise InputError(f"PRM loss must be one of {PRM_LOSSES}, got {loss!r}")
    if loss == "mse":
        return ((torch.sigmoid(logits) - labels) ** 2).mean()
    if loss == "bce" and not bool(((labels == 0) | (labels == 1)).all()):
        raise InputError("loss bce needs hard labels (0/1); use soft_ce or mse for soft labels")
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)


class PRM(torch.nn.Module):
    """``backbone`` is a ``Policy`` (causal LM + tokenizer); the head is one linear unit."""

    def __init__(self, backbone: Policy, splitter: str = "semicolon", prompt_template: str = "", meta=None):
        super().__init__()
        self.policy = backbone
        self.backbone = backbone.model
        self.head = ValueHead(self.backbone.config.hidden_size)
        self.splitter, self.prompt_template = splitter, prompt_template
        self.meta = dict(meta or {})

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    def encode(self, prompt: str, completion: str) -> tuple[list[int], list[int]]:
        """Token ids of prompt + completion, and the absolute position read for each step."""
        steps = split_steps(completion, self.splitter)
        prompt_ids = self.policy.encode_prompt(prompt)
        comp_ids = self.tokenizer(completion, add_special_tokens=False).input_ids if completion else []
        reads = step_read_positions(self.tokenizer, completion, steps) if steps else []
        return prompt_ids + comp_ids, [len(prompt_ids) + r for r in reads]

    def step_logits(self, sequences: list[list[int]], reads: list[list[int]]) -> list[torch.Tensor]:
        """Head logits at the read positions of each sequence (right-padded batch, one pass)."""
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.policy.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        hidden = self.backbone.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = self.head(hidden)  # [N, L]
        return [logits[i, r] for i, r in enumerate(reads)]

    @torch.no_grad()
    def score(self, prompts: list[str], completions: list[str], batch_size: int = 64) -> list[list[float]]:
        """Step scores (probabilities) of each completion; ``[]`` for a completion without steps."""
        was = self.training
        self.eval()
        out: list[list[float]] = []
        for i in range(0, len(completions), batch_size):
            enc = [self.encode(p, c) for p, c in zip(prompts[i : i + batch_size], completions[i : i + batch_size])]
            logits = self.step_logits([e[0] for e in enc], [e[1] for e in enc])
            out += [torch.sigmoid(lg).tolist() for lg in logits]
        self.train(was)
        return out

    def prompt_for(self, reference: str) -> str:
        if not self.prompt_template:
            raise InputError("this PRM needs the prompts: it was saved without a prompt_template")
        return self.prompt_template.format(reference=reference)

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        save_policy(self.backbone, self.tokenizer, path)
        save_file(
            {k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, path / "prm_head.safetensors"
        )
        meta = {**self.meta, **(extra or {}), "splitter": self.splitter, "prompt_template": self.prompt_template}
        self.meta = meta
        atomic_write_json(path / "prm.json", meta)


def load_prm(path: str | Path) -> PRM:
    path = Path(path)
    meta_file = path / "prm.json"
    if not meta_file.is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a PRM directory (no prm.json; train one with `veriloop prm train`)"
        )
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{str(meta_file)!r} is not valid JSON ({e.msg})") from None
    backbone = load_policy(str(path))
    prm = PRM(backbone, meta.get("splitter", "semicolon"), meta.get("prompt_template", ""), meta)
    prm.head.load_state_dict(load_file(path / "prm_head.safetensors"))
    prm.eval()
    return prm
