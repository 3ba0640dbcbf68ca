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
held back (and the deletes, `hold_delete`) count in `total_changes` and move the change mark
(`change_mark`), so a command that refuses after appending one is undone like one that wrote a
row (store/batch.py). Where statements are deferred (PostgreSQL, `numbered_by_server`) the
events are numbered by their INSERT instead and nothing here reads a seq; `prime_seq` is then
moot, and what a held delete removed is counted only when `total_changes` is next read (never a
round trip of its own). Everything else passes through to the store connection unchanged.
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
    __slots__ = ("_conn", "_rows", "_next_seq", "_held", "_keyed", "_deletes", "_deleting", "_deleted", "_blobs",
                 "_counted", "_unsettled", "_appended", "_numbered_by_server", "engine")

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
        self._keyed: dict[tuple[str, Any], tuple[Any, ...]] = {}  # (table, key) → a held row (held_row)
        # table → (DELETE, parameter rows) held back: run after the inserts (hold_delete); the column of
        # the held rows each table's deletes match, and the (table, value) pairs they delete
        self._deletes: dict[str, tuple[str, list[tuple[Any, ...]]]] = {}
        self._deleting: dict[str, int] = {}
        self._deleted: set[tuple[str, Any]] = set()
        # sha256 of the blobs this batch stored or read (undone by a rollback) → what a read found
        self._blobs: dict[str, Any] = {}
        # What `total_changes` adds to the connection's count: the rows held back, those a held delete kept
        # from going in and what held deletes found nothing to delete; it never goes back but for a rollback.
        self._counted = 0
        # Held deletes sent on a deferring connection whose rows deleted are not known yet: (cursor, rows
        # held), settled into `_counted` when `total_changes` is read (reading them earlier would send
        # the queue: a round trip of its own).
        self._unsettled: list[tuple[Any, int]] = []
        # Changes ever held back (events, rows, deletes): a change mark's part. Unlike `_counted` it
        # never goes down, so a command that only held something is seen to have written (store/batch.py).
        self._appended = 0

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
            self._counted += 1
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
        `prime_seq`, a row found by `held_row`, rows a `hold_delete` removes). What is held for
        other tables it names goes in first, as always."""
        if ((self._rows and "run_event" not in tables and "run_event" in sql)
                or any(table in sql for table in (*self._held, *self._deletes) if table not in tables)):
            self.flush_events()
        return self._conn.execute(sql, params)

    def held_row(self, table: str, key: Any) -> tuple[Any, ...] | None:
        """The row held back for `table` under `key` (one of the `keys` it was held with), if any."""
        return self._keyed.get((table, key))

    def hold_delete(self, table: str, sql: str, value: Any, *, column: int) -> None:
        """Hold back one run of `sql`, a DELETE from `table` of the rows whose column number `column`
        (as `hold_insert`'s rows have it) is `value`, its one parameter (one statement per table):
        run with the others after the held inserts, before anything names `table`; the held rows it
        would delete are never inserted. It counts as one change in `total_changes` until then."""
        self._counted += 1
        self._appended += 1
        self._deleting[table] = column
        self._deleted.add((table, value))
        held = self._deletes.get(table)
        if held is None:
            self._deletes[table] = (sql, [(value,)])
        else:
            held[1].append((value,))

    def deleting(self, table: str, value: Any) -> bool:
        """Whether a delete held back for `table` removes the rows of `value` (`hold_delete`)."""
        return (table, value) in self._deleted

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

    def hold_insert(self, table: str, sql: str, row: tuple[Any, ...], keys: tuple[Any, ...] = ()) -> None:
        """Hold back one row of `sql` (an INSERT … VALUES into `table` that changes exactly one row and
        returns nothing; one statement per table), found by `held_row` under each of `keys`."""
        self._counted += 1
        self._appended += 1
        for key in keys:
            self._keyed[(table, key)] = row
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
            self._counted -= len(rows)  # in the connection's own count now
        if self._held:
            held, self._held = self._held, {}
            self._keyed = {}
            for table, (sql, rows) in held.items():
                column = self._deleting.get(table)
                if column is not None:  # rows a held delete removes never go in (still counted)
                    rows = [row for row in rows if (table, row[column]) not in self._deleted]
                if rows:
                    self._conn.executemany(sql, rows)
                    self._counted -= len(rows)
        if self._deletes:
            deletes, self._deletes = self._deletes, {}
            self._deleting, self._deleted = {}, set()
            for sql, rows in deletes.values():
                if self._numbered_by_server:
                    # Deferred: the rows it deleted are known once the queue is sent (`total_changes`).
                    self._unsettled.append((self._conn.executemany(sql, rows), len(rows)))
                    continue
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
                self._keyed, self._deleting, self._deleted = {}, {}, set()
            elif head.startswith(_BOUNDARIES) or self._names_held(sql):
                self.flush_events()
        cursor = self._conn.execute(sql, params)
        if sql.lstrip()[:8].upper().startswith("ROLLBACK"):
            self._next_seq.clear()  # rolled back (to a savepoint): the numbers are read again
            self._unsettled = []  # (their count stays: `total_changes` never goes back)
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
        if self._unsettled:
            unsettled, self._unsettled = self._unsettled, []
            for cursor, held in unsettled:  # (sends the queue if they are still in it)
                self._counted -= min(held, max(cursor.rowcount, 0))
        return self._conn.total_changes + self._counted

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
