"""`BatchConnection`: the connection a write batch's commands see, with the run events they append
and the finished node attempts they record inserted together.

Every transition appends a run event (store/events.py) and every node's result records an
attempt (store/commands/worker.py), so a trivial run costs seven events and three attempts,
each a statement of its own (and on PostgreSQL a round trip). Within one transaction nobody
outside can see them before COMMIT, so a batch holds them back and inserts each kind with one
`executemany` just before anything could look at them:

- before COMMIT;
- before any statement that names their table (`run_event`, `node_attempt`: a command reading
  a run's events or attempts, prune);
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
from piwf_actors.store.engines.base import engine_of

_INSERT = ("INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
_LAST_SEQ = ("SELECT (SELECT coalesce(max(seq), 0) FROM run_event WHERE run_id = run.run_id) "
             "FROM run WHERE run.run_id = ?")
#: The same insert where the server numbers the event (`numbered_by_server`): max + 1 of the run's
#: events, NULL — refused by the primary key — when the run does not exist.
_INSERT_NUMBERED = ("INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at) "
                    "VALUES (?, (SELECT (SELECT coalesce(max(e.seq), 0) + 1 FROM run_event e "
                    "WHERE e.run_id = run.run_id) FROM run WHERE run.run_id = ?), ?, ?, ?, ?, ?)")
#: One event numbered and inserted at once, its seq returned (none: the run does not exist).
_INSERT_RETURNING = ("INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at) "
                     "SELECT run.run_id, (SELECT coalesce(max(seq), 0) + 1 FROM run_event WHERE run_id = run.run_id), "
                     "?, ?, ?, ?, ? FROM run WHERE run.run_id = ? RETURNING seq")
#: Statements before which the held events go in (a savepoint boundary, the end of the transaction).
_BOUNDARIES = ("SAVEPOINT", "RELEASE", "COMMIT")


class BatchConnection:
    __slots__ = ("_conn", "_rows", "_next_seq", "_held", "_appended", "_numbered_by_server", "engine")

    def __init__(self, conn: Any, *, numbered_by_server: bool = False) -> None:
        """`numbered_by_server`: the events are numbered by their INSERT, not from a read of the
        run's last seq per batch (on an engine that defers statements, the read would be a round
        trip of its own); `append_event` then returns None, and an event of a run that does not
        exist fails its insert instead of raising `NotFound` (the batch's pass with savepoints,
        which numbers them here, then refuses that command alone)."""
        self._conn = conn
        self.engine = engine_of(conn)
        self._numbered_by_server = numbered_by_server
        self._rows: list[tuple[Any, ...]] = []  # run events held back
        self._next_seq: dict[str, int] = {}
        self._held: dict[str, tuple[str, list[tuple[Any, ...]]]] = {}  # table → (INSERT, rows) held back
        self._appended = 0  # rows ever held back (events and rows): a change mark's part

    # --- events ------------------------------------------------------------------------------

    def append_event(self, run_id: str, kind: str, now: float, node_id: str | None, attempt_id: str | None,
                     payload: str | None, *, want_seq: bool = False) -> int | None:
        """Hold back one event of `run_id` (payload already encoded); returns its seq (None when the
        server numbers it, unless `want_seq`: then it is inserted at once, after the events held)."""
        if self._numbered_by_server and want_seq:
            self.flush_events()
            row = self._conn.execute(_INSERT_RETURNING, (kind, node_id, attempt_id, payload, now, run_id)).fetchone()
            if row is None:
                raise NotFound("run", run_id)
            return int(row[0])
        if self._numbered_by_server:
            self._appended += 1
            self._rows.append((run_id, run_id, kind, node_id, attempt_id, payload, now))
            return None
        seq = self._next_seq.get(run_id)
        if seq is None:
            row = self._conn.execute(_LAST_SEQ, (run_id,)).fetchone()
            if row is None:
                raise NotFound("run", run_id)
            seq = int(row[0]) + 1
        self._next_seq[run_id] = seq + 1
        self._appended += 1
        self._rows.append((run_id, seq, kind, node_id, attempt_id, payload, now))
        return seq

    def hold_insert(self, table: str, sql: str, row: tuple[Any, ...]) -> None:
        """Hold back one row of `sql` (an INSERT … VALUES into `table` that changes exactly one row and
        returns nothing; one statement per table)."""
        self._appended += 1
        held = self._held.get(table)
        if held is None:
            self._held[table] = (sql, [row])
        else:
            held[1].append(row)

    def flush_events(self) -> None:
        """Insert everything held back (events and rows)."""
        if self._rows:
            rows, self._rows = self._rows, []
            self._conn.executemany(_INSERT_NUMBERED if self._numbered_by_server else _INSERT, rows)
        if self._held:
            held, self._held = self._held, {}
            for sql, rows in held.values():
                self._conn.executemany(sql, rows)

    def _names_held(self, sql: str) -> bool:
        return ("run_event" in sql and bool(self._rows)) or any(table in sql for table in self._held)

    # --- the connection ------------------------------------------------------------------------

    def execute(self, sql: str, params: Any = ()) -> Any:
        if self._rows or self._held:
            head = sql.lstrip()[:9].upper()
            if head.startswith("ROLLBACK"):
                # Undone with the transaction or the savepoint they were appended in.
                self._rows, self._held = [], {}
            elif head.startswith(_BOUNDARIES) or self._names_held(sql):
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
        return self._conn.total_changes + len(self._rows) + sum(len(rows) for _, rows in self._held.values())

    def change_mark(self) -> tuple[Any, int]:
        """A mark for `changed_since`: what a command's refusal checks (never a round trip)."""
        return self.engine.change_mark(self._conn), self._appended

    def changed_since(self, mark: tuple[Any, int]) -> bool:
        """Whether anything was written or held back since `mark` (`Engine.changed_since`)."""
        conn_mark, appended = mark
        return self._appended != appended or self.engine.changed_since(self._conn, conn_mark)

    @property
    def in_transaction(self) -> bool:
        return bool(self._conn.in_transaction)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
