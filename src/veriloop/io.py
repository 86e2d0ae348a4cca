"""Atomic files: write to a temporary name in the same directory, then rename.

A reader (or a resumed run) sees either the old file or the new one, never half of one: the data is
fsync'ed before the rename and the directory after it, so a power loss cannot undo the rename while a
later write (a checkpoint that counts on this file) survives.  A kill mid-write leaves at most a hidden
``.NAME.XXXX.tmp`` beside the file (``remove_temp_files`` clears them).  A directory is built under a
hidden name and renamed into place whole (``replace_dir``).
Checked files (``write_checked`` / ``read_checked``): a directory's ``manifest.json`` holds the size and
SHA-256 of the files in it that are read back later (a run's ``config.yaml``, a pipeline's
``pipeline.json``), so a file cut or changed on disk is named instead of read as something else.
Also: reading JSONL back, and the names of per-step files (``step_name`` / ``step_of``).
"""

from __future__ import annotations

import gzip
import hashlib
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


MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(directory: Path) -> tuple[dict | None, str]:
    """(the manifest, '') ; (None, '') where there is none; (None, what is wrong) where it cannot be read."""
    path = directory / MANIFEST
    if not path.is_file():
        return None, ""
    try:
        manifest = json.loads(path.read_bytes())
        files = {str(e["path"]): e for e in manifest["files"]}
        if not all(isinstance(e["size"], int) and isinstance(e["sha256"], str) for e in files.values()):
            raise TypeError("each file needs an integer size and a string sha256")
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"{MANIFEST} is unreadable ({type(e).__name__}: {e})"
    manifest["files"] = files
    return manifest, ""


def _write_manifest(directory: Path, files: dict) -> None:
    atomic_write_json(directory / MANIFEST, {"format": MANIFEST_FORMAT, "files": list(files.values())})


def write_checked(directory: str | Path, name: str, data: bytes) -> None:
    """``directory/name`` written atomically, with its size and SHA-256 in ``directory/manifest.json``.

    The two files cannot be replaced at once, so the manifest first accepts the content on disk or the new
    one (``or``), then the file is replaced, then the manifest names the new content alone: a kill anywhere
    in between leaves a pair that checks."""
    directory, path = Path(directory), Path(directory) / name
    manifest, _ = _read_manifest(directory)  # an unreadable manifest is replaced: this write makes it right
    files = dict(manifest["files"]) if manifest else {}
    entry = {"path": name, "size": len(data), "sha256": sha256_of(data)}
    on_disk = path.read_bytes() if path.is_file() else None
    if on_disk is not None and on_disk != data:
        either = {**entry, "or": {"size": len(on_disk), "sha256": sha256_of(on_disk)}}
        _write_manifest(directory, {**files, name: either})
    atomic_write_bytes(path, data)
    _write_manifest(directory, {**files, name: entry})


def check_file(directory: str | Path, name: str) -> tuple[str, str]:
    """``("ok", "")`` when ``directory/name`` has the size and SHA-256 that ``manifest.json`` gives it;
    ``("unlisted", why)`` when no manifest lists it (written before manifests, or never recorded); else
    ``("bad", what is wrong)``."""
    directory = Path(directory)
    manifest, unreadable = _read_manifest(directory)
    if unreadable:
        return "bad", unreadable
    if manifest is None or name not in manifest["files"]:
        return "unlisted", f"{MANIFEST} does not list it" if manifest else f"there is no {MANIFEST}"
    path = directory / name
    if not path.is_file():
        return "bad", f"it is missing ({MANIFEST} lists it)"
    entry, data = manifest["files"][name], path.read_bytes()
    accepted = [entry, *([entry["or"]] if isinstance(entry.get("or"), dict) else [])]
    if any(len(data) == int(e["size"]) and sha256_of(data) == str(e["sha256"]) for e in accepted):
        return "ok", ""
    if len(data) != int(entry["size"]):
        return "bad", f"it has {len(data)} bytes, {MANIFEST} says {entry['size']} (cut short or changed)"
    return "bad", f"its content does not match its SHA-256 in {MANIFEST} (changed on disk)"


def read_checked(directory: str | Path, name: str, remedy: str) -> tuple[bytes, bool]:
    """The bytes of ``directory/name`` and whether its manifest vouched for them (False: no manifest lists
    it, as in a directory written before manifests); a file that does not match is an InputError naming it,
    what is wrong and ``remedy`` (what to do)."""
    status, why = check_file(directory, name)
    path = Path(directory) / name
    if status == "bad":
        raise InputError(f"{path} is damaged: {why}; {remedy}")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return path.read_bytes(), status == "ok"


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
