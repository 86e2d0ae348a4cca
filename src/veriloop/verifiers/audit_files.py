"""The audit's case files: ``data/audit/development/*.jsonl`` and ``data/audit/heldout/*.jsonl``.

A case is one JSON object per line: ``completion``, ``reference``, ``expect`` (``accept`` |
``reject``), ``family``, ``verifiers`` (the verifier names it applies to), ``labelled_by``
(``reading``: a person read the text and decided; never a verifier's verdict) and optionally
``note``, ``id`` and ``prompt`` (the question, for a verifier that reads it: a judge).  The part is the
directory.  The development part is what the answer reader is tuned on; the held-out part is written without
running any verifier and is never edited (a file whose failures were studied no longer measures unseen text;
docs/auditing.md lists the reads).

The held-out files only grow: ``heldout/LOCK`` records the sha256 of every case line, file by
file, in order (``FILE HASH`` per line).  ``check_lock`` says where the files depart from it (a
line edited, removed or moved, or a line not yet locked); ``append_lock`` records lines appended
since, and refuses while a locked line has changed.  ``python -m veriloop.verifiers.audit_files
--lock`` runs it after new cases are appended.
"""

from __future__ import annotations

import hashlib
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

from veriloop.tasks.jsonl import DatasetError, jsonl_objects

AUDIT_DIR = Path(__file__).resolve().parent / "data" / "audit"
PARTS = ("development", "heldout")
LOCK_NAME = "LOCK"
_LOCK_HEADER = "# sha256 of every held-out case line (UTF-8, no newline), per file, in order; append only\n"
_KEYS = {"completion", "reference", "expect", "family", "verifiers", "labelled_by", "note", "id", "prompt"}


def part_files(part: str, root: Path = AUDIT_DIR) -> list[Path]:
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    if not (root / part).is_dir():  # never an empty part by accident: the numbers would look perfect
        raise DatasetError(f"audit case directory {root / part} is missing (package data not installed?)")
    return sorted((root / part).glob("*.jsonl"))


def read_case_file(path: Path) -> list[dict]:
    """The rows of one case file, checked: a missing or mistyped field stops with file:line and key."""
    out = []
    for where, _, row in jsonl_objects(path, "audit case file"):
        for key in ("completion", "reference", "expect", "family"):
            if not isinstance(row.get(key), str):
                raise DatasetError(f"{where}: field {key!r} must be a string")
        if row["expect"] not in ("accept", "reject"):
            raise DatasetError(f"{where}: field 'expect' must be 'accept' or 'reject', got {row['expect']!r}")
        names = row.get("verifiers")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise DatasetError(f"{where}: field 'verifiers' must be a non-empty list of verifier names")
        if not isinstance(row.get("prompt", ""), str):
            raise DatasetError(f"{where}: field 'prompt' must be a string (the question a judge reads)")
        unknown = sorted(set(row) - _KEYS)
        if unknown:
            raise DatasetError(f"{where}: unknown field(s) {unknown}; a case has {sorted(_KEYS)}")
        out.append({**row, "where": where, "file": path.stem})
    return out


@cache
def _cached_rows(path: str, mtime_ns: int) -> tuple[dict, ...]:
    return tuple(read_case_file(Path(path)))


def part_rows(part: str, root: Path = AUDIT_DIR) -> list[dict]:
    """Every case row of a part (each with ``where``: file and line), files in name order."""
    return [r for p in part_files(part, root) for r in _cached_rows(str(p), p.stat().st_mtime_ns)]


# ---------------------------------------------------------------- the held-out lock


def line_hashes(path: Path) -> list[str]:
    """sha256 of every non-blank line of ``path`` (its bytes without the newline)."""
    return [hashlib.sha256(raw.rstrip(b"\r\n")).hexdigest() for raw in path.read_bytes().splitlines() if raw.strip()]


def read_lock(lock: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    if not lock.exists():
        return out
    for n, line in enumerate(lock.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        name, _, digest = line.partition(" ")
        if len(digest) != 64:
            raise DatasetError(f"{lock}:{n}: expected 'FILE SHA256', got {line!r}")
        out[name].append(digest)
    return out


def check_lock(heldout: Path = AUDIT_DIR / "heldout") -> list[str]:
    """What departs from ``LOCK`` (empty when every held-out line is locked and unchanged, in order)."""
    locked = read_lock(heldout / LOCK_NAME)
    files = {p.name: p for p in sorted(heldout.glob("*.jsonl"))}
    problems = [f"{name}: locked, but the file is gone" for name in locked if name not in files]
    for name, path in files.items():
        now, before = line_hashes(path), locked.get(name, [])
        for i, digest in enumerate(before):
            if i >= len(now) or now[i] != digest:
                problems.append(
                    f"{name}: case line {i + 1} is not the locked one (edited, removed or moved); "
                    "held-out cases are never edited: append a new case instead"
                )
                break
        else:
            if len(now) > len(before):
                problems.append(
                    f"{name}: lines {len(before) + 1}-{len(now)} are not locked yet: "
                    "run python -m veriloop.verifiers.audit_files --lock"
                )
    return problems


def append_lock(heldout: Path = AUDIT_DIR / "heldout") -> int:
    """Lock the lines appended since the last lock; returns how many.  Refuses if a locked line changed."""
    lock = heldout / LOCK_NAME
    locked = read_lock(lock)
    changed = [p for p in check_lock(heldout) if "not locked yet" not in p]
    if changed:
        raise DatasetError("the held-out files depart from their lock:\n" + "\n".join(changed))
    new = []
    for path in sorted(heldout.glob("*.jsonl")):
        new += [f"{path.name} {d}\n" for d in line_hashes(path)[len(locked.get(path.name, [])) :]]
    text = lock.read_text(encoding="utf-8") if lock.exists() else _LOCK_HEADER
    lock.write_text(text + "".join(new), encoding="utf-8")
    return len(new)


def main(argv: list[str]) -> int:
    if argv != ["--lock"]:
        print(
            "usage: python -m veriloop.verifiers.audit_files --lock\n\n"
            "Append the sha256 of every held-out case line added since the last lock to heldout/LOCK\n"
            "(refuses when a locked line was edited, removed or moved)."
        )
        return 0 if argv in (["-h"], ["--help"]) else 2
    print(f"locked {append_lock()} new held-out case line(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
