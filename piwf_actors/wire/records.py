"""Reading the plain dicts the host's queries and write commands return into typed records.

The checks `results.py` builds its `from_wire` on: each raises one
`DecodeError` naming the record and the key, and `bool` never passes for a
number. `WireReadable` gives a record read access by wire key, for code
written against the dicts `HostHandle` used to return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from piwf_actors.errors import DecodeError

Outcome = Literal["accepted", "adopted"]


def as_map(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise DecodeError(f"{what}: expected a map, got {type(data).__name__}")
    return data


def need(data: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise DecodeError(f"{what}: missing {key!r}") from None


def typed(value: Any, types: tuple[type, ...], key: str, what: str, optional: bool) -> Any:
    if value is None and optional:
        return None
    # bool is an int: never accept it where a number is meant.
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise DecodeError(f"{what}: {key!r} must be {'/'.join(t.__name__ for t in types)}"
                          f"{' or None' if optional else ''}, got {type(value).__name__}")
    return value


def str_field(data: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = data.get(key) if optional else need(data, key, what)
    return typed(value, (str,), key, what, optional)


def int_field(data: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = data.get(key) if optional else need(data, key, what)
    return typed(value, (int,), key, what, optional)


def num_field(data: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = data.get(key) if optional else need(data, key, what)
    return typed(value, (int, float), key, what, optional)


def bool_field(data: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = data.get(key) if optional else need(data, key, what)
    return typed(value, (bool,), key, what, optional)


def outcome_of(data: Mapping[str, Any], what: str) -> Outcome:
    outcome = need(data, "outcome", what)
    if outcome not in ("accepted", "adopted"):
        raise DecodeError(f"{what}: outcome must be accepted or adopted, got {outcome!r}")
    return outcome  # type: ignore[no-any-return]


def extra_fields(data: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in known}


def recorded_parts(data: Any, what: str) -> tuple[Outcome, Mapping[str, Any], Any]:
    """Split a recorded write's answer {outcome, receipt, revision} (see store/commands/idempotency.py)."""
    data = as_map(data, what)
    return outcome_of(data, what), as_map(need(data, "receipt", what), f"{what} receipt"), data.get("revision")


def recorded_dict(outcome: str, receipt: dict[str, Any], revision: Any) -> dict[str, Any]:
    return {"outcome": outcome, "receipt": receipt, "revision": revision}


class WireReadable:
    """Read access by wire key, for code written against the dicts HostHandle used to return."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()
