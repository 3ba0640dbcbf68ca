"""SQLite's schema history: versions 1…`migrations.BASELINE`, from before PostgreSQL was supported, and
the runner that brings a SQLite file to `migrations.LATEST_VERSION`.

A file made by an older piwf carries its version in `PRAGMA user_version`; each step runs in one
transaction together with the version bump, so a crash mid-migration leaves the previous version
intact. Versions after the baseline are the portable ones of `store/migrations.py`, shared with
every engine.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store import schema
from piwf_actors.store.migrations import BASELINE, BIND_LOCK, LATEST_VERSION, Migration, migration


def _v1_initial(db: Any) -> None:
    with BIND_LOCK, db.bind_ctx(schema.ALL_MODELS):
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


def _table_columns(db: Any, table: str) -> set[str]:
    return {row[1] for row in db.execute_sql(f"PRAGMA table_info({table})").fetchall()}


def _add_missing_columns(db: Any, columns: tuple[tuple[str, str, str], ...]) -> None:
    for table, column, declaration in columns:
        if column not in _table_columns(db, table):
            db.execute_sql(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def _v2_queue_order(db: Any) -> None:
    """Claim order by class and queue time; idempotency records pruned by age."""
    _add_missing_columns(db, _V2_COLUMNS)
    for statement in _V2_INDEXES:
        db.execute_sql(statement)
    # Runs queued before v2: those that made progress were woken or requeued.
    db.execute_sql("UPDATE run SET queued_at = coalesce(queued_at, updated_at), "
                   "queue_class = CASE WHEN steps > 0 THEN 1 ELSE 2 END WHERE status = 'queued'")


def _v3_channels(db: Any) -> None:
    """Decision channels: channel_effect and channel_cursor get their real shape (v1 declared them
    but nothing wrote them, so they are recreated empty), and channel_adapter fences adapters."""
    effect_columns = _table_columns(db, "channel_effect")
    channel_models = (schema.ChannelEffect, schema.ChannelCursor, schema.ChannelAdapterEpoch)
    with BIND_LOCK, db.bind_ctx(channel_models):
        if "effect_id" not in effect_columns:
            db.execute_sql("DROP TABLE IF EXISTS channel_effect")
            db.execute_sql("DROP TABLE IF EXISTS channel_cursor")
        db.create_tables(channel_models, safe=True)


def _v4_attempt_details(db: Any) -> None:
    """node_attempt.traceback (a failed node's frames) and node_attempt.copied_from (restart from a node)."""
    _add_missing_columns(db, (("node_attempt", "traceback", "TEXT"), ("node_attempt", "copied_from", "TEXT")))


def _v5_counters_and_indexes(db: Any) -> None:
    """run_count: runs per status kept by triggers (host.status stops counting `run` on every call),
    initialised from the runs already there; and the indexes of `schema.V5_INDEXES`, so that no
    hot-path statement walks a table that grows with the history."""
    models = {model for model, _index in schema.V5_INDEXES} | {schema.RunCount}
    with BIND_LOCK, db.bind_ctx(models):
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


def _v6_leaner_rows(db: Any) -> None:
    """Fewer bytes per run (see store/values.py and bench/growth.py):

    - small inputs and outputs inline as JSON (run.input_json, run.output_json,
      node_attempt.output_json) instead of a blob each; existing values stay in their blobs;
    - the claim generation is a column of `run` (run_generation goes);
    - the digest-prefix indexes only hold rows that have a digest.
    """
    _add_missing_columns(db, (("run", "input_json", "TEXT"), ("run", "output_json", "TEXT"),
                              ("node_attempt", "output_json", "TEXT"),
                              ("run", "generation", "INTEGER NOT NULL DEFAULT 0")))
    if _table_exists(db, "run_generation"):
        db.execute_sql("UPDATE run SET generation = coalesce((SELECT g.generation FROM run_generation g "
                       "WHERE g.run_id = run.run_id), 0)")
        db.execute_sql("DROP TABLE run_generation")
    for model, index in schema.V5_INDEXES:
        # (Re)made partial: the same name, a new definition. (peewee's stubs do not declare _where, _name.)
        if index._where is not None:  # type: ignore[attr-defined]
            db.execute_sql(f'DROP INDEX IF EXISTS "{index._name}"')  # type: ignore[attr-defined]
            with BIND_LOCK, db.bind_ctx((model,)):
                db.execute(model._schema._create_index(index, safe=True))


def _table_exists(db: Any, name: str) -> bool:
    return db.execute_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


#: Versions 1 … BASELINE.
HISTORY: list[Migration] = [_v1_initial, _v2_queue_order, _v3_channels, _v4_attempt_details,
                            _v5_counters_and_indexes, _v6_leaner_rows]
assert len(HISTORY) == BASELINE


def migrate(db: Any, current: int, application_id: int) -> None:
    """Apply the migrations current+1 .. LATEST_VERSION, each atomically with its version."""
    for version in range(current + 1, LATEST_VERSION + 1):
        with db.atomic():
            (HISTORY[version - 1] if version <= BASELINE else migration(version))(db)
            db.execute_sql(f"PRAGMA application_id = {int(application_id)}")
            db.execute_sql(f"PRAGMA user_version = {int(version)}")
