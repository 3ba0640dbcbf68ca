"""Which channel types this installation has, and the module behind each.

The adapters are listed by name in `ADAPTERS`, as dramatiq lists its
middleware: a reader finds every adapter here, and adding one is its module
(`CHANNEL_TYPE` and `open_channel(profile, token, options)`, see
docs/channels.md) plus one line in this table. `[<type>.<profile>]` tables
in channels.toml configure them; a type not listed here is refused when the
file is read. An adapter module is imported only when a profile of its type
starts, so reading channels.toml imports no adapter (and no adapter's
dependencies).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType, ModuleType

#: Channel type (the table name in channels.toml) → the module that implements it. Each module
#: declares the same `CHANNEL_TYPE` (tests/channels/test_channel_registry.py checks it).
ADAPTERS: Mapping[str, str] = MappingProxyType({
    "telegram": "piwf_actors.channels.telegram",
})


def known_channel_types() -> tuple[str, ...]:
    """Every listed channel type, sorted."""
    return tuple(sorted(ADAPTERS))


def channel_module(channel_type: str) -> ModuleType:
    """The adapter module of `channel_type`, imported on first use.

    Raises LookupError for a type that is not listed (channels.toml never
    gets that far: its check refuses the file first).
    """
    try:
        module_name = ADAPTERS[channel_type]
    except KeyError:
        known = ", ".join(known_channel_types())
        raise LookupError(f"no channel adapter for type {channel_type!r} (known: {known})") from None
    return importlib.import_module(module_name)
