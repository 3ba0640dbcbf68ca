"""Forward-only schema migrations, numbered by the schema version.

The version is `PRAGMA user_version` on SQLite and the `piwf_schema` row on PostgreSQL. Each
migration runs in one transaction together with the version bump, so a crash mid-migration leaves
the previous version intact (PostgreSQL's DDL is transactional too).

Versions 1…6 are SQLite's history (`SQLITE_MIGRATIONS`): files made before PostgreSQL was
supported. A PostgreSQL database is created directly at `POSTGRESQL_BASELINE` (see
`store/pg_schema.py`). Every later version is one entry of `MIGRATIONS`, applied to both engines
and written once: portable SQL (see `store/dialect.py`), with `dialect_of(db.connection())` for
the rare statement that must differ.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import peewee as pw

from piwf_actors.store import schema

# peewee's create_tables needs models bound to a database; binding is global
# to the model classes, so it is serialised (two hosts may migrate at once).
_BIND_LOCK = threading.Lock()


def _v1_initial(db: pw.SqliteDatabase) -> None:
    with _BIND_LOCK, db.bind_ctx(schema.ALL_MODELS):
        db.create_tables(schema.ALL_MODELS, safe=False)
    db.execute_sql("INSERT INTO host_state (id, epoch) VALUES (1, 0)")


#: Columns added after v1, as (table, column, declaration). A database created
#: at the latest version already has them (v1 creates tables from the current
#: models), so v2 adds only what is missing.
_V2_COLUMNS = (
    ("run", "queue_class", "INTEGER NOT NULL DEFAULT 2"),
    ("run", "queued_at", "REAL"),
    ("run", "start_failures", "INTEGER NOT NULL DEFAULT 0"),
)
_V2_INDEXES = (
    "CREATE INDEX IF NOT EXISTS run_status_queue_class_queued_at ON run (status, queue_class, queued_at)",
    "CREATE INDEX IF NOT EXISTS host_command_created_at ON host_command (created_at)",
)


def _v2_queue_order(db: pw.SqliteDatabase) -> None:
    """Claim order by class and queue time; idempotency records pruned by age."""
    for table, column, declaration in _V2_COLUMNS:
        present = {row[1] for row in db.execute_sql(f"PRAGMA table_info({table})").fetchall()}
        if column not in present:
            db.execute_sql(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    for statement in _V2_INDEXES:
        db.execute_sql(statement)
    # Runs queued before v2: those that made progress were woken or requeued.
    db.execute_sql("UPDATE run SET queued_at = coalesce(queued_at, updated_at), "
                   "queue_class = CASE WHEN steps > 0 THEN 1 ELSE 2 END WHERE status = 'queued'")


def _v3_channels(db: pw.SqliteDatabase) -> None:
    """Decision channels: channel_effect and channel_cursor get their real shape (v1 declared them
    but nothing wrote them, so they are recreated empty), and channel_adapter fences adapters."""
    effect_columns = {row[1] for row in db.execute_sql("PRAGMA table_info(channel_effect)").fetchall()}
    channel_models = (schema.ChannelEffect, schema.ChannelCursor, schema.ChannelAdapterEpoch)
    with _BIND_LOCK, db.bind_ctx(channel_models):
        if "effect_id" not in effect_columns:
            db.execute_sql("DROP TABLE IF EXISTS channel_effect")
            db.execute_sql("DROP TABLE IF EXISTS channel_cursor")
        db.create_tables(channel_models, safe=True)


def _v4_attempt_details(db: pw.SqliteDatabase) -> None:
    """node_attempt.traceback (a failed node's frames) and node_attempt.copied_from (restart from a node)."""
    present = {row[1] for row in db.execute_sql("PRAGMA table_info(node_attempt)").fetchall()}
    for column in ("traceback", "copied_from"):
        if column not in present:
            db.execute_sql(f"ALTER TABLE node_attempt ADD COLUMN {column} TEXT")


def _v5_counters_and_indexes(db: pw.SqliteDatabase) -> None:
    """run_count: runs per status kept by triggers (host.status stops counting `run` on every call),
    initialised from the runs already there; and the indexes of `schema.V5_INDEXES`, so that no
    hot-path statement walks a table that grows with the history."""
    models = {model for model, _index in schema.V5_INDEXES} | {schema.RunCount}
    with _BIND_LOCK, db.bind_ctx(models):
        db.create_tables((schema.RunCount,), safe=True)
        # The statements peewee generates from the models, so a migrated file gets exactly what a
        # new one does (IF NOT EXISTS: a new file already has them from v1).
        for model, index in schema.V5_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))
    for statement in schema.RUN_COUNT_TRIGGERS.values():
        db.execute_sql(statement)
    # Inside the migration's transaction: no run can change between the count and the triggers.
    db.execute_sql("DELETE FROM run_count")
    db.execute_sql("INSERT INTO run_count (status, n) SELECT status, count(*) FROM run GROUP BY status")


