"""``veriloop verify``: grade a JSONL file of ``{"completion", "reference", ...}`` rows on every core.

A verifier that reads the question (``reads_prompts``: a judge, a reward model) needs each row's ``prompt``.

Each output row is the input row (extra columns kept) plus ``score``, ``outcome``,
``components``, ``verifier`` (name@version) and ``details``.  Rows are graded in chunks by a
``WorkerPool`` (fresh interpreters, so grading works from ``python -`` and notebooks too), each
worker building its own verifier from the same name and options, so a verifier needs no thread
safety and a slow row holds up only its chunk.  Per-row time limits are the verifiers' own; a
chunk that fails as a whole (its worker died or overran ``chunk_timeout``) is an error naming its
rows, never a score.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from veriloop.io import atomic_write_text
from veriloop.tasks.jsonl import DatasetError, jsonl_objects
from veriloop.verifiers.base import VerifierError
from veriloop.verifiers.pool import WorkerPool

_VERIFIERS: dict[str, object] = {}  # in each worker: name and options -> the verifier built from them


def read_rows(path: str) -> list[dict]:
    rows = []
    for where, _, row in jsonl_objects(path, "input file"):
        for key in ("completion", "reference"):
            if not isinstance(row.get(key), str):
                raise DatasetError(f"{where}: field {key!r} must be a string")
        rows.append(row)
    return rows


def grade_chunk(name: str, options: dict, chunk: list[tuple[str, ...]]) -> list[dict]:
    """Grade one chunk of (completion, reference[, prompt]) with the verifier ``name(**options)``, built once per
    process."""
    from veriloop.verifiers import get

    key = json.dumps([name, options], sort_keys=True, default=str)
    if key not in _VERIFIERS:
        _VERIFIERS[key] = get(name, **options)
    v = _VERIFIERS[key]
    args = ([item[0] for item in chunk], [item[1] for item in chunk])
    if getattr(v, "reads_prompts", False):  # a judge or a reward model: each row's question, third in the item
        verdicts = v.verify_batch(*args, prompts=[item[2] for item in chunk])
    else:
        verdicts = v.verify_batch(*args)
    return [
        {
            "score": x.score,
            "outcome": x.outcome,
            "components": x.components,
            "verifier": x.version,
            "details": x.details,
        }
        for x in verdicts
    ]


def grade_pairs(
    name: str,
    pairs: list[tuple[str, ...]],
    options: dict,
    workers: int,
    chunk_size: int = 64,
    chunk_timeout: float = 3600.0,
) -> tuple[list[dict], float]:
    """(one result dict per (completion, reference[, prompt]) item, seconds) using ``workers`` processes."""
    chunks = [pairs[i : i + chunk_size] for i in range(0, len(pairs), chunk_size)]
    started = time.time()
    if workers == 1 or len(chunks) == 1:
        graded = [g for chunk in chunks for g in grade_chunk(name, options, chunk)]
    else:
        # one process per core already: the verifiers' own pools stay at one worker each
        inner = {**options, "workers": 1} if name in ("math", "gsm8k", "code") and "workers" not in options else options
        with WorkerPool(workers, preload=("veriloop.verifiers",)) as pool:
            results = pool.map(grade_chunk, [(name, inner, chunk) for chunk in chunks], chunk_timeout)
        graded = []
        for i, r in enumerate(results):
            if r.status != "ok":
                first = i * chunk_size + 1
                raise VerifierError(
                    f"grading rows {first}-{first + len(chunks[i]) - 1} failed ({r.status}): "
                    f"{r.error.splitlines()[0] if r.error else ''}"
                )
            graded += r.value
    return graded, time.time() - started


@dataclass
class VerifySummary:
    rows: int
    mean_score: float
    outcomes: dict[str, int]
    seconds: float
    workers: int

    def text(self) -> str:
        counts = ", ".join(f"{k or 'scored'} {v}" for k, v in sorted(self.outcomes.items()))
        return (
            f"{self.rows} rows in {self.seconds:.1f} s ({self.rows / max(self.seconds, 1e-9):.0f} rows/s, "
            f"{self.workers} worker{'s' if self.workers != 1 else ''}); mean score {self.mean_score:.4f}; "
            f"outcomes: {counts}"
        )


def verify_file(
    name: str, input_path: str, output_path: str, options: dict | None = None, workers: int = 0, chunk_size: int = 64
) -> VerifySummary:
    """Grade ``input_path`` into ``output_path``; a bad row or reference stops with its location."""
    from veriloop.verifiers import get

    options = dict(options or {})
    verifier = get(name, **options)  # unknown name or bad options fail here, before any work
    rows = read_rows(input_path)
    items = [(r["completion"], r["reference"]) for r in rows]
    if getattr(verifier, "reads_prompts", False):  # a judge or a reward model reads each row's question
        for n, r in enumerate(rows, start=1):
            if not isinstance(r.get("prompt"), str):
                raise DatasetError(
                    f"{input_path}:{n}: field 'prompt' must be a string: verifier {name!r} reads each row's question"
                )
        items = [(r["completion"], r["reference"], r["prompt"]) for r in rows]
    workers = workers if workers > 0 else (os.cpu_count() or 1)
    graded, seconds = grade_pairs(name, items, options, workers, chunk_size)
    used = 1 if len(rows) <= chunk_size else workers  # one chunk is graded in this process
    out = [{**row, **g} for row, g in zip(rows, graded)]
    atomic_write_text(Path(output_path), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    scores = [g["score"] for g in graded]
    return VerifySummary(
        len(rows), sum(scores) / len(scores), dict(Counter(g["outcome"] for g in graded)), seconds, used
    )
