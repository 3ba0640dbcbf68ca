"""What every database engine answers: the seam between the store and SQLite, PostgreSQL, or the next one.

The store's SQL is written once, in what every engine accepts: `?` placeholders (an engine whose
driver wants another style translates them, see `pg_connection.py`), `INSERT … ON CONFLICT (…) DO
NOTHING / DO UPDATE SET … = excluded.…`, `RETURNING`, `CASE` instead of the scalar `max(a, b)`, an
explicit `CAST(? AS BIGINT)` where a parameter's type cannot be inferred, `rowid` (a real column
where the engine has none of its own), 0/1 integers for flags. What cannot be written once — a few
clauses, the URLs, connecting, creating and migrating the schema, backup, the maintenance reports,
how a driver fails — is an attribute or a method of the engine's `Engine` object. Code outside
`store/engines/` never asks which engine it talks to: it asks the engine, found by the database's
location (`registry.engine_for`) or carried by every connection and database object
(`engine_of(conn)`).

Methods are called in the caller's thread with the caller's connection; an engine object holds no
state of its own (one instance per engine serves every host in the process).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from piwf_actors import errors

#: SQLite's busy timeout and PostgreSQL's lock timeout: how long a statement waits for a lock held elsewhere.
BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True, slots=True)
class StoreOptions:
    synchronous: str = "FULL"  # an acknowledged commit survives power loss (SQLite's `synchronous`)
    busy_timeout_ms: int = BUSY_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class ServerDatabase:
    """A database on a server, named by its URL (`postgresql://user@host/db?host=/run/postgresql`).
    Each server engine has its own subclass, so that the location says which engine it is for."""

    url: str

    def __str__(self) -> str:
        # Shown in logs and errors: never the password.
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))


#: Where the state lives: a file (a path) or a database on a server.
DatabaseLocation = Path | ServerDatabase


class Connection(Protocol):
    """What the store's SQL runs on: `sqlite3.Connection` (`sqlite_file.SqliteConnection`) or
    `pg_connection.PgConnection`, which offers the same calls with `?` placeholders."""

    engine: Engine
    total_changes: int

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...


def one_line(exc: BaseException, limit: int = 500) -> str:
    """A driver error as one line of at most `limit` characters (for receipts, reports and refusals)."""
    return " ".join(str(exc).split())[:limit]


class Engine(abc.ABC):
    """One database engine. Subclasses set the attributes and implement the abstract methods; the
    others have the answer of an engine that keeps its files to itself (a server)."""

    # --- who it is -----------------------------------------------------------------------------

    #: What `state.status` reports as `engine`, and what a state report is matched on.
    name: str
    #: The engine's name for people (`piwf state status`).
    label: str
    #: URL schemes that name a database of this engine (`postgresql://…`); lower case.
    schemes: tuple[str, ...] = ()
    #: The URL's shape, for the refusal of an unknown scheme.
    url_hint: str
    #: A whole URL, for help texts.
    url_example: str
    #: What a location of this engine is, for the refusal of something that is none.
    location_hint: str

    # --- SQL that cannot be written once ---------------------------------------------------------

    #: Starts the writer's transactions. SQLite takes the write lock up front (BEGIN IMMEDIATE) so a
    #: transaction never fails halfway upgrading from read to write. PostgreSQL runs them SERIALIZABLE:
    #: one host's writes are already serialised by its writer actor, and between hosts every
    #: transaction then behaves as if the hosts took turns — the fences each command checks (epoch,
    #: claim token, generation, revision, lease expiry) see exactly what the turn before them left.
    #: A conflict between hosts aborts one transaction, which the writer runs again (`classify`).
    begin_write: str
    #: Starts a read transaction: one consistent view of several reads.
    begin_read: str
    #: A list of text values passed as one JSON parameter, usable after `IN` (prune, run summaries).
    json_values: str
    #: After a failed statement the engine refuses everything until the transaction (or a savepoint)
    #: is rolled back (PostgreSQL); SQLite goes on.
    aborts_transaction: bool = False
    #: The clause a queue read ends with so that hosts claiming from one queue at the same time pass
    #: over each other's rows (`FOR UPDATE SKIP LOCKED` on PostgreSQL: the rows it returns are locked
    #: until the claim commits, rows another transaction locked are skipped, not waited for). Empty
    #: where claims take turns anyway (SQLite's write transaction holds the whole file).
    skip_locked: str = ""
    #: A query of the database's clock (seconds since the epoch), read inside the writer's transaction
    #: as the writer's clock for the time fences: every host sharing the database then reads the same
    #: clock. None where the database has no clock of its own (SQLite lives in the host's process).
    clock_sql: str | None = None
    #: Put before a column in a WHERE clause, keeps the planner from choosing that column's index
    #: (SQLite's unary `+`); empty where the planner weighs indexes by their statistics.
    no_index_prefix: str = ""
    #: The column type of a float added by a migration (what the models' FloatField is).
    real_type: str

    # --- what it can do ---------------------------------------------------------------------------

    #: The writer watches the free space of the database file's disk and keeps the engine's
    #: write-ahead log from taking the last of it (`actors/disk_room.py`; SQLite). A server keeps its
    #: own WAL: there a full disk is only reported.
    watches_disk: bool = False
    #: Several hosts' write transactions run at the same time and may conflict (then one is run
    #: again): the scheduler's standing claim is held back while runner hosts claim from the same
    #: queue (`actors/standing_claim.py`), and run counters are sharded (`shard_run_counts`). False
    #: where write transactions take turns (SQLite's file lock).
    concurrent_writers: bool = False
    #: Why `state.backup` refuses this engine's database (one line that names the engine's own tool),
    #: or None when it makes the copy itself (`copy_snapshot`).
    backup_refusal: str | None = None
    #: Files beside a copy that belong to it (SQLite's -journal, -wal, -shm): a backup destination
    #: with one of them is refused, and a failed copy removes them.
    side_files: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"<engine {self.name}>"

    # --- locations --------------------------------------------------------------------------------

    @abc.abstractmethod
    def owns(self, location: Any) -> bool:
        """Whether `location` names a database of this engine."""

    def parse_url(self, text: str) -> DatabaseLocation:
        """The location a URL of one of `schemes` names; ValueError (one line) when it names none."""
        raise ValueError(f"{self.label} has no database URLs")

    def exists(self, location: DatabaseLocation) -> bool:
        """Whether there is a database to read (a missing file would be created empty by opening it).
        A server answers for itself when it is connected to."""
        return True

    def private_files(self, location: DatabaseLocation) -> tuple[Path, ...]:
        """The files of the database that must be private to the user (0600) once it is open."""
        return ()

    # --- connecting, the schema --------------------------------------------------------------------

    @abc.abstractmethod
    def connect(self, location: DatabaseLocation, options: StoreOptions, *, read_only: bool) -> Any:
        """A peewee database for `location`, with this engine as its `engine` and its connections'
        (`engine_of`), settings applied on connect; read-only ones can never write. Connects lazily."""

    @abc.abstractmethod
    def open_store(self, location: DatabaseLocation, options: StoreOptions) -> Any:
        """Open the read-write state database, creating or migrating its schema to
        `migrations.LATEST_VERSION`. Raises StoreRefused for anything that is not a healthy piwf
        database of a version this code can migrate (never creates a schema over a foreign one)."""

    @abc.abstractmethod
    def schema_version(self, conn: Any) -> int:
        """The schema version the database carries (0: none yet)."""

    @abc.abstractmethod
    def column_names(self, conn: Any, table: str) -> set[str]:
        """The columns `table` has now (migrations add what is missing)."""

    @abc.abstractmethod
    def retype_to_text(self, db: Any, model: Any, columns: tuple[str, ...]) -> None:
        """Make `columns` of `model`'s table the text columns the model now declares, keeping every row
        and every value as its text (an integer its decimal digits). Nothing for a column that is
        text already (a database created from the current models). In the caller's transaction,
        with `model` bound to `db`."""

    def shard_run_counts(self, conn: Any) -> None:
        """Where writers run at once (`concurrent_writers`), give `run_count` a row per writer so that
        their transactions do not all update the same rows. Nothing where they take turns."""
        return None

    # --- the writer's batch on the wire ----------------------------------------------------------------

    def pipelined(self, conn: Any) -> AbstractContextManager[None]:
        """A block in which the writer's batch sends its statements without waiting for each answer,
        where the engine talks to a server (PostgreSQL's pipeline mode: one round trip per result the
        batch needs, not per statement). An error of a statement sent in it may surface at a later
        call, up to the end of the block. Nothing for an engine in the host's process."""
        return contextlib.nullcontext()

    #: `pipelined` defers statements (a server engine): a read in the batch is then a round trip of
    #: its own, so the batch leaves what it can to the server — events numbered by their insert
    #: (store/batch_connection.py), the lease's expiry checked by a statement sent with COMMIT
    #: (`lease_check_sql`).
    defers_statements: bool = False

    def lease_check_sql(self, expires_at: float) -> str | None:
        """A statement that fails (`lease_check_failed`) when the database's clock has reached
        `expires_at`, sent right before COMMIT in the same round trip: the batch's time fence at
        commit without a reading of the clock of its own. None where the writer reads the clock
        itself (no database clock)."""
        return None

    def lease_check_failed(self, exc: BaseException) -> bool:
        """`exc` (or one of its causes) is the failure of `lease_check_sql`'s statement."""
        return False

    def change_mark(self, conn: Any) -> Any:
        """A mark of the rows `conn` has changed so far, for `changed_since` (cheap: never waits for
        the server). Called in the writer's thread, inside its transaction."""
        return conn.total_changes

    def changed_since(self, conn: Any, mark: Any) -> bool:
        """Whether a statement on `conn` since `mark` changed rows (a refused command that wrote is
        undone: store/batch.py)."""
        return bool(conn.total_changes != mark)

    def round_trips(self, db: Any) -> int | None:
        """How many times `db`'s connections have waited for a server's answer (the writer's stats);
        None for an engine in the host's process, where a statement is a function call."""
        return None

    # --- how its driver fails ------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions a statement of this engine can raise (peewee wraps some of them)."""

    @property
    def missing_table_errors(self) -> tuple[type[BaseException], ...]:
        """What a read of a table the database does not have raises, where that can happen: a file of
        an older schema read offline, which no host migrated (a server's database is always migrated
        by the host that created it: nothing)."""
        return ()

    def classify(self, exc: BaseException) -> errors.StoreError | None:
        """The storage failure behind `exc` (searched through its causes): disk full, read-only,
        busy, a conflict to retry, a lost connection; None when it is the command's own failure."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            found = self.classify_one(current)
            if found is not None:
                return found
            current = current.__cause__ or current.__context__
        return None

    @abc.abstractmethod
    def classify_one(self, exc: BaseException) -> errors.StoreError | None:
        """`classify` for one exception, not its causes."""

    # --- reads ------------------------------------------------------------------------------------------

    def blob_slice(self, conn: Any, sha256: str, offset: int, length: int) -> tuple[int, bytes] | None:
        """(size, bytes [offset, offset + length)) of the stored blob `sha256`; None when there is none.
        Call it inside a read transaction."""
        found = conn.execute("SELECT size FROM blob WHERE sha256 = ?", (sha256,)).fetchone()
        if found is None:
            return None
        size = int(found[0])
        if offset >= size or length <= 0:
            # Past the end the chunk is empty; an offset past a 4-byte integer would not even reach
            # `substr` on PostgreSQL (its positions are int4), so it is answered here.
            return size, b""
        row = conn.execute("SELECT substr(data, ?, ?) FROM blob WHERE sha256 = ?",
                           (offset + 1, length, sha256)).fetchone()
        return size, b"" if row is None or row[0] is None else bytes(row[0])

    # --- the write-ahead log and the disk (`watches_disk`) --------------------------------------------------

    def wal_bytes(self, location: DatabaseLocation) -> int | None:
        """The size of the engine's write-ahead log file; None where the server keeps its own."""
        return None

    def wal_checkpoint_pages(self, db: Any, *, low_space: bool) -> int:
        """Checkpoint the write-ahead log every few pages while the disk is short of room (`low_space`),
        at the usual threshold otherwise; returns the pages now in force (0: not the engine's to do)."""
        return 0

    def truncate_wal(self, db: Any, options: StoreOptions, *, busy_timeout_ms: int = 0) -> str:
        """Cut the write-ahead log back to nothing: `done` (also where the server manages its own WAL),
        `busy` (a reader still uses part of it: waited at most `busy_timeout_ms`), `full` (no room
        to grow the database file for its pages; nothing is lost) or `failed`."""
        return "done"

    # --- pruning ------------------------------------------------------------------------------------------------

    def reclaim_pages(self, conn: Any) -> int:
        """Hand pages that deletes freed back to the file system, inside the caller's transaction;
        returns how many went (0 where the server reclaims space itself, later)."""
        return 0

    def page_bytes(self, conn: Any) -> tuple[int, int]:
        """(pages, page size) of the database file; (0, 0) where the engine has none of its own."""
        return 0, 0

    # --- maintenance reports (`store/state_report.py`), in the caller's read snapshot -----------------------------

    @abc.abstractmethod
    def table_names(self, conn: Any) -> list[str]:
        """The state database's tables, sorted (the engine's own bookkeeping tables left out)."""

    @abc.abstractmethod
    def trigger_names(self, conn: Any) -> set[str]:
        """The names of the triggers on `run`."""

    @abc.abstractmethod
    def integrity(self, conn: Any) -> list[str]:
        """The engine's own integrity check, as lines: `["ok"]` when it found nothing."""

    @abc.abstractmethod
    def storage_status(self, conn: Any, location: DatabaseLocation) -> dict[str, Any]:
        """What `state.status` says about the storage: db_bytes, wal_bytes, page_size, page_count,
        freelist_count, auto_vacuum (None where the server keeps its own)."""

    # --- backup (`store/backup.py`), unless `backup_refusal` ------------------------------------------------------

    def copy_snapshot(self, source: Any, target: Path, progress: Callable[[int, int], None],
                      pages_per_step: int) -> int:
        """Copy the database as `source` (a read snapshot) sees it into the new file `target`;
        `progress(copied, total)` after each step. Returns the pages copied."""
        raise NotImplementedError(f"{self.label} makes no copies")

    def check_copy(self, target: Path, runs: int, schema_version: int) -> None:
        """Open the copy afresh: it must pass the engine's check and hold what the source held
        (StoreError otherwise)."""
        raise NotImplementedError(f"{self.label} makes no copies")


def engine_of(conn: Any) -> Engine:
    """The engine of a store connection or database (each carries it as `engine`)."""
    engine = getattr(conn, "engine", None)
    if not isinstance(engine, Engine):
        raise TypeError(f"{type(conn).__name__} is not a store connection: it names no engine")
    return engine
