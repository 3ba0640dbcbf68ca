"""The PostgreSQL schema: created whole at `migrations.BASELINE`, versioned in `piwf_schema`, migrated.

SQLite files carry their history (migrations v1…v6 in `sqlite_history.py`); a PostgreSQL database is
always new, so it is created directly at the version those migrations end at, from the same
peewee models (`schema.py`: one description of the tables for both engines), with what SQLite
gives implicitly made explicit:

- `rowid`: `run` and `node_attempt` get an identity column of that name, because the metrics
  followers and the gateway's run window page through them by rowid (a later insert gets a
  higher one; with several hosts writing, "later" is the order of the identity, which is the
  order of inserts, not strictly of commits — close enough for metrics and windows);
- the run-count triggers of schema v5, in PL/pgSQL (`RUN_COUNT_TRIGGERS` keeps the names, so
  `state.verify` finds them by name on both engines);
- the partial and digest-prefix indexes of v5/v6 come out of peewee as they are (PostgreSQL
  accepts the same `CREATE INDEX … WHERE` and expression indexes).

`piwf_schema` holds one row: the application tag (so a database that holds other tables is never
mistaken for ours) and the schema version (what `PRAGMA user_version` is on SQLite).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store import schema
from piwf_actors.store.migrations import BASELINE, LATEST_VERSION, migration

APPLICATION = "piwf"
VERSION_TABLE = "piwf_schema"
#: Tables whose SQLite rowid the code reads (see the module docstring).
ROWID_TABLES = ("run", "node_attempt")
#: Columns whose model type is not what they hold: SQLite stores any value in any column (and files
#: made before PostgreSQL declare these TEXT), PostgreSQL needs the real type.
COLUMN_TYPES = {("worker_message", "response"): "BYTEA"}  # the recorded answer, as msgpack

#: The counters are sharded on PostgreSQL: a status has up to this many rows, one per shard, and
#: each writer session counts into the shard of its backend process (`pg_backend_pid()`). Several
#: hosts change runs at once there (the active host and runner hosts, docs/runners.md); with one
#: row per status every one of their transactions would update the same rows, and under SERIALIZABLE
#: all but the first to commit would fail and run again. Readers sum the shards (`queries.run_counts`).
#: A shard's own count may go negative (a run queued by one host, claimed by another); the sums are exact.
RUN_COUNT_SHARDS = 64

_RUN_COUNT_FUNCTION = f"""
CREATE OR REPLACE FUNCTION run_count_follow() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO run_count (status, shard, n) VALUES (OLD.status, pg_backend_pid() % {RUN_COUNT_SHARDS}, -1)
            ON CONFLICT (status, shard) DO UPDATE SET n = run_count.n - 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO run_count (status, shard, n) VALUES (NEW.status, pg_backend_pid() % {RUN_COUNT_SHARDS}, 1)
            ON CONFLICT (status, shard) DO UPDATE SET n = run_count.n + 1;
    END IF;
    RETURN NULL;
