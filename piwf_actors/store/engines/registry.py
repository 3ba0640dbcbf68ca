"""The engines the store runs on, listed, and how a database finds its engine.

A new engine is one more entry in `ENGINES` (and its module beside `sqlite.py`): its URL schemes
are then accepted by `--database` and `$PIWF_DATABASE_URL`, its locations open, and every
question the store asks is answered by it. Importing this module imports no driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from piwf_actors.errors import StoreRefused
from piwf_actors.store.engines.base import DatabaseLocation, Engine
from piwf_actors.store.engines.postgresql import POSTGRESQL
from piwf_actors.store.engines.sqlite import SQLITE

#: Every engine, in the order their URL schemes and locations are tried.
ENGINES: tuple[Engine, ...] = (SQLITE, POSTGRESQL)


def engine_for(location: Any) -> Engine:
    """The engine of a database location; StoreRefused (one line) for anything that is none."""
    for engine in ENGINES:
        if engine.owns(location):
            return engine
    kinds = " or ".join(engine.location_hint for engine in ENGINES)
    raise StoreRefused(str(location), f"not a database location ({kinds})")


def engine_named(name: Any) -> Engine | None:
    """The engine a state report names (`engine`), or None."""
    return next((engine for engine in ENGINES if engine.name == name), None)


def parse_database_url(text: str, *, relative_to: Path | None = None) -> DatabaseLocation:
    """A URL of one of the engines' schemes (`sqlite:///abs/path`, `postgresql://…`), or a plain path:
    a file (the engine that owns paths opens it: SQLite), relative to `relative_to` when given.
    ValueError (one line) otherwise."""
    text = text.strip()
    if not text:
        raise ValueError("the database URL is empty")
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if not scheme:
        path = Path(text).expanduser()
        return path if path.is_absolute() or relative_to is None else relative_to / path
    for engine in ENGINES:
        if scheme in engine.schemes:
            return engine.parse_url(text)
    hints = " or ".join(engine.url_hint for engine in ENGINES)
    raise ValueError(f"unsupported database URL scheme {scheme!r} (use {hints})")


def url_examples() -> str:
    """One URL of each engine, for help texts ("sqlite:///path/state.db or postgresql://…")."""
    return " or ".join(engine.url_example for engine in ENGINES)


def driver_errors() -> tuple[type[BaseException], ...]:
    """Every error a store connection of any engine can raise, for code that reads through a
    `StoreReader` without knowing which engine is behind it (in an `except` clause: evaluated when
    an exception is on its way, so no driver is imported for it)."""
    found: list[type[BaseException]] = []
    for engine in ENGINES:
        found.extend(error for error in engine.driver_errors if error not in found)
    return tuple(found)
