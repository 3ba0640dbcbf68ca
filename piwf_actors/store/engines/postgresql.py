"""PostgreSQL: the engine several hosts share (`POSTGRESQL`), docs/postgresql.md.

A location is a `PostgresDatabase` (a libpq URL). The connection, which speaks `?` placeholders
like sqlite3, is `pg_connection.py`'s; the schema, created whole at `migrations.BASELINE` and
versioned in `piwf_schema`, is `pg_schema.py`'s. psycopg (and peewee) are imported when a
database is first connected, never with this module: a SQLite user needs neither installed
psycopg nor its import time.

What PostgreSQL does its own way: the writer's transactions are SERIALIZABLE and a conflict between
hosts is run again (`classify`); queue reads skip rows other hosts' claims hold; the database's
clock is the writer's clock; `state.status` reports the database's size (no pages, no WAL file of
ours); `state.verify` checks the schema's presence and version where SQLite runs `PRAGMA
integrity_check` (page-level checks are the server's: data checksums, `pg_amcheck`); `state.backup`
is refused with a pointer to `pg_dump`, the tool made for a consistent copy of a live PostgreSQL
database (and `pg_restore` for the way back), which a copy of our own would only imitate.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

from piwf_actors import errors
from piwf_actors.store.engines.base import DatabaseLocation, Engine, ServerDatabase, StoreOptions, one_line


@dataclass(frozen=True, slots=True)
class PostgresDatabase(ServerDatabase):
    """A PostgreSQL database named by a libpq URL (`postgresql://user@host/db?host=/run/postgresql`)."""


#: What `state.backup` answers for a PostgreSQL state (one line; see the module docstring for why).
BACKUP_REFUSAL = ("state.backup copies SQLite files; back up a PostgreSQL state with pg_dump "
                  "(pg_dump --format=custom --file=piwf.dump 'URL'; restore with pg_restore)")

#: SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
_RETRY = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_BUSY = {"55P03", "57014"}  # lock_not_available, query_canceled (statement/lock timeout)
_FULL = {"53100", "53200", "53300"}  # disk_full, out_of_memory, too_many_connections
_READ_ONLY = {"25006"}
#: What `lease_check_sql`'s block raises: a code of our own (class PW, outside PostgreSQL's classes).
LEASE_CHECK_SQLSTATE = "PW001"  # read_only_sql_transaction (a standby server, default_transaction_read_only)


def _psycopg() -> Any:
    """psycopg if it was imported (by the first connection): an error of a driver never imported
    cannot have been raised, so nothing is imported here."""
    return sys.modules.get("psycopg")


class PostgresqlEngine(Engine):
    name = "postgresql"
    label = "PostgreSQL"
    schemes = ("postgresql", "postgres")
    url_hint = "postgresql://..."
    url_example = "postgresql://user@/db?host=/run/postgresql"
    location_hint = "a postgresql:// URL"
    begin_write = "BEGIN ISOLATION LEVEL SERIALIZABLE"
    begin_read = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    json_values = "(SELECT value FROM json_array_elements_text(CAST(? AS json)))"
    aborts_transaction = True
    skip_locked = " FOR UPDATE SKIP LOCKED"
    clock_sql = "SELECT CAST(extract(epoch from clock_timestamp()) AS DOUBLE PRECISION)"
    real_type = "DOUBLE PRECISION"
    concurrent_writers = True
    backup_refusal = BACKUP_REFUSAL

    # --- locations --------------------------------------------------------------------------------

    def owns(self, location: Any) -> bool:
        return isinstance(location, PostgresDatabase)

    def parse_url(self, text: str) -> DatabaseLocation:
        return PostgresDatabase(text)

    # --- connecting, the schema --------------------------------------------------------------------

    def connect(self, location: DatabaseLocation, options: StoreOptions, *, read_only: bool) -> Any:
        """Session settings: `pg_connection.open_session`."""
        from piwf_actors.store.engines.pg_connection import PiwfPostgresqlDatabase  # psycopg only when used

        assert isinstance(location, PostgresDatabase)
        return PiwfPostgresqlDatabase(location.url, self, read_only=read_only,
                                      lock_timeout_ms=options.busy_timeout_ms)

    def open_store(self, location: DatabaseLocation, options: StoreOptions) -> Any:
        """Connect, check that the database is empty or ours, then create or migrate the schema."""
        from piwf_actors.store.engines import pg_schema
        from piwf_actors.store.migrations import LATEST_VERSION

        refused = errors.StoreRefused
        db = self.connect(location, options, read_only=False)
        try:
            try:
                conn = db.connection()
            except self.driver_errors as exc:
                raise refused(str(location), f"cannot connect ({one_line(exc, 300)})") from exc
            found = pg_schema.read_version(conn)
            if found is None:
                tables = pg_schema.user_tables(conn)
                if tables:
                    raise refused(str(location), f"a PostgreSQL database that is not a piwf state database "
                                                 f"(it holds {len(tables)} table(s), no {pg_schema.VERSION_TABLE})")
            elif found[0] != pg_schema.APPLICATION:
                raise refused(str(location), f"its {pg_schema.VERSION_TABLE} names application {found[0]!r}")
            elif found[1] > LATEST_VERSION:
                raise refused(str(location), f"schema version {found[1]} is newer than this piwf ({LATEST_VERSION})")
            pg_schema.migrate(db)
        except refused:
            db.close()
            raise
        except self.driver_errors as exc:
            db.close()
            raise refused(str(location), f"cannot be read ({one_line(exc, 300)})") from exc
        return db

    def schema_version(self, conn: Any) -> int:
        from piwf_actors.store.engines import pg_schema

        found = pg_schema.read_version(conn)
        return 0 if found is None else found[1]

    def column_names(self, conn: Any, table: str) -> set[str]:
        return {row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ?", (table,)).fetchall()}

    def retype_to_text(self, db: Any, model: Any, columns: tuple[str, ...]) -> None:
        """ALTER COLUMN … TYPE in place (indexes and keys follow); a value becomes its text (`::text`)."""
        conn, table = db.connection(), model._meta.table_name
        types = dict(conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ?", (table,)).fetchall())
        text_type = db.field_types["TEXT"]  # as the models' text columns are made (its collation too)
        for column in columns:
            if types.get(column) != "text":
                conn.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {text_type} USING "{column}"::text')

    def shard_run_counts(self, conn: Any) -> None:
        from piwf_actors.store.engines import pg_schema

        pg_schema.shard_run_count(conn)

    # --- the writer's batch on the wire ----------------------------------------------------------------

    def pipelined(self, conn: Any) -> AbstractContextManager[None]:
        """psycopg's pipeline mode (`PgConnection.pipelined`)."""
        return cast(AbstractContextManager[None], conn.pipelined())

    defers_statements = True

    def lease_check_sql(self, expires_at: float) -> str | None:
        """An anonymous PL/pgSQL block (DO takes no parameters: the expiry is a float literal, from
        the lease row, never from a client) raising `LEASE_CHECK_SQLSTATE` once the server's clock,
        the one every fence on PostgreSQL reads, has reached it."""
        return (f"DO $$BEGIN IF extract(epoch from clock_timestamp()) >= {float(expires_at)!r}::double precision "
                f"THEN RAISE EXCEPTION 'lease expired before COMMIT' USING ERRCODE = '{LEASE_CHECK_SQLSTATE}'; "
                f"END IF; END$$")

    def lease_check_failed(self, exc: BaseException) -> bool:
        psycopg = _psycopg()
        current: BaseException | None = exc
        seen: set[int] = set()
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if psycopg is not None and isinstance(current, psycopg.Error) and current.sqlstate == LEASE_CHECK_SQLSTATE:
                return True
            current = current.__cause__ or current.__context__
        return False

    def change_mark(self, conn: Any) -> Any:
        return conn.change_mark()

    def changed_since(self, conn: Any, mark: Any) -> bool:
        return bool(conn.changed_since(mark))

    def round_trips(self, db: Any) -> int | None:
        counter = getattr(db, "round_trips", None)
        return None if counter is None else int(counter.count)

    # --- how its driver fails ------------------------------------------------------------------------

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        import peewee as pw

        psycopg = _psycopg()
        return (pw.DatabaseError,) if psycopg is None else (psycopg.Error, pw.DatabaseError)

    def classify_one(self, exc: BaseException) -> errors.StoreError | None:
        """By SQLSTATE, never by the message (translated, changeable)."""
        psycopg = _psycopg()
        if psycopg is None or not isinstance(exc, psycopg.Error):
            return None
        state = exc.sqlstate or ""
        detail = f"{type(exc).__name__} (SQLSTATE {state or 'none'})"
        if state in _RETRY:
            return errors.TransactionConflict(f"concurrent transaction conflict, retry: {detail}")
        if state in _FULL:
            return errors.DiskFull(f"the database server is out of resources: {detail}")
        if state in _READ_ONLY:
            return errors.ReadOnlyDatabase(f"the database refuses writes: {detail}")
        if state in _BUSY:
            return errors.StoreError(f"database is locked by another session: {detail}")
        # No SQLSTATE, or class 08 (connection), 57 (operator intervention: the server shuts down),
        # 58 (system error), XX (internal): the connection or the server failed, not the command.
        if not state or state[:2] in ("08", "57", "58", "XX"):
            return errors.StoreError(f"the database connection failed: {detail}: {one_line(exc)[:200]}")
        return None

    # --- maintenance reports ------------------------------------------------------------------------------------

    def table_names(self, conn: Any) -> list[str]:
        from piwf_actors.store.engines import pg_schema

        return [name for name in pg_schema.user_tables(conn) if name != pg_schema.VERSION_TABLE]

    def trigger_names(self, conn: Any) -> set[str]:
        from piwf_actors.store.engines import pg_schema

        return pg_schema.trigger_names(conn)

    def integrity(self, conn: Any) -> list[str]:
        """Whether the schema is there at the version this code expects (the pages themselves are
        the server's to check)."""
        from piwf_actors.store.engines import pg_schema
        from piwf_actors.store.migrations import LATEST_VERSION
        from piwf_actors.store.schema import ALL_MODELS

        found = pg_schema.read_version(conn)
        if found is None or found[0] != pg_schema.APPLICATION:
            return [f"no {pg_schema.VERSION_TABLE} row for {pg_schema.APPLICATION}"]
        missing = sorted({model._meta.table_name for model in ALL_MODELS} - set(pg_schema.user_tables(conn)))
        lines = [f"missing table {name}" for name in missing]
        if found[1] != LATEST_VERSION:
            lines.append(f"schema version {found[1]}, expected {LATEST_VERSION}")
        return lines or ["ok"]

    def storage_status(self, conn: Any, location: DatabaseLocation) -> dict[str, Any]:
        """The database's size on the server; the page and WAL fields are PostgreSQL's own."""
        return {"db_bytes": int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]),
                "wal_bytes": None, "page_size": None, "page_count": None, "freelist_count": None,
                "auto_vacuum": None}


POSTGRESQL = PostgresqlEngine()
