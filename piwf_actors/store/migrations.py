"""Forward-only schema migrations, numbered by `PRAGMA user_version`.

Each migration runs in one transaction together with the version bump, so a
crash mid-migration leaves the previous version intact.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import peewee as pw

from piwf_actors.store import schema

# peewee's create_tables needs models bound to a database; binding is global
# to the model classes, so it is serialised (two hosts may migrate at once).
_BIND_LOCK = threading.Lock()


def _v1_initial(db: pw.SqliteDatabase) -> None:
    with _BIND_LOCK, db.bind_ctx(schema.ALL_MODELS):
        db.create_tables(schema.ALL_MODELS, safe=False)
    db.execute_sql("INSERT INTO host_state (id, epoch) VALUES (1, 0)")


MIGRATIONS: list[Callable[[pw.SqliteDatabase], None]] = [_v1_initial]
LATEST_VERSION = len(MIGRATIONS)


def migrate(db: pw.SqliteDatabase, current: int, application_id: int) -> None:
    """Apply migrations current+1 .. LATEST_VERSION, each atomically."""
    for version in range(current + 1, LATEST_VERSION + 1):
        with db.atomic():
            MIGRATIONS[version - 1](db)
            db.execute_sql(f"PRAGMA application_id = {int(application_id)}")
            db.execute_sql(f"PRAGMA user_version = {int(version)}")
