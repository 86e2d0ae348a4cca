"""``rollouts/index.sqlite``: one row per record of the run, for finding records without reading them.

The run browser (``veriloop report``) filters a run's records by step, problem, group, reward, verdict,
truncation and tool use; a run of 10,000 steps holds a million records in 10,000 gzipped files, too many to
read when a page opens.  The trainer adds each step's rows when it writes the step's file (``RecordStore``
with ``index=True``), so the index is complete when the run ends; a run directory without one (or with steps
it lacks: an older run, a copy) is caught up by ``catch_up``.  It is derived data: deleted or unreadable, it is
rebuilt from the step files, which stay the record.  SQLite in WAL mode: a page may read while the run writes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

INDEX_FILE = "index.sqlite"
SCHEMA = 1  # PRAGMA user_version: an index of another version is rebuilt
COLUMNS = (  # (name, SQL type): what a filter or a list needs of a record without opening its step file
    ("step", "INTEGER"),
    ("i", "INTEGER"),
    ("problem_id", "TEXT"),
    ("group_id", "TEXT"),
    ("reward", "REAL"),
    ("outcome", "TEXT"),
    ("finish_reason", "TEXT"),
    ("tokens", "INTEGER"),
    ("reasoning_chars", "INTEGER"),
    ("tool_calls", "INTEGER"),
    ("failed_tool_calls", "INTEGER"),
    ("verifier", "TEXT"),
    ("policy_version", "INTEGER"),
)
NAMES = tuple(n for n, _ in COLUMNS)


# A completion's final answer, as the built-in formats state it (answer=..., \boxed{...}, #### ..., "the answer
# is ..."): what is left without it is the reasoning, and a rewarded completion with almost none is answer-only.
FINAL_ANSWER = re.compile(r"(answer\s*[=:]\s*\S+|\\boxed\{[^{}]*\}|####\s*\S+|the answer is\s*\S+)\W*$", re.I)


def reasoning_chars(completion: str) -> int:
    """Non-space characters of ``completion`` outside its final answer (all of them when none is found)."""
    text = completion.strip()
    matches = list(FINAL_ANSWER.finditer(text))
    kept = text[: matches[-1].start()] if matches else text  # the last final-answer marker
    return len("".join(kept.split()))


def index_row(step: int, i: int, r) -> tuple:
    return (
        step,
        i,
        r.problem_id,
        r.group_id,
        r.reward,
        r.verdict_outcome,
        r.finish_reason,
        len(r.completion_ids),
        reasoning_chars(r.completion),
        len(r.tool_calls or ()),
        r.failed_tool_calls,
        r.verifier,
        r.policy_version,
    )


class RolloutIndex:
    def __init__(self, root: str | Path):
        self.path = Path(root) / INDEX_FILE

    def connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        made = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'records'").fetchone()[0]
        if made and version != SCHEMA:  # another layout of columns: derived data, so made again
            db.close()
            self.remove()
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        db.execute(f"PRAGMA user_version = {SCHEMA}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a crash loses at most the last steps' rows
        db.execute(
            f"CREATE TABLE IF NOT EXISTS records ({', '.join(f'{n} {t}' for n, t in COLUMNS)}, "
            "PRIMARY KEY (step, i)) WITHOUT ROWID"
        )
        for column in ("problem_id", "group_id", "reward", "outcome"):
            db.execute(f"CREATE INDEX IF NOT EXISTS by_{column} ON records ({column}, step)")
        return db

    def add(self, step: int, records, db: sqlite3.Connection | None = None) -> None:
        """The rows of ``step`` (replacing any it had: a step rewritten after a resume)."""
        own = db is None
        db = db or self.connect()
        try:
            with db:
                db.execute("DELETE FROM records WHERE step = ?", (step,))
                db.executemany(
                    f"INSERT INTO records VALUES ({', '.join('?' * len(COLUMNS))})",
                    [index_row(step, i, r) for i, r in enumerate(records)],
                )
        finally:
            if own:
                db.close()

    def remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def remove_after(self, step: int) -> None:
        if self.path.exists():
            db = self.connect()
            with db:
                db.execute("DELETE FROM records WHERE step > ?", (step,))
            db.close()

    def indexed_steps(self, db: sqlite3.Connection) -> set[int]:
        return {s for (s,) in db.execute("SELECT DISTINCT step FROM records")}

    def catch_up(self, store, on_step: Callable[[int, int], None] | None = None) -> int:
        """Index the store's steps the index lacks; returns how many were added.  An unreadable index is
        rebuilt."""
        try:
            db = self.connect()
            have = self.indexed_steps(db)
        except sqlite3.DatabaseError:
            self.remove()
            db, have = self.connect(), set()
        missing = [s for s in store.steps() if s not in have]
        try:
            for k, step in enumerate(missing, start=1):
                self.add(step, store.read(step), db)
                if on_step is not None:
                    on_step(k, len(missing))
        finally:
            db.close()
        return len(missing)