def _v6_leaner_rows(db: pw.SqliteDatabase) -> None:
    """Fewer bytes per run (see store/values.py and bench/growth.py):

    - small inputs and outputs inline as JSON (run.input_json, run.output_json,
      node_attempt.output_json) instead of a blob each; existing values stay in their blobs;
    - the claim generation is a column of `run` (run_generation goes);
    - the digest-prefix indexes only hold rows that have a digest.
    """
    _add_columns(db, (("run", "input_json", "TEXT"), ("run", "output_json", "TEXT"),
                      ("node_attempt", "output_json", "TEXT"), ("run", "generation", "INTEGER NOT NULL DEFAULT 0")))
    if _table_exists(db, "run_generation"):
        db.execute_sql("UPDATE run SET generation = coalesce((SELECT g.generation FROM run_generation g "
                       "WHERE g.run_id = run.run_id), 0)")
        db.execute_sql("DROP TABLE run_generation")
    for model, index in schema.V5_INDEXES:
        # (Re)made partial: the same name, a new definition. (peewee's stubs do not declare _where, _name.)
        if index._where is not None:  # type: ignore[attr-defined]
            db.execute_sql(f'DROP INDEX IF EXISTS "{index._name}"')  # type: ignore[attr-defined]
            with _BIND_LOCK, db.bind_ctx((model,)):
                db.execute(model._schema._create_index(index, safe=True))


def _v7_schedules(db: Any) -> None:
    """Durable schedules: `schedule` (pause flag and cursor per schedule) and `schedule_fire` (one row
    per fire, written with its run), created from the models with their indexes (IF NOT EXISTS: a
    new file already has them from v1)."""
    with _BIND_LOCK, db.bind_ctx(schema.V7_MODELS):
        db.create_tables(schema.V7_MODELS, safe=True)


def _v8_child_machine(db: Any) -> None:
    """child_process.machine_id: a pid means something only on the machine that registered it, so a
    host that takes over from a host on another machine releases that host's children unsignalled."""
    _add_columns(db, (("child_process", "machine_id", "TEXT"),))


def _v9_resource_managers(db: Any) -> None:
    """Resource managers: resource (with its queue and claim columns), resource_event, resource_effect
    and resource_run, made from the models (peewee writes the DDL for the database in use; IF NOT EXISTS:
    a new file has them from v1)."""
    with _BIND_LOCK, db.bind_ctx(schema.RESOURCE_MODELS):
        db.create_tables(schema.RESOURCE_MODELS, safe=True)


def _v10_runner_hosts(db: Any) -> None:
    """Runner hosts (docs/runners.md): the `runner_host` lease table; run_claim names the runner (and its
    lease epoch) that holds a claim, run_worker and child_process the runner whose process it is, and
    node_attempt.executed_by the host or runner that executed an attempt."""
    with _BIND_LOCK, db.bind_ctx(schema.V10_MODELS):
        db.create_tables(schema.V10_MODELS, safe=True)
    _add_columns(db, (("run_claim", "runner_id", "TEXT"), ("run_claim", "runner_lease_epoch", "INTEGER"),
                      ("run_worker", "runner_id", "TEXT"), ("child_process", "runner_id", "TEXT"),
                      ("child_process", "runner_lease_epoch", "INTEGER"), ("node_attempt", "executed_by", "TEXT")))
    if not isinstance(db, pw.SqliteDatabase):
        # Several hosts now change runs at once: PostgreSQL's run counters get a row per writer shard
        # (pg_schema.RUN_COUNT_SHARDS). SQLite needs none: its writes take turns on the file lock.
        from piwf_actors.store import pg_schema

        pg_schema.shard_run_count(db.connection())


