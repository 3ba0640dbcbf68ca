"""Which channel types this installation has, and the module behind each.

A channel type is a module of `piwf_actors.channels` that declares
`CHANNEL_TYPE` and `open_channel(profile, token, options)`: adding an
adapter is adding such a module (docs/channels.md), and `[<type>.<profile>]`
tables in channels.toml configure it.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import piwf_actors.channels as _package

# Modules of the package that are not adapters (skipped without importing them).
_NOT_ADAPTERS = frozenset({"base", "config", "private_files", "registry", "text", "telegram_api", "fake_telegram",
                           "fake_telegram_wire"})


def known_channel_types() -> tuple[str, ...]:
    """Every module of the package that declares `CHANNEL_TYPE`, by that type, sorted."""
    found = []
    for module in pkgutil.iter_modules(_package.__path__):
        if module.name not in _NOT_ADAPTERS:
            channel_type = getattr(channel_module(module.name), "CHANNEL_TYPE", None)
            if isinstance(channel_type, str):
                found.append(channel_type)
    return tuple(sorted(found))


def channel_module(channel_type: str) -> ModuleType:
    """The adapter module of `channel_type` (`piwf_actors.channels.<type>`)."""
    return importlib.import_module(f"{_package.__name__}.{channel_type}")
