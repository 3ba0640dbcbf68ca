"""Time-ordered identifiers for rows written on the hot path.

Random keys scatter inserts across the primary-key b-tree (STYLE.md measured
~4.6x slower batched inserts with uuid4). These ids are 48 bits of
millisecond time followed by 80 random bits, Crockford base32 (ULID layout),
so they sort by creation time and stay unique across processes.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str, now: float | None = None) -> str:
    """`prefix_` + 26 base32 characters; later calls sort after earlier ones (per ms)."""
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_base32((millis << 80) | rand, 26)}"
