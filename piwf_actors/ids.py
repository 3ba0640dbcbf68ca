"""Time-ordered identifiers for rows written on the hot path.

Random keys scatter inserts across the primary-key b-tree (STYLE.md measured
~4.6x slower batched inserts with uuid4). These ids are 48 bits of
millisecond time followed by 80 random bits, Crockford base32 (ULID layout),
so they sort by creation time and stay unique across processes.

An id that must come out the same when made twice (a restart of a run at a
revision, a schedule's fire, a fan-out's child: so that a second attempt adopts
the first) is `derived_id`: the same layout, its time part from a time the
inputs fix, its last 80 bits from a hash of them. Every run id has this one
shape, so `piwf` and `piwf-top` can show, cut and take back all of them alike.
"""

from __future__ import annotations

import hashlib
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
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_base32((_millis(time.time() if now is None else now) << 80) | rand, 26)}"


def _millis(at: float) -> int:
    """The 48-bit millisecond time an id starts with."""
    return int(at * 1000) & ((1 << 48) - 1)


def derived_id(prefix: str, key: str, at: float) -> str:
    """`prefix_` + 26 base32 characters like `new_id`: the time part from `at`, the rest from sha256(`key`).
    The same (key, at) always give the same id; time-ordered like new ids (STYLE.md: hot-path keys)."""
    rest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:10], "big")
    return f"{prefix}_{_base32((_millis(at) << 80) | rest, 26)}"


def id_time(value: str) -> float | None:
    """The time (seconds) an id of this module's shape was made at; None for another string."""
    _, _, body = value.rpartition("_")
    if len(body) != 26 or any(char not in _ALPHABET for char in body):
        return None
    number = 0
    for char in body[:10]:
        number = number * 32 + _ALPHABET.index(char)
    return number / 1000
