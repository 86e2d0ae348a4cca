"""A task read from JSONL files: one ``{"prompt": ..., "reference": ...}`` object per line.

Optional fields: ``id`` (default: file name and line), ``tags`` (list of strings),
``completion`` (a demonstration: what ``--algo sft`` imitates on this task) and ``data_source``
(the kind of data, as verl's rows name it: ``reward_sources`` scores each kind with its own reward).
Train problems come from ``data``; held-out problems from ``heldout_data`` (required
for evaluation).  A malformed row stops loading with the file, line and field named.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from veriloop.errors import InputError
from veriloop.tasks.base import FENCES, Problem, prompt_suffix


class DatasetError(InputError):
    """A dataset file or row that cannot be used."""


def jsonl_objects(path: str | Path, what: str = "dataset file") -> Iterator[tuple[str, int, dict]]:
    """``(file:line, line number, row)`` for every non-blank line of a JSONL file of objects.

    A missing file, a line that is not JSON or not an object, or a file without rows stops with
    a ``DatasetError`` naming the file (and line).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{what} {str(path)!r} does not exist")
    seen = False
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
            seen = True
            yield where, lineno, row
    if not seen:
        raise DatasetError(f"{what} {str(path)!r} has no rows")


def load_problems(path: str, demonstrations: dict | None = None, suffix: str = "") -> list[Problem]:
    """Problems of ``path`` (``suffix`` appended to each prompt); ``demonstrations`` (if given) collects
    ``id -> (completion or None, file:line)``."""
    p = Path(path)
    out = []
    for where, lineno, row in jsonl_objects(path):
        for key in ("prompt", "reference"):
            if key not in row:
                raise DatasetError(f"{where}: missing field {key!r}")
            if not isinstance(row[key], str) or not row[key]:
                raise DatasetError(f"{where}: field {key!r} must be a non-empty string, got {row[key]!r}")
        tags = row.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise DatasetError(f"{where}: field 'tags' must be a list of strings, got {tags!r}")
        completion = row.get("completion")
        if completion is not None and (not isinstance(completion, str) or not completion):
            raise DatasetError(f"{where}: field 'completion' must be a non-empty string, got {completion!r}")
        source = row.get("data_source", "")
        if not isinstance(source, str):
            raise DatasetError(f"{where}: field 'data_source' must be a string, got {source!r}")
        pid = str(row.get("id", f"{p.name}:{lineno}"))
        if demonstrations is not None:
            demonstrations[pid] = (completion, where)
        out.append(Problem(pid, row["prompt"] + suffix, row["reference"], tuple(tags), source))
    return out


class JsonlTask:
    name = "jsonl"
    step_splitter = "lines"

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name}, known without loading a row: ``reward`` (what training is rewarded by when no
        verifier is named), ``outcome`` and, where the traces have them, ``format`` and ``process`` (evaluation)."""
        return {"reward": verifier, "outcome": verifier}  # the rows' references' verifier: named, never guessed

    def __init__(
        self,
        data: str,
        heldout_data: str = "",
        verifier: str = "",
        validation_data: str = "",
        prompt_style: str = "plain",
        reasoning: str = "cot",
    ):
        if not data and not heldout_data:
            raise DatasetError("task jsonl needs task.data (train rows) and/or task.heldout_data (eval rows)")
        self.demonstrations: dict[str, tuple[str | None, str]] = {}
        # e.g. MATH rows with --task.verifier math (boxed) or math-pot (reasoning pot: rows' completions are programs)
        suffix = prompt_suffix(prompt_style, reasoning)
        self.train = load_problems(data, self.demonstrations, suffix) if data else []
        self._heldout = load_problems(heldout_data, self.demonstrations, suffix) if heldout_data else []
        self._validation = load_problems(validation_data, self.demonstrations, suffix) if validation_data else []
        self.verifier = verifier
        self.reasoning = reasoning
        self.tool_format = FENCES  # task.reasoning tool: ToRA's ```python / ```output blocks

    @property
    def default_verifier(self) -> str:
        """The verifier of the rows' references: the one named, never a guess (rows can hold anything)."""
        if not self.verifier:
            raise InputError(
                "task jsonl has no verifier of its own: name the verifier of its references with "
                "--task.verifier (e.g. gsm8k, math, arithmetic-outcome, code; see `veriloop verifiers`)"
            )
        return self.verifier

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        if not self.train:
            raise DatasetError("task jsonl has no train rows (set task.data)")
        return [self.train[rng.randrange(len(self.train))] for _ in range(n)]

    def teacher_completion(self, problem: Problem, rng: random.Random) -> str:
        """The row's demonstration (SFT data)."""
        completion, where = self.demonstrations.get(problem.id, (None, problem.id))
        if completion is None:
            raise DatasetError(f"{where}: no 'completion' field; rollout.source=task-teacher (sft) needs one per row")
        return completion

    def heldout(self) -> list[Problem]:
        if not self._heldout:
            raise DatasetError("task jsonl has no held-out rows (set task.heldout_data)")
        return self._heldout

    def validation(self) -> list[Problem]:
        if not self._validation:
            raise DatasetError("task jsonl has no validation rows (set task.validation_data)")
        return self._validation