def _v11_request_clocks(db: Any) -> None:
    """interactive_request.paused_remaining_s: a deadline stands still while its run is paused
    (store/commands/request_clocks.py). Requests of runs paused before v11 keep their deadline."""
    real = "REAL" if isinstance(db, pw.SqliteDatabase) else "DOUBLE PRECISION"
    _add_columns(db, (("interactive_request", "paused_remaining_s", real),))


def _v12_channel_streams(db: Any) -> None:
    """Decision channels that never lose a delivery or an answer (docs/channels.md): a failed
    channel effect waits until `retry_at`; the update cursor is kept per bot (`channel_stream`)
    instead of per profile name, and moved chats are remembered (`channel_chat_move`). The old
    per-profile cursors are dropped: a bot asked from 0 answers from its earliest unconfirmed
    update, and an update applied before is refused by its settled decision, never applied twice."""
    real = "REAL" if isinstance(db, pw.SqliteDatabase) else "DOUBLE PRECISION"
    _add_columns(db, (("channel_effect", "retry_at", real),))
    with _BIND_LOCK, db.bind_ctx(schema.V12_MODELS + (schema.ChannelEffect,)):
        db.create_tables(schema.V12_MODELS, safe=True)
        for model, index in schema.V12_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))
    db.execute_sql("DROP TABLE IF EXISTS channel_cursor")


def _v13_launch_ids(db: Any) -> None:
    """The per-launch id that fences a worker's messages is named for what it is: `launch_id` (it was
    `runner_epoch`, which read like an epoch of a runner host: those are `runner_lease_epoch`). A
    rename only: every value, key and index stays as it was."""
    _rename_columns(db, (("run_claim", "runner_epoch", "launch_id"), ("run_worker", "runner_epoch", "launch_id"),
                         ("worker_message", "runner_epoch", "launch_id"),
                         ("resource", "claim_runner_epoch", "claim_launch_id")))


def _v14_waits_children_limits(db: Any) -> None:
    """Waiting, children and flow control (docs/durability.md): the `run_wait` and `run_message`
    tables; run.priority, the concurrency key and limit, and a child's place under its parent
    (parent node, wait, index, the fan-out's limit, what it was copied from). The queue index gains
    the priority (it replaces v2's); the others serve the claim's limit checks, the housekeeper's
    next wake-up and a run's children."""
    _add_columns(db, (("run", "priority", "INTEGER NOT NULL DEFAULT 0"), ("run", "concurrency_key", "TEXT"),
                      ("run", "concurrency_max", "INTEGER"), ("run", "parent_node_id", "TEXT"),
                      ("run", "parent_wait_id", "TEXT"), ("run", "child_index", "INTEGER"),
                      ("run", "fanout_max", "INTEGER"), ("run", "copied_from", "TEXT"), ("run", "held_by", "TEXT")))
    with _BIND_LOCK, db.bind_ctx(schema.V14_MODELS + (schema.Run,)):
        db.create_tables(schema.V14_MODELS, safe=True)
        for model, index in schema.V14_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))
    db.execute_sql("DROP INDEX IF EXISTS run_status_queue_class_queued_at")


def _v15_addressed_notifications(db: Any) -> None:
    """Notifications for people (docs/channels.md): session_message.audience, the audience a `notify`
    names, and an index of the messages that have one, by time, which channel adapters read."""
    _add_columns(db, (("session_message", "audience", "TEXT"),))
    with _BIND_LOCK, db.bind_ctx((schema.SessionMessage,)):
        for model, index in schema.V15_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


