"""Read-only access to the state database.

Any actor may read through its own `StoreReader` (WAL lets readers run
beside the writer). A reader can never write: its connection is opened
with `mode=ro`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from piwf_actors.store.database import StoreOptions, connect


class StoreReader:
    def __init__(self, db_path: Path, options: StoreOptions = StoreOptions()) -> None:
        self._db = connect(db_path, options, read_only=True)

    @property
    def conn(self) -> sqlite3.Connection:
        return self._db.connection()

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run several queries against one consistent view (a read transaction)."""
        conn = self.conn
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("COMMIT")

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        return self.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()
