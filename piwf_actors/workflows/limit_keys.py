"""The text of a concurrency key: a canonical encoding of the value a workflow's key function returned.

Two runs share a slot exactly when their key functions returned equal JSON-like values, so the text is
a function of the value alone and different values never meet:

- a value is a string, an integer, a finite float, a boolean, None, or a list (tuple) or map (with
  string keys) of values, nested at most `MAX_DEPTH` deep; anything else (an object, a generator, a
  set, bytes, NaN, a map with other keys) is refused — `str()` of it would be a memory address, a new
  key for every run;
- the text is the value's canonical JSON (sorted keys, no spaces, integral floats as integers: `2.0`
  and `2` are one number), except that a string which reads as no JSON value and prints plainly is
  kept bare, so `eu` stays `eu` while `"1"` (which would read as the number 1) is quoted;
- a text longer than `MAX_KEPT` characters becomes its first `PREFIX` characters, `…`, and the sha256
  of the whole text: still readable, never cut into another key's text (it is longer than any kept
  text, and two long texts differ in their hashes).

Keys stored before this encoding kept their form for bare strings, numbers, booleans and None; map and
list keys were flattened (`a=1,b=2`) and long ones cut. docs/workflows.md ("Keys", under flow control) says
what that means for runs queued across an upgrade.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from piwf_actors.canonical import canonical_json

#: Nesting a key value may have (as a client frame may).
MAX_DEPTH = 32
#: Longest key text kept whole; a longer one is hashed.
MAX_KEPT = 200
#: Characters of a hashed key's text kept in front of its hash.
PREFIX = 150
#: Integral floats below this become integers (beyond it a float is not an exact integer anyway).
_EXACT_FLOAT = 2.0**53

EXPECTED = "a string, number, boolean, None, or a list or map with string keys of them"


class KeyValueError(ValueError):
    """The key value is not JSON-like; the message says what it met (a few words)."""


def key_text(value: Any) -> str:
    """The canonical text of a key value (see the module docstring). Raises KeyValueError."""
    plain = _plain(value, 0)
    if isinstance(plain, str) and _bare(plain):
        text = plain
    else:
        text = canonical_json(plain)
    if len(text) <= MAX_KEPT:
        return text
    return text[:PREFIX] + "…" + hashlib.sha256(text.encode()).hexdigest()


def _bare(text: str) -> bool:
    """A string that cannot be mistaken for the JSON of another value may be shown without quotes."""
    if not text.isprintable():
        return False
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


def _plain(value: Any, depth: int) -> Any:
    """`value` as plain JSON types (str, int, float, bool, None, list, dict), or KeyValueError."""
    if depth > MAX_DEPTH:
        raise KeyValueError(f"nesting deeper than {MAX_DEPTH}")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, enum.Enum) and isinstance(value, (str, int, float)):
        value = value.value  # a str/int enum member equals its value, so it is that key
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        if not math.isfinite(number):
            raise KeyValueError(repr(number))
        if number.is_integer() and abs(number) < _EXACT_FLOAT:
            return int(number)
        return number
    if isinstance(value, Mapping):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise KeyValueError(f"a map key {key!r} ({type(key).__name__})"[:200])
            plain[str.__str__(key)] = _plain(item, depth + 1)
        return plain
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    kind = type(value).__name__
    return _refuse(kind)


def _refuse(kind: str) -> Any:
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    raise KeyValueError(f"{article} {kind}")