def _v16_run_graphs(db: Any) -> None:
    """run.graph_sha256: the definition's graph as data, stored when a run starts (workflows/graph_data.py),
    so that drawing a run imports nothing; with its digest-prefix index for state.prune. Runs stored
    before have none: they are drawn from the nodes they reached."""
    _add_columns(db, (("run", "graph_sha256", "TEXT"),))
    with _BIND_LOCK, db.bind_ctx((schema.Run,)):
        for model, index in schema.V16_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


def _columns(db: Any, table: str) -> set[str]:
    if isinstance(db, pw.SqliteDatabase):
        return {row[1] for row in db.execute_sql(f"PRAGMA table_info({table})").fetchall()}
    return {row[0] for row in db.connection().execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?",
        (table,)).fetchall()}


def _add_columns(db: Any, columns: tuple[tuple[str, str, str], ...]) -> None:
    """Add each column a table lacks (a database created from the current models has them all)."""
    for table, column, declaration in columns:
        if column not in _columns(db, table):
            db.execute_sql(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def _rename_columns(db: Any, renames: tuple[tuple[str, str, str], ...]) -> None:
    """Rename each column a table still has under its old name (a database created from the current
    models, as PostgreSQL's baseline is, has the new names already). Both engines rename in place
    (SQLite since 3.25), keys and indexes included."""
    for table, old, new in renames:
        if old in _columns(db, table):
            db.execute_sql(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")


def _table_exists(db: pw.SqliteDatabase, name: str) -> bool:
    return db.execute_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


Migration = Callable[[Any], None]

#: SQLite only: the versions before PostgreSQL was supported.
SQLITE_MIGRATIONS: list[Migration] = [_v1_initial, _v2_queue_order, _v3_channels, _v4_attempt_details,
                                      _v5_counters_and_indexes, _v6_leaner_rows]
#: The version a new PostgreSQL database is created at (with every table as of that version).
POSTGRESQL_BASELINE = len(SQLITE_MIGRATIONS)
#: Versions POSTGRESQL_BASELINE + 1, + 2, …: both engines, written once.
MIGRATIONS: list[Migration] = [_v7_schedules, _v8_child_machine, _v9_resource_managers, _v10_runner_hosts,
                               _v11_request_clocks, _v12_channel_streams, _v13_launch_ids,
                               _v14_waits_children_limits, _v15_addressed_notifications, _v16_run_graphs]
LATEST_VERSION = POSTGRESQL_BASELINE + len(MIGRATIONS)


def _migration(version: int) -> Migration:
    if version <= POSTGRESQL_BASELINE:
        return SQLITE_MIGRATIONS[version - 1]
    return MIGRATIONS[version - POSTGRESQL_BASELINE - 1]


def migrate(db: Any, current: int, application_id: int) -> None:
    """Apply the SQLite migrations current+1 .. LATEST_VERSION, each atomically."""
    for version in range(current + 1, LATEST_VERSION + 1):
        with db.atomic():
            _migration(version)(db)
            db.execute_sql(f"PRAGMA application_id = {int(application_id)}")
            db.execute_sql(f"PRAGMA user_version = {int(version)}")


#: The advisory lock PostgreSQL hosts take while they create or migrate the schema ('piwf'), so two
#: hosts starting at once on an empty database do not both create it.
_PG_MIGRATION_LOCK = 0x70697766


def migrate_postgresql(db: Any) -> int:
    """Create (at POSTGRESQL_BASELINE) or migrate a PostgreSQL database to LATEST_VERSION; returns
    the version found before. One transaction per step; each step re-reads the version under an
    advisory lock, so a host that waited for another's migration finds it done."""
    from piwf_actors.store import pg_schema

    conn = db.connection()
    found: int | None = None
    while True:
        with db.atomic():
            conn.execute("SELECT pg_advisory_xact_lock(?)", (_PG_MIGRATION_LOCK,))
            current = pg_schema.read_version(conn)
            version = 0 if current is None else current[1]
            if found is None:
                found = version
            if version >= LATEST_VERSION:
                return found
            if version == 0:
                pg_schema.create_tables(db)
                pg_schema.write_version(conn, POSTGRESQL_BASELINE)
            else:
                _migration(version + 1)(db)
                pg_schema.write_version(conn, version + 1)
