"""Where a trained model may be exported: never over the shipped base.

``veriloop/assets/base`` is the model the docs' tables were measured on (``builtin:base``); a
remake is a draw (docs/concepts/builtin-task.md: a seed moves held-out accuracy by several points), so writing
one over it would silently change what ``builtin:base`` means.  ``refuse_shipped_base`` refuses an export into
it (or inside it); ``shipped_base_sums`` lists its files' SHA-256 sums, which
``src/veriloop/assets/base.sha256`` records and ``tests/test_shipped_base_on_cpu.py`` checks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from veriloop.errors import InputError
from veriloop.models.loading import BUILTIN_BASE

SUMS_FILE = BUILTIN_BASE.parent / "base.sha256"  # sha256sum's format: "<hex>  <name>" per file, sorted by name


def refuse_shipped_base(export: str, base: Path = BUILTIN_BASE) -> None:
    """An ``InputError`` naming the path and the alternative if ``export`` is the shipped base or inside it."""
    if not str(export).strip():
        return
    target, shipped = Path(export).expanduser().resolve(), base.resolve()
    if target == shipped or shipped in target.parents:
        raise InputError(
            f"export {export!r} is the shipped base model ({shipped}), which builtin:base loads and every measured "
            "table was made with: a remake is written to its run directory (RUN_DIR/final) or exported to a "
            "directory of its own, e.g. --export runs/base-remake/model, and compared before anything replaces "
            "the shipped one"
        )


def shipped_base_sums(base: Path = BUILTIN_BASE) -> str:
    """``sha256sum``'s lines for every file of ``base``, sorted by name."""
    return "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in sorted(base.iterdir()) if p.is_file()
    )
