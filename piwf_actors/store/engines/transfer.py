"""`piwf state migrate --to URL`: copy a SQLite state into an empty PostgreSQL database, then verify it.

Offline: the caller holds the state directory's host lock, so no host writes the SQLite file
meanwhile (and the file is read in one read transaction anyway). The target must be empty — no
table at all in its current schema — so nothing is ever merged or overwritten.

The copy is one PostgreSQL transaction: the schema (at the version the SQLite file has, which is
the latest: an older file is migrated forward first, as starting a host would do), then every
table's rows with COPY, in rowid order where rowids matter (`run`, `node_attempt` get fresh
identity values in the same order). A failure rolls it all back and leaves the target empty.
Then, from a new connection: every table's row count must equal the source's, and `state.verify`
must pass on the copy. Nothing is deleted from the SQLite file; a host started with
`--database URL` uses the copy from then on.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piwf_actors.errors import Rejected, StoreError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import state_report
from piwf_actors.store.database import StoreOptions, connect, open_store
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import POSTGRESQL, PostgresDatabase
from piwf_actors.store.engines.registry import engine_for
from piwf_actors.store.engines.sqlite import SQLITE
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.schema import ALL_MODELS

log = logging.getLogger(__name__)

#: Rows per COPY progress report.
_PROGRESS_EVERY = 10_000


def target_refusal(target: DatabaseLocation) -> str | None:
    """Why `target` cannot receive a copy (one line), or None: only a PostgreSQL database can."""
    if engine_for(target) is POSTGRESQL:
        return None
    return "--to must be a postgresql:// URL (state migrate copies a SQLite state into PostgreSQL)"


def source_refusal(source: DatabaseLocation) -> str | None:
    """Why the state at `source` cannot be copied (one line), or None: only a SQLite state can."""
    engine = engine_for(source)
    if engine is SQLITE:
        return None
    return f"the state is already in {engine.label} ({source}); state migrate copies a SQLite state"


def _sqlite_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]



def _order(conn: sqlite3.Connection, table: str) -> str:
    """Rowid order for rowid tables (the identity keeps it), else the primary key's."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()[0]
    return "" if "WITHOUT ROWID" in sql.upper() else " ORDER BY rowid"


def migrate_to_postgres(source: DatabaseLocation, target: DatabaseLocation, *,
                        progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Copy the SQLite state at `source` into the empty PostgreSQL database `target` and verify it.

    `progress(table, rows)` is called every 10,000 rows of a table while it is copied (a large copy
    shows that it moves); the final counts are the result's `tables`.

    Returns {source, target, schema_version, tables: {table: rows}, rows, seconds, verified: True}.
    Raises Rejected (the source is not a SQLite state or the target not a PostgreSQL database, the
    target is not empty, the source is missing) or StoreError (the copy or
    its check failed; the target is then left as it was).
    """
    started = time.monotonic()
    refusal = source_refusal(source) or target_refusal(target)
    if refusal is not None:
        raise Rejected(refusal)
    assert isinstance(source, Path) and isinstance(target, PostgresDatabase)
    if not source.is_file():
        raise Rejected(f"no SQLite state at {source}")
    open_store(source).close()  # refuses anything that is not a healthy piwf file; migrates an old one
    target_db = connect(target, StoreOptions())
    try:
        try:
            conn = target_db.connection()
        except POSTGRESQL.driver_errors as exc:
            raise StoreError(f"cannot connect to {target}: {' '.join(str(exc).split())[:300]}") from exc
        existing = pg_schema.user_tables(conn)
        if existing:
            raise Rejected(f"{target} is not empty ({len(existing)} table(s), e.g. {existing[0]}); "
                           "state migrate only copies into an empty database")
        counts = _copy(source, target_db, progress)
    finally:
        target_db.close()
    copied = _count_target(target)
    if copied != counts:
        differ = sorted(t for t in counts if counts[t] != copied.get(t))
        raise StoreError(f"the copy in {target} holds other row counts than {source}: {', '.join(differ)}")
    report = state_report.verify(target, time.time())
    if not report["ok"]:
        first = (report["violations"] or [{"detail": "; ".join(report["integrity"])}])[0]["detail"]
        raise StoreError(f"the copy in {target} fails state.verify: {first}")
    return {"source": str(source), "target": str(target), "schema_version": LATEST_VERSION, "tables": counts,
            "rows": sum(counts.values()), "seconds": round(time.monotonic() - started, 3), "verified": True}


def _copy(source: Path, target_db: Any, progress: Callable[[str, int], None] | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, isolation_level=None)
    try:
        src.execute("BEGIN")  # one snapshot of the source
        conn = target_db.connection()
        conn.execute("BEGIN")
        try:
            pg_schema.create_tables(target_db)
            pg_schema.write_version(conn, LATEST_VERSION)
            # The tables come with their fixed rows (the lease row); the source's replace them, and
            # the run counters are copied, not recounted by the triggers while the runs go in.
            conn.execute("DELETE FROM host_state")
            conn.execute("ALTER TABLE run DISABLE TRIGGER USER")
            for model in ALL_MODELS:
                table = model._meta.table_name
                counts[table] = _copy_table(src, conn.raw, table, progress)
            conn.execute("ALTER TABLE run ENABLE TRIGGER USER")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        src.execute("COMMIT")
    finally:
        src.close()
    return counts


def _copy_table(src: sqlite3.Connection, raw: Any, table: str, progress: Callable[[str, int], None] | None) -> int:
    types = _pg_column_types(raw, table)
    columns = [c for c in _sqlite_columns(src, table) if c in types]
    # SQLite keeps any value in any column: text in a column PostgreSQL holds as BYTEA goes in as its bytes.
    binary = [types[c] == "bytea" for c in columns]
    quoted = ", ".join(f'"{c}"' for c in columns)
    rows = 0
    with raw.cursor().copy(f'COPY "{table}" ({quoted}) FROM STDIN') as copy:
        for row in src.execute(f'SELECT {quoted} FROM "{table}"{_order(src, table)}'):
            copy.write_row([value.encode() if is_bytes and isinstance(value, str) else value
                            for value, is_bytes in zip(row, binary, strict=True)])
            rows += 1
            if progress is not None and rows % _PROGRESS_EVERY == 0:
                progress(table, rows)
    # No report at a table's end: its count is in the result (the caller prints it once).
    return rows


def _pg_column_types(raw: Any, table: str) -> dict[str, str]:
    """The target's columns a copy fills (not the identity `rowid`), with their types."""
    return {name: kind for name, kind in raw.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = %s AND is_identity = 'NO'", (table,))}


def _count_target(target: PostgresDatabase) -> dict[str, int]:
    reader = connect(target, StoreOptions(), read_only=True)
    try:
        conn = reader.connection()
        return {model._meta.table_name: int(conn.execute(f'SELECT count(*) FROM "{model._meta.table_name}"')
                                            .fetchone()[0]) for model in ALL_MODELS}
    finally:
        reader.close()
