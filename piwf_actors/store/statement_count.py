"""`CountingConnection`: the write batch's connection, counting the statements it sends.

The writer reports how many SQL statements its batches cost (`writer.statements` in host.status,
bench/throughput.py prints them per run): a statement is one `execute` or one `executemany` handed
to the driver (BEGIN and COMMIT included), whatever the number of rows an `executemany` carries.
That is the figure the commands control (store/commands/*), and on both engines: on SQLite each
statement is one prepare-and-step in the writer's thread, on PostgreSQL (outside pipeline mode)
one round trip.

It sits under `BatchConnection` (batch_connection.py), so the held-back rows that one flush inserts
count once, as the database sees them. Counting is one integer addition per statement; `trace`
(None unless a diagnosis asks for it, bench/statements.py) is called with each statement's text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CountingConnection:
    __slots__ = ("_conn", "engine", "statements", "trace")

    def __init__(self, conn: Any, trace: Callable[[str], None] | None = None) -> None:
        self._conn = conn
        self.engine = conn.engine
        self.statements = 0
        self.trace = trace

    def execute(self, sql: str, params: Any = ()) -> Any:
        self.statements += 1
        if self.trace is not None:
            self.trace(sql)
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> Any:
        self.statements += 1
        if self.trace is not None:
            self.trace(sql)
        return self._conn.executemany(sql, rows)

    @property
    def total_changes(self) -> int:
        return int(self._conn.total_changes)

    @property
    def in_transaction(self) -> bool:
        return bool(self._conn.in_transaction)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
