"""Opening the state database, on whichever engine its location names.

The state lives in a SQLite file (a `Path`) or a database on a server (a `ServerDatabase`, such as
`engines.postgresql.PostgresDatabase`): a `DatabaseLocation`. Its engine (`store/engines/`) sets the
pragmas or session settings and decides whether the database may be opened at all: a state file is
refused (never silently re-created) when it is empty, is not SQLite, is SQLite but not ours, is
corrupt, or carries a newer schema than this code knows; a PostgreSQL database when it cannot be
reached, holds tables that are not ours, or carries a newer schema.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.paths import DatabaseLocation, tighten_file
from piwf_actors.store.engines.base import StoreOptions, engine_of
from piwf_actors.store.engines.registry import engine_for


def connect(location: DatabaseLocation, options: StoreOptions = StoreOptions(), *, read_only: bool = False) -> Any:
    """A peewee database for `location`, pragmas or session settings applied on connect (its
    engine's `connect`): read-only ones can never write. Connects lazily."""
    return engine_for(location).connect(location, options, read_only=read_only)


def open_store(location: DatabaseLocation, options: StoreOptions = StoreOptions()) -> Any:
    """Open (creating or migrating as needed) the read-write state database.

    Runs in the caller's thread; the returned database's connection belongs to
    that thread. Raises StoreRefused for anything that is not a healthy piwf
    database of a version this code can migrate.
    """
    engine = engine_for(location)
    db = engine.open_store(location, options)
    for path in engine.private_files(location):
        tighten_file(path)
    return db


def schema_version(db: Any) -> int:
    return engine_of(db).schema_version(db.connection())


def idle_checkpoint(db: Any, options: StoreOptions) -> bool:
    """Cut the engine's write-ahead log back to nothing while the writer is idle; True when done (or
    nothing to do: PostgreSQL manages its own WAL). Readers in the WAL make it give up at once
    instead of stalling the writer behind a long read (a backup): the caller tries again on its
    next idle tick."""
    return engine_of(db).truncate_wal(db, options) == "done"
