"""Exact mode: a policy over a fixed list of complete answers.

``CandidatePolicy`` is a softmax over K candidate completions (one learnable logit each).
A completion is a single "token", the candidate's index, so the trainer's whole loop runs
unchanged: sampling records behaviour log-probs, the learner gets ``[N, 1, K]`` logits,
and every expectation over the policy can be enumerated exactly (the KL over the K
candidates is the estimator ``exact``).  This is the seeds' four-candidate setting, and the
test bed that proves estimators unbiased or biased.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from veriloop.algorithms.sampling import sampling_logprobs
from veriloop.io import atomic_write_json
from veriloop.models.batch import PolicyBatch
from veriloop.rollout.sampler import Generation, SamplingParams


class CandidatePolicy(torch.nn.Module):
    """``pi(candidate_k) = softmax(logits)_k`` for every prompt."""

    eos_id = -1  # completions are single indices; nothing ends with EOS
    pad_id = 0
    tokenizer = None

    def __init__(self, candidates: list[str], logits: torch.Tensor | None = None, dtype=torch.float64):
        super().__init__()
        if len(candidates) < 2:
            raise ValueError("a candidate policy needs at least two candidates")
        init = torch.zeros(len(candidates), dtype=dtype) if logits is None else logits.to(dtype).clone()
        if init.shape != (len(candidates),):
            raise ValueError(f"logits must have shape ({len(candidates)},), got {tuple(init.shape)}")
        self.candidates = list(candidates)
        self.logits = torch.nn.Parameter(init)
        self.source = "candidates"

    @property
    def model(self) -> torch.nn.Module:
        return self

    def probs(self, temperature: float = 1.0) -> torch.Tensor:
        return torch.softmax(self.logits.detach() / temperature, dim=-1)

    def encode_prompt(self, text: str) -> list[int]:
        return [0]  # the distribution does not depend on the prompt

    @torch.no_grad()
    def sample(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        *,
        generator=None,
        n: int,
        row_seeds: list[int] | None = None,
    ) -> Generation:
        """``row_seeds``: one stream per completion (as the sampler's), else ``generator`` for the batch."""
        if params.min_new_tokens:
            raise ValueError(
                "sampling.min_new_tokens: a candidates policy draws whole solutions (one token each); leave it at 0"
            )
        if params.temperature == 0:
            idx = torch.full((len(prompt_ids) * n,), int(self.logits.argmax()))
            lps = torch.zeros(idx.shape[0], dtype=self.logits.dtype)
        else:
            lp = sampling_logprobs(self.logits.detach(), params.temperature, params.top_k, params.top_p)
            if row_seeds is not None:
                idx = torch.cat(
                    [torch.multinomial(lp.exp(), 1, generator=torch.Generator().manual_seed(s)) for s in row_seeds]
                )
            else:
                idx = torch.multinomial(lp.exp(), len(prompt_ids) * n, replacement=True, generator=generator)
            lps = lp[idx]
        return Generation([[int(i)] for i in idx], [[float(v)] for v in lps], ["eos"] * idx.shape[0])

    def completion_text(self, ids: list[int], finish_reason: str) -> str:
        return self.candidates[ids[0]]

    def completion_logits(self, batch: PolicyBatch) -> torch.Tensor:
        N, T = batch.completion_ids.shape
        return self.logits[None, None, :].expand(N, T, -1)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({"logits": self.logits.detach().clone()}, str(path / "candidates.safetensors"))
        atomic_write_json(path / "candidates.json", {"candidates": self.candidates})

    save_merged = save  # no adapters: what a run deploys is what it saves

    @classmethod
    def load(cls, path: str | Path) -> CandidatePolicy:
        path = Path(path)
        candidates = json.loads((path / "candidates.json").read_text())["candidates"]
        logits = load_file(str(path / "candidates.safetensors"))["logits"]
        return cls(candidates, logits, dtype=logits.dtype)

    def frozen_copy(self) -> CandidatePolicy:
        copy = CandidatePolicy(self.candidates, self.logits.detach(), dtype=self.logits.dtype)
        copy.requires_grad_(False)
        return copy
