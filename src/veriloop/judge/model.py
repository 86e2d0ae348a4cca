"""A judge: any local causal LM, a rubric and the verdict grammar, read greedily (a verifier is deterministic).

``Judge.read(questions, responses, references)`` fills the rubric for each, generates at most ``max_new_tokens``
tokens greedily, and parses the output (``grammar.parse_verdict``).  A response too long for the judge's context
(``max_position_embeddings``, less the rubric and ``max_new_tokens``) is cut from its front, so the judge sees its
end (where the final answer is); ``JudgeReading.cut`` says so.  That is one of the judge's own failure modes
(long confident text): the audit measures it.

A judge directory is a model directory (``save_pretrained``) and ``judge.json``: the rubric, ``max_new_tokens`` and,
for one the project trained, its training settings and metrics.  A model directory without ``judge.json`` is read
with the ``standard`` rubric (or the one given).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.judge.grammar import GRAMMAR_VERSION, JudgeReading, check_rubric, fill_rubric, load_rubric, parse_verdict
from veriloop.models.loading import Policy, load_policy
from veriloop.rollout.sampler import SamplingParams

JUDGE_META = "judge.json"


@dataclass(frozen=True)
class Reading(JudgeReading):
    cut: int = 0  # tokens cut from the front of the response to fit the context


class Judge:
    def __init__(self, policy: Policy, rubric: str, max_new_tokens: int = 24, meta: dict | None = None):
        self.policy = policy
        self.rubric = check_rubric(rubric)
        if max_new_tokens < 1:
            raise InputError(f"a judge needs max_new_tokens >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.meta = dict(meta or {})

    @property
    def context(self) -> int:
        n = getattr(self.policy.model.config, "max_position_embeddings", None)
        return int(n) if n else 10**9

    def prompt_ids(self, question: str, response: str, reference: str) -> tuple[list[int], int]:
        """The filled rubric's ids and how many response tokens were cut from the front to fit the context."""
        ids = self.policy.encode_prompt(fill_rubric(self.rubric, question, reference, response))
        room = self.context - self.max_new_tokens
        if len(ids) <= room:
            return ids, 0
        tok = self.policy.tokenizer
        response_ids = tok(response, add_special_tokens=False).input_ids
        base = len(self.policy.encode_prompt(fill_rubric(self.rubric, question, reference, "")))
        if base > room:
            raise InputError(
                f"the judge's rubric with this question and reference is {base} tokens: no room for a response in "
                f"its context of {self.context} tokens less max_new_tokens {self.max_new_tokens}"
            )
        cut = max(len(response_ids) - (room - base), 0)
        while True:  # a tokenizer may merge differently after a cut: cut more until it fits
            text = tok.decode(response_ids[cut:])
            ids = self.policy.encode_prompt(fill_rubric(self.rubric, question, reference, text))
            if len(ids) <= room or cut >= len(response_ids):
                return ids, cut
            cut += 1

    @torch.no_grad()
    def read(
        self, questions: list[str], responses: list[str], references: list[str], batch_size: int = 64
    ) -> list[Reading]:
        if not len(questions) == len(responses) == len(references):
            raise ValueError("questions, responses and references differ in length")
        greedy = SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens)
        was = self.policy.model.training
        self.policy.model.eval()
        out: list[Reading] = []
        for i in range(0, len(responses), batch_size):
            encoded = [
                self.prompt_ids(q, r, ref)
                for q, r, ref in zip(
                    questions[i : i + batch_size], responses[i : i + batch_size], references[i : i + batch_size]
                )
            ]
            gen = self.policy.sample([ids for ids, _ in encoded], greedy, n=1)
            for (_, cut), ids, finish in zip(encoded, gen.completion_ids, gen.finish_reasons):
                text = self.policy.completion_text(ids, finish)
                reading = parse_verdict(text)
                if finish == "length" and reading.verdict == "unparseable":
                    reading = replace(
                        reading, reason=reading.reason + f" (cut at max_new_tokens {self.max_new_tokens})"
                    )
                out.append(Reading(reading.verdict, reading.raw, reading.reason, cut))
        self.policy.model.train(was)
        return out

    def digest(self, path: str | Path | None = None) -> str:
        """12 hex digits of the weights' files, the rubric, max_new_tokens and the grammar's version."""
        h = hashlib.sha256(f"{GRAMMAR_VERSION}\0{self.rubric}\0{self.max_new_tokens}".encode())
        if path is not None:
            for f in sorted(Path(path).glob("*.safetensors")):
                h.update(f.read_bytes())
        else:
            for name, t in sorted(self.policy.model.state_dict().items()):
                h.update(name.encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:12]

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        self.policy.save(path)
        self.meta = {**self.meta, **(extra or {}), "rubric": self.rubric, "max_new_tokens": self.max_new_tokens}
        self.meta["grammar_version"] = GRAMMAR_VERSION
        atomic_write_json(path / JUDGE_META, self.meta)


def load_judge(path: str, rubric: str = "", max_new_tokens: int = 0) -> Judge:
    """A judge directory (``veriloop judge train``) or any local causal LM (``builtin:base`` included) with the
    ``standard`` rubric; ``rubric`` (a name or a file) and ``max_new_tokens`` replace the saved ones."""
    if not path:
        raise InputError("a judge needs a model: path=<judge directory or local causal LM directory>")
    meta: dict = {}
    meta_file = Path(path) / JUDGE_META
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
        except json.JSONDecodeError as e:
            raise InputError(f"{str(meta_file)!r} is not valid JSON ({e.msg})") from None
        if meta.get("grammar_version") != GRAMMAR_VERSION:
            raise InputError(
                f"{meta_file}: made for verdict grammar {meta.get('grammar_version')!r}, this veriloop reads "
                f"grammar {GRAMMAR_VERSION!r}: train the judge again"
            )
    template = load_rubric(rubric) if rubric else meta.get("rubric") or load_rubric("standard")
    return Judge(load_policy(path), template, max_new_tokens or int(meta.get("max_new_tokens", 24)), meta)
