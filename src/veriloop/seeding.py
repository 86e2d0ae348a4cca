"""Seeds derived from a run seed and named parts, so every random draw has its own stream."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, *parts) -> int:
    """A 63-bit seed for ``seed`` and the named parts (step, purpose, ...), independent of any other draw:
    the first 8 bytes of ``sha256("seed/part1/part2/...")``."""
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
