"""The values a run holds: JSON that every view can show, checked where a value enters.

A run's input, its node outputs, the messages sent to it, the answers and submissions it gets and the
outputs a person confirms for its effects are stored as canonical JSON and shown by run.get,
run.events, watches, `piwf show` and `piwf graph`, inside envelopes of their own. So a value is
JSON — text, finite numbers, true/false, null, lists, maps with text keys — and nested at most
`MAX_VALUE_DEPTH` lists and maps deep: a frame holds at most 32 (docs/protocol.md §1), and the
deepest envelope a value travels in (a watch event of a run view, a worker's launch) takes fewer than
the 12 left. The client door checks every value field with `json_value_problem`
(protocol/payloads.py), the worker checks what a node returns or sends (worker/output_check.py), the
writer what it gathers from child runs (store/commands/child_runs.py).

A leaf: imports nothing of the package.
"""

from __future__ import annotations

import math
from typing import Any

#: The deepest a value may nest: `[]` and `{}` are 1 deep, `{"a": [1]}` 2 (scalars count 0).
MAX_VALUE_DEPTH = 20

_PATH_CHARS = 120
_JSON_KINDS = "values are JSON: text, finite numbers, true/false, null, lists and maps with text keys"


class _Bad(Exception):
    """Raised inside the walk; the path is collected on the way back up, innermost segment first."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def _segment(key: str) -> str:
    return "." + key if key.isidentifier() and len(key) <= 40 else f"[{key[:40]!r}]"


def _check_item(item: Any, depth: int, max_depth: int) -> None:
    """Raise _Bad if `item`, found `depth` containers deep, breaks a rule (the common scalars cost one
    type check; subclasses of the JSON types pass, as the JSON encoder takes them)."""
    kind = type(item)
    if kind is str or item is None or kind is bool or kind is int:
        return
    if isinstance(item, float):
        if not math.isfinite(item):
            raise _Bad("is NaN or infinite, which cannot be stored")
        return
    if isinstance(item, (dict, list, tuple)):
        if depth + 1 > max_depth:
            raise _Bad(f"nests deeper than {max_depth} lists and maps (the most a view can show)")
        _walk(item, depth + 1, max_depth)
        return
    if isinstance(item, (str, int)):
        return
    raise _Bad(_kind_problem(item))


#: Types that are fine wherever they are (the common case costs one lookup per item).
_PLAIN = frozenset({str, int, bool, type(None)})


def _walk(value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int, max_depth: int) -> None:
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str and not isinstance(key, str):
                raise _Bad(f"has a map key of type {type(key).__name__} (map keys are text)")
        pairs: Any = value.items()
    else:
        pairs = enumerate(value)
    for where, item in pairs:
        kind = type(item)
        if kind in _PLAIN or (kind is float and math.isfinite(item)):
            continue
        try:
            _check_item(item, depth, max_depth)
        except _Bad as bad:
            bad.path.append(_segment(where) if isinstance(where, str) else f"[{where}]")
            raise


def _kind_problem(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"holds binary data ({len(value)} bytes); {_JSON_KINDS} (send binary as text, e.g. base64)"
    return f"holds a value of type {type(value).__name__}; {_JSON_KINDS}"


def json_value_problem(value: Any, what: str = "value", *, max_depth: int = MAX_VALUE_DEPTH) -> str | None:
    """Why `value` cannot be a value of a run, in one line naming where (`what.items[2].name`), or None.

    Checks types (bool, int, finite float, str, None, and lists, tuples and maps with str keys of
    them) and nesting (`max_depth`). Ints are not range-checked here: the wire (msgpack) does that.
    Walks at most `max_depth` + 1 levels, so a self-referencing list is refused, not followed.
    """
    try:
        _check_item(value, 0, max_depth)
    except _Bad as bad:
        where = what + "".join(reversed(bad.path))
        if len(where) > _PATH_CHARS:
            where = where[: _PATH_CHARS - 1] + "…"
        return f"{where} {bad.problem}"
    return None
