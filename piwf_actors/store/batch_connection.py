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
for a run that does not exist is `NotFound`, as before), then counted here; a command that
knows it already tells it instead (`prime_seq`: a run it just inserted has none, a worker
message's context read carries the run's last seq, `execute_beside`). The blobs a batch
stored are remembered (`blob_stored`), so storing the same content again in the batch (every
start of one workflow stores its snapshot and graph) costs no statement. The events
held back count in `total_changes`, so a command that refuses after appending one is
undone like one that wrote a row (store/batch.py). Everything else passes through to the
store connection unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from piwf_actors.errors import NotFound
from piwf_actors.store.engines.base import engine_of

_INSERT = ("INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
_LAST_SEQ = ("SELECT (SELECT coalesce(max(seq), 0) FROM run_event WHERE run_id = run.run_id) "
             "FROM run WHERE run.run_id = ?")
#: Statements before which the held events go in (a savepoint boundary, the end of the transaction).
_BOUNDARIES = ("SAVEPOINT", "RELEASE", "COMMIT")


class BatchConnection:
    __slots__ = ("_conn", "_rows", "_next_seq", "_held", "_deletes", "_blobs", "_counted", "engine")

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.engine = engine_of(conn)
        self._rows: list[tuple[Any, ...]] = []  # run events held back
        self._next_seq: dict[str, int] = {}
        self._held: dict[str, tuple[str, list[tuple[Any, ...]]]] = {}  # table → (INSERT, rows) held back
        # table → (DELETE, parameter rows) held back: run after the inserts (hold_delete)
        self._deletes: dict[str, tuple[str, list[tuple[Any, ...]]]] = {}
        # sha256 of the blobs this batch stored or read (undone by a rollback) → what a read found
        self._blobs: dict[str, Any] = {}
        # What `total_changes` adds to the connection's count: the rows held back, those dropped before they
        # went in (drop_held) and what held deletes found nothing to delete; it never goes back but for a rollback.
        self._counted = 0

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
        self._counted += 1
        return seq

    def prime_seq(self, run_id: str, last_seq: int) -> None:
        """`run_id` exists and its last stored event is `last_seq` (0: none), as the caller just read
        or wrote it in this transaction; ignored when the batch already counts the run's events."""
        self._next_seq.setdefault(run_id, last_seq + 1)

    def execute_beside(self, sql: str, params: Any = (), *, tables: tuple[str, ...]) -> Any:
        """Execute `sql` without inserting first what is held back for `tables` ("run_event" for the
        events, else a table of `hold_insert`): the caller reads or changes those tables only where
        the held rows cannot matter or completes the answer from memory (a run's last seq for
        `prime_seq`, rows found by `held_rows`, rows it dropped with `drop_held`). What is held for
        other tables it names goes in first, as always."""
        if ((self._rows and "run_event" not in tables and "run_event" in sql)
                or any(table in sql for table in (*self._held, *self._deletes) if table not in tables)):
            self.flush_events()
        return self._conn.execute(sql, params)

    def held_rows(self, table: str, match: Callable[[tuple[Any, ...]], bool]) -> list[tuple[Any, ...]]:
        """The rows held back for `table` that `match`, in the order they were held."""
        held = self._held.get(table)
        return [] if held is None else [row for row in held[1] if match(row)]

    def drop_held(self, table: str, match: Callable[[tuple[Any, ...]], bool]) -> None:
        """Forget the rows held back for `table` that `match`: the caller deletes them in this
        transaction, before they were ever inserted. They still count in `total_changes` (a
        command that refuses after this has written)."""
        held = self._held.get(table)
        if held is not None:
            held[1][:] = [row for row in held[1] if not match(row)]  # (still counted in _counted)
            if not held[1]:
                del self._held[table]

    def hold_delete(self, table: str, sql: str, row: tuple[Any, ...]) -> None:
        """Hold back one run of `sql` (a DELETE from `table` with `row` as its parameters; one
        statement per table): run with the others after the held inserts, before anything names
        `table`. It counts as one change in `total_changes` until then."""
        self._counted += 1
        held = self._deletes.get(table)
        if held is None:
            self._deletes[table] = (sql, [row])
        else:
            held[1].append(row)

    def deleting(self, table: str, match: Callable[[tuple[Any, ...]], bool]) -> bool:
        """Whether a delete held back for `table` has parameters that `match`."""
        held = self._deletes.get(table)
        return held is not None and any(match(row) for row in held[1])

    def blob_stored(self, sha256: str) -> bool:
        """Whether this batch stored (or found) blob `sha256` already."""
        return sha256 in self._blobs

    def note_blob(self, sha256: str, read: Any = None) -> None:
        """Blob `sha256` is in the database now (the caller's statement storing it succeeded); `read`:
        what the caller read of it, for `blob_read` (content-addressed: it cannot change)."""
        if read is not None or sha256 not in self._blobs:
            self._blobs[sha256] = read

    def blob_read(self, sha256: str) -> Any:
        """What a caller read of blob `sha256` in this batch (`note_blob`), or None."""
        return self._blobs.get(sha256)

    def hold_insert(self, table: str, sql: str, row: tuple[Any, ...]) -> None:
        """Hold back one row of `sql` (an INSERT … VALUES into `table` that changes exactly one row and
        returns nothing; one statement per table)."""
        self._counted += 1
        held = self._held.get(table)
        if held is None:
            self._held[table] = (sql, [row])
        else:
            held[1].append(row)

    def flush_events(self) -> None:
        """Insert everything held back (events and rows)."""
        if self._rows:
            rows, self._rows = self._rows, []
            self._conn.executemany(_INSERT, rows)
            self._counted -= len(rows)  # in the connection's own count now
        if self._held:
            held, self._held = self._held, {}
            for sql, rows in held.values():
                self._conn.executemany(sql, rows)
                self._counted -= len(rows)
        if self._deletes:
            deletes, self._deletes = self._deletes, {}
            for sql, rows in deletes.values():
                before = self._conn.total_changes
                self._conn.executemany(sql, rows)
                # Counted one change each while held: keep `total_changes` from going back.
                self._counted -= min(len(rows), self._conn.total_changes - before)

    def _names_held(self, sql: str) -> bool:
        return (("run_event" in sql and bool(self._rows)) or any(table in sql for table in self._held)
                or any(table in sql for table in self._deletes))

    # --- the connection ------------------------------------------------------------------------

    def execute(self, sql: str, params: Any = ()) -> Any:
        if self._rows or self._held or self._deletes:
            head = sql.lstrip()[:9].upper()
            if head.startswith("ROLLBACK"):
                # Undone with the transaction or the savepoint they were appended in.
                self._counted -= len(self._rows) + sum(len(rows) for _, rows in (*self._held.values(),
                                                                                 *self._deletes.values()))
                self._rows, self._held, self._deletes = [], {}, {}
            elif head.startswith(_BOUNDARIES) or self._names_held(sql):
                self.flush_events()
        cursor = self._conn.execute(sql, params)
        if sql.lstrip()[:8].upper().startswith("ROLLBACK"):
            self._next_seq.clear()  # rolled back (to a savepoint): the numbers are read again
            self._blobs.clear()  # … and the blobs stored since may be gone
        elif "DELETE" in sql.upper():
            if "run_event" in sql:
                self._next_seq.clear()  # events deleted (prune): read again
            if "blob" in sql:
                self._blobs.clear()  # blobs deleted (prune): store them again
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        self.flush_events()
        return self._conn.executemany(sql, rows)

    @property
    def total_changes(self) -> int:
        # The events held back count as written, so a refusal after one is undone (store/batch.py);
        # once flushed they are in the connection's own count instead.
        return self._conn.total_changes + self._counted

    @property
    def in_transaction(self) -> bool:
        return bool(self._conn.in_transaction)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
