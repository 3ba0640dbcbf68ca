"""Canonical JSON: the form every stored document and every fingerprint uses."""

from __future__ import annotations

import hashlib
import json
from typing import Any

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text, no NaN: equal values give equal text."""
    return _CANONICAL.encode(value)


def fingerprint(value: Any) -> str:
    """sha256 hex of the canonical JSON of `value` (bytes are hex-encoded first)."""
    try:
        text = canonical_json(value)  # the common case: already plain JSON
    except TypeError:
        text = canonical_json(_plain(value))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def token_hash(token: str | bytes) -> str:
    data = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(data).hexdigest()
