"""`BatchConnection`: the connection a write batch's commands see, with the run events they append
inserted together.

Every transition appends a run event (store/events.py), so a trivial run costs seven of them,
each a statement of its own (and on PostgreSQL a round trip). Within one transaction nobody
outside can see them before COMMIT, so a batch holds them back and inserts them with one
`executemany` just before anything could look at them:

- before COMMIT;
- before any statement that names `run_event` (a command reading a run's events, prune);
- before a savepoint is opened or released. What is still held at a rollback to a
  savepoint was appended inside it (every savepoint opened flushed what came before), so it
  is dropped, never inserted: on PostgreSQL the transaction is aborted at that point (the
  failed statement that brought the rollback) and would refuse the insert. After a rollback
  the sequence numbers are read again.

A run's next `seq` is read once per batch (max + 1, and whether the run exists: an event
for a run that does not exist is `NotFound`, as before), then counted here. The events
held back count in `total_changes`, so a command that refuses after appending one is
undone like one that wrote a row (store/batch.py). Everything else passes through to the
store connection unchanged.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import NotFound
from piwf_actors.store.dialect import dialect_of

_INSERT = ("INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
_LAST_SEQ = ("SELECT (SELECT coalesce(max(seq), 0) FROM run_event WHERE run_id = run.run_id) "
             "FROM run WHERE run.run_id = ?")
#: Statements before which the held events go in (a savepoint boundary, the end of the transaction).
_BOUNDARIES = ("SAVEPOINT", "RELEASE", "COMMIT")


class BatchConnection:
    __slots__ = ("_conn", "_rows", "_next_seq", "dialect")

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.dialect = dialect_of(conn)
        self._rows: list[tuple[Any, ...]] = []
        self._next_seq: dict[str, int] = {}

    # --- events ------------------------------------------------------------------------------

    def append_event(self, run_id: str, kind: str, now: float, node_id: str | None, attempt_id: str | None,
                     payload: str | None) -> int:
        """Hold back one event of `run_id` (payload already encoded); returns its seq."""
        seq = self._next_seq.get(run_id)
        if seq is None:
            row = self._conn.execute(_LAST_SEQ, (run_id,)).fetchone()
            if row is None:
                raise NotFound("run", run_id)
            seq = int(row[0]) + 1
        self._next_seq[run_id] = seq + 1
        self._rows.append((run_id, seq, kind, node_id, attempt_id, payload, now))
        return seq

    def flush_events(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            self._conn.executemany(_INSERT, rows)

    # --- the connection ------------------------------------------------------------------------

    def execute(self, sql: str, params: Any = ()) -> Any:
        if self._rows:
            head = sql.lstrip()[:9].upper()
            if head.startswith("ROLLBACK"):
                self._rows = []  # undone with the transaction or the savepoint they were appended in
            elif "run_event" in sql or head.startswith(_BOUNDARIES):
                self.flush_events()
        cursor = self._conn.execute(sql, params)
        if sql.lstrip()[:8].upper().startswith("ROLLBACK"):
            self._next_seq.clear()  # rolled back (to a savepoint): the numbers are read again
        elif "run_event" in sql and "DELETE" in sql.upper():
            self._next_seq.clear()  # events deleted (prune): read again
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        self.flush_events()
        return self._conn.executemany(sql, rows)

    @property
    def total_changes(self) -> int:
        # The events held back count as written, so a refusal after one is undone (store/batch.py);
        # once flushed they are in the connection's own count instead.
        return self._conn.total_changes + len(self._rows)

    @property
    def in_transaction(self) -> bool:
        return bool(self._conn.in_transaction)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
