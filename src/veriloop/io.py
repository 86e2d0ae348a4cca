"""Atomic files: write to a temporary name in the same directory, then rename.

A reader (or a resumed run) sees either the old file or the new one, never half of one.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import yaml

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a run directory is for people to read
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_write_yaml(path: str | Path, obj) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict], compress: bool = False) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    atomic_write_bytes(path, gzip.compress(data, mtime=0) if compress else data)


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