END
$body$"""


def shard_run_count(conn: Any) -> None:
    """Give `run_count` its shard column (the primary key becomes (status, shard)) and the trigger
    function that counts into the writer's shard; the rows there stay in shard 0. Idempotent."""
    present = {row[0] for row in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'run_count'").fetchall()}
    if "shard" not in present:
        conn.execute("ALTER TABLE run_count ADD COLUMN shard INTEGER NOT NULL DEFAULT 0")
        conn.execute("ALTER TABLE run_count DROP CONSTRAINT run_count_pkey")
        conn.execute("ALTER TABLE run_count ADD PRIMARY KEY (status, shard)")
    conn.execute(_RUN_COUNT_FUNCTION)

#: The triggers by name (the same names as SQLite's `schema.RUN_COUNT_TRIGGERS`). An update that
#: leaves the status as it was costs nothing: the WHEN clause skips it, as on SQLite.
RUN_COUNT_TRIGGERS: dict[str, str] = {
    "run_count_insert": "CREATE TRIGGER run_count_insert AFTER INSERT ON run "
                        "FOR EACH ROW EXECUTE FUNCTION run_count_follow()",
    "run_count_update": "CREATE TRIGGER run_count_update AFTER UPDATE OF status ON run FOR EACH ROW "
                        "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION run_count_follow()",
    "run_count_delete": "CREATE TRIGGER run_count_delete AFTER DELETE ON run "
                        "FOR EACH ROW EXECUTE FUNCTION run_count_follow()",
}
assert set(RUN_COUNT_TRIGGERS) == set(schema.RUN_COUNT_TRIGGERS)


def create_tables(db: Any) -> None:
    """Every table, index and trigger of the latest schema, in the caller's transaction.

    `db` is a `PiwfPostgresqlDatabase` (its field types and `?` placeholders render the models).
    """
    conn = db.connection()
    ctx_sql = db.get_sql_context
    for model in schema.ALL_MODELS:
        with db.bind_ctx((model,)):
            sql, params = ctx_sql().sql(model._schema._create_table(safe=False)).query()
            # SQLite's storage option; PostgreSQL tables are heaps with a primary-key index anyway.
            conn.execute(sql.replace(" WITHOUT ROWID", ""), tuple(params))
            for (table, column), declared in COLUMN_TYPES.items():
                if table == model._meta.table_name:
                    conn.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE {declared} '
                                 f'USING CAST(NULL AS {declared})')
            if model._meta.table_name in ROWID_TABLES:
                table = model._meta.table_name
                conn.execute(f'ALTER TABLE "{table}" ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY')
                conn.execute(f'CREATE UNIQUE INDEX "{table}_rowid" ON "{table}" (rowid)')
            for index in model._schema._create_indexes(safe=False):
                sql, params = ctx_sql().sql(index).query()
                conn.execute(sql, tuple(params))
    shard_run_count(conn)
    for statement in RUN_COUNT_TRIGGERS.values():
        conn.execute(statement)
    conn.execute("INSERT INTO host_state (id, epoch) VALUES (1, 0)")
    conn.execute(f"""CREATE TABLE {VERSION_TABLE} (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        application TEXT NOT NULL,
        version BIGINT NOT NULL,
        migrated_at DOUBLE PRECISION NOT NULL DEFAULT extract(epoch from clock_timestamp()))""")


def read_version(conn: Any) -> tuple[str, int] | None:
    """(application, version) of the database, or None when it has no version table."""
    if conn.execute("SELECT to_regclass(?)", (VERSION_TABLE,)).fetchone()[0] is None:
        return None
    row = conn.execute(f"SELECT application, version FROM {VERSION_TABLE} WHERE id = 1").fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def write_version(conn: Any, version: int) -> None:
    conn.execute(
        f"""INSERT INTO {VERSION_TABLE} (id, application, version) VALUES (1, ?, ?)
            ON CONFLICT (id) DO UPDATE SET version = excluded.version,
                migrated_at = extract(epoch from clock_timestamp())""", (APPLICATION, int(version)))


def user_tables(conn: Any) -> list[str]:
    """The tables of the connection's current schema (search_path), sorted."""
    return [row[0] for row in conn.execute(
        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]


def trigger_names(conn: Any) -> set[str]:
    return {row[0] for row in conn.execute(
        """SELECT t.tgname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           WHERE NOT t.tgisinternal AND c.relname = 'run' AND n.nspname = current_schema()""")}


#: The advisory lock PostgreSQL hosts take while they create or migrate the schema ('piwf'), so two
#: hosts starting at once on an empty database do not both create it.
_MIGRATION_LOCK = 0x70697766


def migrate(db: Any) -> int:
    """Create (at BASELINE) or migrate a PostgreSQL database to LATEST_VERSION; returns the version
    found before. One transaction per step; each step re-reads the version under an advisory lock,
    so a host that waited for another's migration finds it done."""
    conn = db.connection()
    found: int | None = None
    while True:
        with db.atomic():
            conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            current = read_version(conn)
            version = 0 if current is None else current[1]
            if found is None:
                found = version
            if version >= LATEST_VERSION:
                return found
            if version == 0:
                create_tables(db)
                write_version(conn, BASELINE)
            else:
                migration(version + 1)(db)
                write_version(conn, version + 1)
