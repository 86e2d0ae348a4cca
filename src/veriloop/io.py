"""Atomic files: write to a temporary name in the same directory, then rename.

A reader (or a resumed run) sees either the old file or the new one, never half of one: the data is
fsync'ed before the rename and the directory after it, so a power loss cannot undo the rename while a
later write (a checkpoint that counts on this file) survives.  A kill mid-write leaves at most a hidden
``.NAME.XXXX.tmp`` beside the file (``remove_temp_files`` clears them).  A directory is built under a
hidden name and renamed into place whole (``replace_dir``).
Also: reading JSONL back, and the names of per-step files (``step_name`` / ``step_of``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path

import yaml

from veriloop.errors import InputError

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
    fsync_dir(path.parent)


def fsync_dir(directory: str | Path) -> None:
    """Make the names in ``directory`` (a rename into it, an unlink) durable; a no-op where the OS or the file
    system cannot fsync a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    """Flush a file someone else wrote (``torch.save``, ``save_pretrained``) to disk."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def replace_dir(built: str | Path, target: str | Path) -> None:
    """Put the directory ``built`` (a hidden sibling of ``target``, written whole) in place of ``target``: its
    files and directories fsync'ed, then renamed; an earlier ``target`` is set aside as ``.NAME.old`` for the
    rename and removed after it.  A kill leaves ``target`` (the old one or the new one), or no ``target`` and
    the hidden ``.NAME.old``/``built`` directories, never a mix of old and new files."""
    built, target = Path(built), Path(target)
    for p in sorted(built.rglob("*"), reverse=True):  # what a directory holds before the directory
        if p.is_dir():
            fsync_dir(p)
        else:
            fsync_file(p)
    fsync_dir(built)
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(built, target)
    fsync_dir(target.parent)
    if old.exists():
        shutil.rmtree(old)


def remove_temp_files(directory: str | Path) -> list[Path]:
    """Remove what a killed ``atomic_write_*`` left in ``directory`` (``.NAME.XXXX.tmp`` files); returns them."""
    directory = Path(directory)
    found = [p for p in directory.glob(".*.tmp") if p.is_file()] if directory.is_dir() else []
    for p in found:
        p.unlink()
    return found


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_write_yaml(path: str | Path, obj) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict], compress: bool = False) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    atomic_write_bytes(path, gzip.compress(data, mtime=0) if compress else data)


def step_name(step: int, prefix: str = "step-", suffix: str = "") -> str:
    """The name of step ``step`` (>= 0): ``step-000001``, ``step-000001.jsonl.gz``,
    ``labels-step-000001.jsonl``; six digits at least, so names sort by step."""
    return f"{prefix}{step:06d}{suffix}"


def step_of(name: str, prefix: str = "step-", suffix: str = "") -> int | None:
    """The step a name made by ``step_name(step, prefix, suffix)`` carries; None for any other name."""
    m = re.fullmatch(re.escape(prefix) + "([0-9]+)" + re.escape(suffix), name)
    return int(m.group(1)) if m else None


def steps_in(directory: str | Path, prefix: str = "step-", suffix: str = "") -> list[tuple[int, Path]]:
    """``(step, path)`` of every entry of ``directory`` named by ``step_name``, in step order."""
    directory = Path(directory)
    found = [(step_of(p.name, prefix, suffix), p) for p in directory.iterdir()] if directory.is_dir() else []
    return sorted((s, p) for s, p in found if s is not None)


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file (gzipped if it ends in .gz); a line that is not JSON names the file and line."""
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:  # cut short (EOFError), not gzip (BadGzipFile), bad data
            raise InputError(f"{path}: not a complete gzip file ({type(e).__name__}: {e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    return rows
