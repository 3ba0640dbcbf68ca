"""SQLite: the embedded engine, a state file in WAL mode beside the host (`SQLITE`).

A location is the file's `Path` (`sqlite:///abs/path.db` or a plain path). Opening, refusing,
pragmas and the write-ahead log are `sqlite_file.py`'s; the schema's history before PostgreSQL
was supported, and the migration runner, are `sqlite_history.py`'s. peewee is imported when a
database is first connected, not with this module (the `piwf` client reads URLs without it).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piwf_actors import errors
from piwf_actors.store.engines.base import DatabaseLocation, Engine, StoreOptions, one_line

_AUTO_VACUUM_MODES = {0: "none", 1: "full", 2: "incremental"}


def pragma(conn: Any, name: str) -> Any:
    """The first value of SQLite's `PRAGMA name`."""
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def file_size(path: Path) -> int:
    """Bytes of a file; 0 when it is not there (a WAL file between checkpoints may not be)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class SqliteEngine(Engine):
    name = "sqlite"
    label = "SQLite"
    schemes = ("sqlite",)
    url_hint = "sqlite:///path"
    url_example = "sqlite:///path/state.db"
    location_hint = "a SQLite path"
    begin_write = "BEGIN IMMEDIATE"
    begin_read = "BEGIN"
    json_values = "(SELECT value FROM json_each(?))"
    no_index_prefix = "+"
    real_type = "REAL"
    watches_disk = True
    side_files = ("-journal", "-wal", "-shm")

    # --- locations --------------------------------------------------------------------------------

    def owns(self, location: Any) -> bool:
        return isinstance(location, Path)

    def parse_url(self, text: str) -> DatabaseLocation:
        path = text[len("sqlite://"):]
        if not path.startswith("/") or not path.strip("/"):
            raise ValueError(f"a SQLite URL names an absolute file: sqlite:///path/to/state.db, not {text!r}")
        return Path("/" + path.lstrip("/"))  # sqlite:////abs (SQLAlchemy's spelling) means the same file

    def exists(self, location: DatabaseLocation) -> bool:
        return Path(str(location)).is_file()

    def private_files(self, location: DatabaseLocation) -> tuple[Path, ...]:
        return tuple(Path(f"{location}{suffix}") for suffix in ("", "-wal", "-shm"))

    # --- connecting, the schema --------------------------------------------------------------------

    def connect(self, location: DatabaseLocation, options: StoreOptions, *, read_only: bool) -> Any:
        from piwf_actors.store.engines import sqlite_file

        return sqlite_file.connect(self, location, options, read_only=read_only)

    def open_store(self, location: DatabaseLocation, options: StoreOptions) -> Any:
        from piwf_actors.store.engines import sqlite_file

        return sqlite_file.open_store(self, location, options)

    def schema_version(self, conn: Any) -> int:
        return int(pragma(conn, "user_version"))

    def column_names(self, conn: Any, table: str) -> set[str]:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}

    def retype_to_text(self, db: Any, model: Any, columns: tuple[str, ...]) -> None:
        """SQLite cannot change a column's type, and a value written as text into an INTEGER column
        is stored as an integer again: the table is made anew from the model, as SQLite's documents
        say (rename, create, copy, drop), with the indexes it had (their SQL read before the rename)."""
        table = model._meta.table_name
        declared = {row[1]: str(row[2]).upper() for row in db.execute_sql(f'PRAGMA table_info("{table}")')}
        if all(declared.get(column) == "TEXT" for column in columns):
            return
        indexes = [(name, sql) for name, sql in db.execute_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,))]
        old = f"{table}_before_text"
        db.execute_sql(f'ALTER TABLE "{table}" RENAME TO "{old}"')
        for name, _sql in indexes:
            db.execute_sql(f'DROP INDEX "{name}"')
        db.execute(model._schema._create_table(safe=False))
        names = [field.column_name for field in model._meta.sorted_fields]
        copied = ", ".join(f'CAST("{name}" AS TEXT)' if name in columns else f'"{name}"' for name in names)
        listed = ", ".join(f'"{name}"' for name in names)
        db.execute_sql(f'INSERT INTO "{table}" ({listed}) SELECT {copied} FROM "{old}"')
        db.execute_sql(f'DROP TABLE "{old}"')
        for _name, sql in indexes:
            db.execute_sql(sql)

    # --- how its driver fails ------------------------------------------------------------------------

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        import peewee as pw

        return (sqlite3.Error, pw.DatabaseError)

    @property
    def missing_table_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.OperationalError,)

    def classify_one(self, exc: BaseException) -> errors.StoreError | None:
        # Python 3.11's sqlite3 exposes `sqlite_errorcode` on its exceptions; peewee's wrappers and
        # atomic()'s failed rollback ("cannot rollback - no transaction is active", whose real cause is
        # in __context__) do not, so the message is the fallback.
        code = getattr(exc, "sqlite_errorcode", None)
        primary = None if code is None else code & 0xFF
        text = str(exc).lower()
        if primary == sqlite3.SQLITE_FULL or "disk is full" in text:
            return errors.DiskFull(one_line(exc))
        if primary == sqlite3.SQLITE_READONLY or "readonly" in text or "read-only" in text:
            return errors.ReadOnlyDatabase(one_line(exc))
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text \
                or "database is busy" in text:
            return errors.StoreError(f"database is locked by another process: {one_line(exc)}")
        return None

    # --- reads ------------------------------------------------------------------------------------------

    def blob_slice(self, conn: Any, sha256: str, offset: int, length: int) -> tuple[int, bytes] | None:
        """The slice is read alone (incremental blob I/O), where `substr` would read the whole value
        first: a value read in chunks then costs its size once, not once per chunk."""
        if not hasattr(conn, "blobopen"):
            return super().blob_slice(conn, sha256, offset, length)
        row = conn.execute("SELECT rowid, size FROM blob WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            return None
        rowid, size = int(row[0]), int(row[1])
        if offset >= size or length <= 0:
            return size, b""
        with conn.blobopen("blob", "data", rowid, readonly=True) as blob:
            blob.seek(offset)
            return size, blob.read(length)

    # --- the write-ahead log and the disk ------------------------------------------------------------------

    def wal_bytes(self, location: DatabaseLocation) -> int | None:
        try:
            return os.stat(f"{location}-wal").st_size
        except OSError:
            return 0

    def wal_checkpoint_pages(self, db: Any, *, low_space: bool) -> int:
        from piwf_actors.store.engines import sqlite_file

        pages = sqlite_file.WAL_AUTOCHECKPOINT_LOW_SPACE_PAGES if low_space else sqlite_file.WAL_AUTOCHECKPOINT_PAGES
        sqlite_file.set_wal_autocheckpoint(db, pages)
        return pages

    def truncate_wal(self, db: Any, options: StoreOptions, *, busy_timeout_ms: int = 0) -> str:
        from piwf_actors.store.engines import sqlite_file

        return sqlite_file.truncate_wal(db, options, busy_timeout_ms=busy_timeout_ms)

    # --- pruning ------------------------------------------------------------------------------------------------

    def reclaim_pages(self, conn: Any) -> int:
        """`PRAGMA incremental_vacuum` (auto_vacuum=INCREMENTAL), which SQLite allows inside a transaction
        and a savepoint; the file itself shrinks when the WAL is next checkpointed.

        SQLite frees one page per step of it, and Python's sqlite3 steps a statement without result
        columns only once, so one execute frees one page: loop over the free list (~10 µs a page
        measured here). A file without incremental auto-vacuum is left alone."""
        if pragma(conn, "auto_vacuum") != 2:
            return 0
        free = int(pragma(conn, "freelist_count"))
        for _ in range(free):
            conn.execute("PRAGMA incremental_vacuum")
        return free - int(pragma(conn, "freelist_count"))

    def page_bytes(self, conn: Any) -> tuple[int, int]:
        return int(pragma(conn, "page_count")), int(pragma(conn, "page_size"))

    # --- maintenance reports ------------------------------------------------------------------------------------

    def table_names(self, conn: Any) -> list[str]:
        return [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]

    def trigger_names(self, conn: Any) -> set[str]:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}

    def integrity(self, conn: Any) -> list[str]:
        return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]

    def storage_status(self, conn: Any, location: DatabaseLocation) -> dict[str, Any]:
        return {
            "db_bytes": file_size(Path(str(location))),
            "wal_bytes": file_size(Path(f"{location}-wal")),
            "page_size": pragma(conn, "page_size"),
            "page_count": pragma(conn, "page_count"),
            "freelist_count": pragma(conn, "freelist_count"),
            "auto_vacuum": _AUTO_VACUUM_MODES.get(pragma(conn, "auto_vacuum"), "unknown"),
        }

    # --- backup -------------------------------------------------------------------------------------------------

    def copy_snapshot(self, source: Any, target: Path, progress: Callable[[int, int], None],
                      pages_per_step: int) -> int:
        """SQLite's online backup API, page by page from the source's read transaction."""

        def step(_status: int, remaining: int, total: int) -> None:
            progress(total - remaining, total)

        copy = sqlite3.connect(str(target), isolation_level=None)
        try:
            source.backup(copy, pages=max(1, pages_per_step), progress=step)
            return int(pragma(copy, "page_count"))
        finally:
            copy.close()

    def check_copy(self, target: Path, runs: int, schema_version: int) -> None:
        conn = sqlite3.connect(str(target), isolation_level=None)
        try:
            check = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if check != ["ok"]:
                raise errors.StoreError(f"backup {target} failed its quick_check: {check[0]}")
            copied_runs = conn.execute("SELECT count(*) FROM run").fetchone()[0]
            if copied_runs != runs:
                raise errors.StoreError(f"backup {target} holds {copied_runs} runs, the source held {runs}")
            if pragma(conn, "user_version") != schema_version:
                raise errors.StoreError(f"backup {target} has another schema version than its source")
        finally:
            conn.close()


SQLITE = SqliteEngine()
