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
from veriloop.models.value_head import ValueHead, right_padded_hidden
from veriloop.prm.steps import split_steps, step_read_positions

PRMAggregation = Literal["min", "prod", "last"]
AGGREGATIONS = typing.get_args(PRMAggregation)
PRMLoss = Literal["bce", "soft_ce", "mse"]
PRM_LOSSES = typing.get_args(PRMLoss)
PRMForm = Literal["head", "generative"]
PRM_FORMS = typing.get_args(PRMForm)


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
        hidden = right_padded_hidden(self.backbone, sequences, self.policy.pad_id)
        logits = self.head(hidden)  # [N, L]
        return [logits[i, r] for i, r in enumerate(reads)]

    def step_loss(self, sequences: list[list[int]], reads: list[list[int]], targets: torch.Tensor, loss: str):
        """The training loss of a batch: ``prm_loss`` of the head's logits at the read positions."""
        return prm_loss(torch.cat(self.step_logits(sequences, reads)), targets, loss)

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
        meta = {**self.meta, **(extra or {}), "form": "head", "splitter": self.splitter}
        self.meta = meta = {**meta, "prompt_template": self.prompt_template}
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
    form = meta.get("form", "head")
    if form not in PRM_FORMS:
        raise InputError(f"{str(meta_file)!r}: form must be one of {PRM_FORMS}, got {form!r}")
    cls = GenerativePRM if form == "generative" else PRM
    prm = cls(backbone, meta.get("splitter", "semicolon"), meta.get("prompt_template", ""), meta)
    if form == "head":
        prm.head.load_state_dict(load_file(path / "prm_head.safetensors"))
    prm.eval()
    return prm


class GenerativePRM(PRM):
    """Math-Shepherd's form: the step verdict is a token the LM predicts.  Two tokens, ``[GOOD]`` and ``[BAD]``,
    join the tokenizer (the embeddings grow by two rows, each started at the old rows' mean, so the two start
    equal: every step scores 1/2); at each step's read position the LM's own next-token logits ``z`` are read, and
    the step's score is the LM's choice between the two, ``P(GOOD | {GOOD, BAD}) = sigmoid(z_GOOD - z_BAD)``.

    Training is the cross-entropy of that choice: ``-log P(GOOD | ...)`` for a step labelled good, ``-log P(BAD |
    ...)`` for one labelled bad, ``-(s log P(GOOD | ...) + (1 - s) log P(BAD | ...))`` for a soft label ``s``
    (loss ``soft_ce``): the same reading at training and at scoring, as Math-Shepherd reads its ``+``/``-`` tokens.
    Over the whole vocabulary instead (the LM taught to write the verdict unprompted), two new rows start far below
    the LM's likely tokens and a short training run barely lifts them, so that is not what is trained.  No scalar
    head: the verdict is read off the LM head (``mse`` is not defined for it)."""

    TOKENS = ("[GOOD]", "[BAD]")

    def __init__(self, backbone: Policy, splitter: str = "semicolon", prompt_template: str = "", meta=None):
        super().__init__(backbone, splitter, prompt_template, meta)
        self.head = None
        tokenizer = backbone.tokenizer
        missing = [t for t in self.TOKENS if t not in tokenizer.get_vocab()]
        if missing:
            tokenizer.add_special_tokens({"additional_special_tokens": list(missing)})
            # new rows start at the old embeddings' mean (no random direction that a verdict would have to undo)
            self.backbone.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            with torch.no_grad():
                k = len(missing)
                for weight in {id(w): w for w in self._embedding_weights()}.values():  # tied: one matrix
                    weight[-k:] = weight[:-k].mean(0)
        self.good_id, self.bad_id = tokenizer.convert_tokens_to_ids(list(self.TOKENS))

    def _embedding_weights(self) -> list[torch.Tensor]:
        return [self.backbone.get_input_embeddings().weight, self.backbone.get_output_embeddings().weight]

    def _verdict_logits(self, sequences: list[list[int]], reads: list[list[int]]) -> list[torch.Tensor]:
        """``[steps, 2]`` per sequence: the LM's logits of [GOOD] and [BAD] at each read position."""
        hidden = right_padded_hidden(self.backbone, sequences, self.policy.pad_id)
        head = self.backbone.get_output_embeddings()
        pick = [self.good_id, self.bad_id]
        rows = head.weight[pick].float()  # only the LM head's two rows: the other logits are never read
        bias = head.bias[pick].float() if getattr(head, "bias", None) is not None else 0.0
        return [hidden[i, r].float() @ rows.T + bias for i, r in enumerate(reads)]

    def step_logits(self, sequences: list[list[int]], reads: list[list[int]]) -> list[torch.Tensor]:
        """``z_GOOD - z_BAD`` at each read position: the logit of the LM's choice of [GOOD] over [BAD]."""
        return [z[:, 0] - z[:, 1] for z in self._verdict_logits(sequences, reads)]

    def step_loss(self, sequences: list[list[int]], reads: list[list[int]], targets: torch.Tensor, loss: str):
        """The cross-entropy of the two-token choice (``bce`` on hard labels, ``soft_ce`` on soft ones)."""
        if loss not in ("bce", "soft_ce"):
            raise InputError(f"a generative PRM trains with bce or soft_ce (its verdict's cross-entropy), got {loss!r}")
        return super().step_loss(sequences, reads, targets, loss)

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        save_policy(self.backbone, self.tokenizer, path)
        stale = path / "prm_head.safetensors"  # a head PRM saved here before: not this model's
        if stale.exists():
            stale.unlink()
        meta = {**self.meta, **(extra or {}), "form": "generative", "splitter": self.splitter}
        self.meta = {**meta, "prompt_template": self.prompt_template}
        atomic_write_json(path / "prm.json", self.meta)
