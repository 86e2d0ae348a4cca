"""The rollout record: one completion with everything needed to trust and reuse it.

Nothing trains on a completion whose provenance is unknown: a record holds the token
ids, the behaviour log-probs of the distribution that actually sampled them, the
sampling settings and seed, the policy version, why it stopped, and the verdict (score,
components, outcome, reason) with the verifier's version.  ``RecordStore`` writes one gzipped JSONL file per
step (and, for a run's own store, a row per record in ``rollouts/index.sqlite``: rollout/index.py).
Traces no model sampled (a task's own teacher traces for SFT) have
``behavior_logprobs = None``; those and samples of a frozen policy (initial or teacher)
have ``policy_version = -1``, and ``sampling["source"]`` says where they came from.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from veriloop.errors import InputError
from veriloop.io import atomic_write_jsonl, read_jsonl, step_name, steps_in
from veriloop.rollout.index import RolloutIndex

FINISH_REASONS = ("eos", "length", "stop", "error")  # stop: a token of the sampler's stop_ids, kept


@dataclass
class Record:
    problem_id: str
    group_id: str  # completions of one prompt in one step share it
    prompt: str
    reference: str
    prompt_ids: list[int]
    completion_ids: list[int]  # EOS included when finish_reason == "eos"
    completion: str  # decoded text without the final EOS; other special tokens stay visible (completion_text)
    behavior_logprobs: list[float] | None  # per completion token, nats, under `sampling`; None: not sampled
    sampling: dict  # temperature, top_k, top_p, max_new_tokens, seed
    policy_version: int
    finish_reason: str
    reward: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    verifier: str = ""  # name@version
    verdict_details: str = ""
    verdict_outcome: str = ""  # the verdict's kind: correct, wrong, no_answer, ambiguous, timeout, error, ...
    created_at: float = 0.0  # unix time of sampling
    verified_at: float = 0.0
    finish_token: int | None = None  # the id that ended it (one of the model's end tokens, or a stop id); None: length
    # tool-integrated rollouts (rollout/tools.py): per completion token 1 if the model sampled it, 0 if a tool's
    # output (its behaviour log-prob is a placeholder 0.0, and no loss, KL or advantage reads it); None: all 1
    model_mask: list[int] | None = None
    tool_calls: list[dict] | None = None  # every code block run: code, output shown, status, seconds, start, tokens
    data_source: str = ""  # the problem's kind of data ('' = the task's one kind): what reward_sources routes by

    def __post_init__(self):
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")
        if self.behavior_logprobs is not None and len(self.behavior_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"record {self.group_id}/{self.problem_id}: {len(self.behavior_logprobs)} behaviour log-probs "
                f"for {len(self.completion_ids)} completion tokens"
            )
        if self.model_mask is not None:
            if len(self.model_mask) != len(self.completion_ids) or not set(self.model_mask) <= {0, 1}:
                raise ValueError(
                    f"record {self.group_id}/{self.problem_id}: model_mask must hold one 0/1 per "
                    f"completion token ({len(self.completion_ids)}), got {len(self.model_mask)} entries"
                )
            if self.completion_ids and not any(self.model_mask):
                raise ValueError(
                    f"record {self.group_id}/{self.problem_id}: no token of the completion is the "
                    "model's (model_mask all 0)"
                )

    @property
    def loss_mask(self) -> list[int]:
        """1 on the tokens the model wrote (what a loss may read), 0 on tool output."""
        return list(self.model_mask) if self.model_mask is not None else [1] * len(self.completion_ids)

    @property
    def model_tokens(self) -> int:
        return sum(self.model_mask) if self.model_mask is not None else len(self.completion_ids)

    @property
    def failed_tool_calls(self) -> int:
        return sum(c["status"] != "ok" for c in self.tool_calls or ())

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    def to_json(self) -> dict:
        # Not dataclasses.asdict: it deep-copies every list element (1 s per 1,000 records of 40 tokens, ~6% of
        # a built-in GRPO step); the fields are JSON values already, and one level of copying keeps the record
        # independent of the returned dict.
        return {f.name: _copy(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, row: dict, where: str = "a record") -> Record:
        """The record of a JSON row; a row that is not one (a field missing, unknown or of the wrong kind) is an
        ``InputError`` naming ``where`` (file:line)."""
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(row) - set(names))
        missing = sorted(
            n
            for n, f in names.items()
            if n not in row and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if unknown or missing:
            raise InputError(
                f"{where}: not a rollout record ("
                + "; ".join(
                    filter(
                        None,
                        [
                            f"unknown fields {unknown}" if unknown else "",
                            f"missing fields {missing}" if missing else "",
                        ],
                    )
                )
                + ")"
            )
        for name in ("problem_id", "group_id", "prompt", "reference", "completion", "finish_reason"):
            if not isinstance(row[name], str):
                raise InputError(f"{where}: field {name!r} must be a string, got {type(row[name]).__name__}")
        for name in ("prompt_ids", "completion_ids", "behavior_logprobs", "model_mask"):
            value = row.get(name)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
            ):
                raise InputError(f"{where}: field {name!r} must be a list of numbers")
        try:
            return cls(**row)
        except (ValueError, TypeError) as e:
            raise InputError(f"{where}: {e}") from None


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def check_reward(record: Record) -> None:
    """A reward must be a finite number before anything trains on it; another comes from the verifier the
    user chose, so it is an input error."""
    if record.reward is None or not isinstance(record.reward, (int, float)) or not math.isfinite(record.reward):
        raise InputError(
            f"non-finite reward {record.reward!r} from verifier {record.verifier!r} for problem "
            f"{record.problem_id!r} (completion {record.completion!r}); refusing to train on it"
        )


class RecordStore:
    """``rollouts/step-000001.jsonl.gz``: the records of one step, written atomically."""

    def __init__(self, root: str | Path, index: bool = False):
        self.root = Path(root)
        # index: keep rollouts/index.sqlite (rollout/index.py) up to date with every step written or removed
        self.index = RolloutIndex(self.root) if index else None

    def path(self, step: int) -> Path:
        return self.root / step_name(step, suffix=".jsonl.gz")

    def write(self, step: int, records: list[Record]) -> Path:
        p = self.path(step)
        atomic_write_jsonl(p, (r.to_json() for r in records), compress=True)
        if self.index is not None:
            self.index.add(step, records)
        return p

    def read(self, step: int) -> list[Record]:
        path = self.path(step)
        return [Record.from_json(r, f"{path}:{i}") for i, r in enumerate(read_jsonl(path), start=1)]

    def write_batches(self, batches: list[list[Record]]) -> None:
        """Several batches in order (e.g. the ones sampled ahead), one file each."""
        for i, records in enumerate(batches, start=1):
            self.write(i, records)

    def read_batches(self) -> list[list[Record]]:
        return [self.read(s) for s in self.steps()]

    def steps(self) -> list[int]:
        return [s for s, _ in steps_in(self.root, suffix=".jsonl.gz")]

    def remove_after(self, step: int) -> None:
        for s in self.steps():
            if s > step:
                self.path(s).unlink()
        if self.index is not None:
            self.index.remove_after(step)
