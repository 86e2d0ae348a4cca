"""The rollout ledger: every request's life, and its records written once, atomically.

``ledger.jsonl`` in the run directory gets one line per event of a request (``issued``, ``failed``,
``done``) with the engine that served it, the weights version it named, the attempt and the time.
When a request is done its records, as the engine served them (the verdicts come after, in the step's
file ``rollouts/step-N.jsonl.gz``), go to ``rollouts/requests/<request id>.jsonl.gz`` in one atomic
write, before the ``done`` line: a request is in the store exactly once however many times its
engine died.  A checkpoint copies the ledger (``Ledger.save``); resuming puts that copy back, so
events after the checkpoint's step are forgotten exactly like its metrics rows.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

from veriloop.io import atomic_write_bytes, atomic_write_jsonl, read_jsonl
from veriloop.rollout.records import Record

LEDGER_FILE = "ledger.jsonl"


class Ledger:
    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LEDGER_FILE
        self.requests_dir = Path(run_dir) / "rollouts" / "requests"

    def event(self, kind: str, request, engine: int | str, attempt: int = 0, **extra) -> None:
        row = {
            "event": kind,
            "request_id": request.request_id,
            "step": request.step,
            "round": request.round,
            "engine": engine,
            "weights_version": request.weights_version,
            "attempt": attempt,
            "time": time.time(),
            **extra,
        }
        with open(self.path, "a") as f:  # one short line per event: a crash loses at most the line being written
            f.write(json.dumps(row) + "\n")
            f.flush()

    def done(self, request, records: list[Record], engine: int | str, attempt: int) -> None:
        """The request's records, atomically, then its ``done`` line."""
        path = self.requests_dir / f"{request.request_id}.jsonl.gz"
        atomic_write_jsonl(path, (r.to_json() for r in records), compress=True)
        self.event("done", request, engine, attempt, records=len(records))

    def events(self) -> list[dict]:
        return read_jsonl(self.path) if self.path.exists() else []

    def done_counts(self) -> Counter:
        """request id -> how many ``done`` events it has (exactly once: every value is 1)."""
        return Counter(e["request_id"] for e in self.events() if e["event"] == "done")

    def read_request(self, request_id: str) -> list[Record]:
        return [Record.from_json(r) for r in read_jsonl(self.requests_dir / f"{request_id}.jsonl.gz")]

    def save(self, checkpoint: Path) -> None:
        if self.path.exists():
            shutil.copyfile(self.path, checkpoint / LEDGER_FILE)

    def restore(self, checkpoint: Path) -> None:
        """The ledger as the checkpoint saw it; request files it does not list as done removed."""
        saved = checkpoint / LEDGER_FILE
        if saved.exists():  # in place of the run's own, whose last line a kill may have cut
            atomic_write_bytes(self.path, saved.read_bytes())
        elif self.path.exists():
            self.path.unlink()
        done = self.done_counts()
        for p in self.requests_dir.glob("*.jsonl.gz") if self.requests_dir.is_dir() else []:
            if p.name.removesuffix(".jsonl.gz") not in done:
                p.unlink()
