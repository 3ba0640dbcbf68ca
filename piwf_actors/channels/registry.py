"""Which channel types this installation has, and the module behind each.

The adapters are listed by name in `ADAPTERS`, as dramatiq lists its
middleware: a reader finds every adapter here, and adding one is its module
(`CHANNEL_TYPE`, `PROFILE_SECTION`, `UPDATE_ORDER`, `options(settings)` and
`open_channel(profile, token, options)`, see docs/channels.md) plus one line
in this table. What a host
tells an adapter (`HostConfig.channel_options[<type>]`, e.g. Telegram's
`api_base`) is a plain mapping the adapter turns into its own options
(`adapter_options`), so neither the host nor its config names an adapter's
settings. `[<type>.<profile>]` tables
in channels.toml configure them; a type not listed here is refused when the
file is read. An adapter module is imported on first use: when a table of
its type is read (its `PROFILE_SECTION` checks it), a profile of its type
starts, or the store moves a cursor of its type (its `UPDATE_ORDER`). So
reading channels.toml imports only the adapters it names, and an adapter
keeps a heavy dependency (an SDK) out of its module's imports: it imports it
in `open_channel`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from piwf_actors.channels.base import ProfileSection, UpdateOrder

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


def adapter_options(channel_type: str, settings: Mapping[str, Any] | None = None) -> object:
    """What the adapter of `channel_type` makes of `settings` (`HostConfig.channel_options[<type>]`):
    the `options` its `open_channel` takes. Imports the adapter. Raises LookupError for a type not
    listed and ValueError for settings the adapter refuses (an unknown key, a wrong type)."""
    return channel_module(channel_type).options(dict(settings or {}))


def profile_section(channel_type: str) -> ProfileSection:
    """What the `[<channel_type>.<profile>]` tables hold (the adapter's `PROFILE_SECTION`)."""
    section: ProfileSection = channel_module(channel_type).PROFILE_SECTION
    return section


def update_order(channel_type: str) -> UpdateOrder:
    """How the cursor of `channel_type`'s update streams reads (the adapter's `UPDATE_ORDER`)."""
    order: UpdateOrder = channel_module(channel_type).UPDATE_ORDER
    return order
