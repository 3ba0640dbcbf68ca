"""Forward-only schema migrations, numbered by the schema version.

The engine keeps the version (`Engine.schema_version`: `PRAGMA user_version` on SQLite, the
`piwf_schema` row on PostgreSQL) and runs each migration in one transaction together with the
version bump, so a crash mid-migration leaves the previous version intact (PostgreSQL's DDL is
transactional too).

Every engine reaches `BASELINE` its own way: a SQLite file by its history
(`store/engines/sqlite_history.py`: files made before PostgreSQL was supported), a PostgreSQL
database by being created at that version at once (`store/engines/pg_schema.py`). Every later
version is one entry of `MIGRATIONS`, applied to every engine and written once: portable SQL (see
`store/engines/base.py`), with the engine's answer (`engine_of(db)`) for the rare statement that
must differ.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.store import schema
from piwf_actors.store.engines.base import engine_of

# peewee's create_tables needs models bound to a database; binding is global
# to the model classes, so it is serialised (two hosts may migrate at once).
BIND_LOCK = threading.Lock()


def _v7_schedules(db: Any) -> None:
    """Durable schedules: `schedule` (pause flag and cursor per schedule) and `schedule_fire` (one row
    per fire, written with its run), created from the models with their indexes (IF NOT EXISTS: a
    new file already has them from v1)."""
    with BIND_LOCK, db.bind_ctx(schema.V7_MODELS):
        db.create_tables(schema.V7_MODELS, safe=True)


def _v8_child_machine(db: Any) -> None:
    """child_process.machine_id: a pid means something only on the machine that registered it, so a
    host that takes over from a host on another machine releases that host's children unsignalled."""
    _add_columns(db, (("child_process", "machine_id", "TEXT"),))


def _v9_resource_managers(db: Any) -> None:
    """Resource managers: resource (with its queue and claim columns), resource_event, resource_effect
    and resource_run, made from the models (peewee writes the DDL for the database in use; IF NOT EXISTS:
    a new file has them from v1)."""
    with BIND_LOCK, db.bind_ctx(schema.RESOURCE_MODELS):
        db.create_tables(schema.RESOURCE_MODELS, safe=True)


def _v10_runner_hosts(db: Any) -> None:
    """Runner hosts (docs/runners.md): the `runner_host` lease table; run_claim names the runner (and its
    lease epoch) that holds a claim, run_worker and child_process the runner whose process it is, and
    node_attempt.executed_by the host or runner that executed an attempt."""
    with BIND_LOCK, db.bind_ctx(schema.V10_MODELS):
        db.create_tables(schema.V10_MODELS, safe=True)
    _add_columns(db, (("run_claim", "runner_id", "TEXT"), ("run_claim", "runner_lease_epoch", "INTEGER"),
                      ("run_worker", "runner_id", "TEXT"), ("child_process", "runner_id", "TEXT"),
                      ("child_process", "runner_lease_epoch", "INTEGER"), ("node_attempt", "executed_by", "TEXT")))
    # Several hosts now change runs at once: where their transactions run at the same time (PostgreSQL)
    # the run counters get a row per writer shard. SQLite needs none: its writes take turns on the file lock.
    engine_of(db).shard_run_counts(db.connection())


def _v11_request_clocks(db: Any) -> None:
    """interactive_request.paused_remaining_s: a deadline stands still while its run is paused
    (store/commands/request_clocks.py). Requests of runs paused before v11 keep their deadline."""
    _add_columns(db, (("interactive_request", "paused_remaining_s", engine_of(db).real_type),))


def _v12_channel_streams(db: Any) -> None:
    """Decision channels that never lose a delivery or an answer (docs/channels.md): a failed
    channel effect waits until `retry_at`; the update cursor is kept per bot (`channel_stream`)
    instead of per profile name, and moved chats are remembered (`channel_chat_move`). The old
    per-profile cursors are dropped: a bot asked from 0 answers from its earliest unconfirmed
    update, and an update applied before is refused by its settled decision, never applied twice."""
    _add_columns(db, (("channel_effect", "retry_at", engine_of(db).real_type),))
    with BIND_LOCK, db.bind_ctx(schema.V12_MODELS + (schema.ChannelEffect,)):
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
    with BIND_LOCK, db.bind_ctx(schema.V14_MODELS + (schema.Run,)):
        db.create_tables(schema.V14_MODELS, safe=True)
        for model, index in schema.V14_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))
    db.execute_sql("DROP INDEX IF EXISTS run_status_queue_class_queued_at")


def _v15_addressed_notifications(db: Any) -> None:
    """Notifications for people (docs/channels.md): session_message.audience, the audience a `notify`
    names, and an index of the messages that have one, by time, which channel adapters read."""
    _add_columns(db, (("session_message", "audience", "TEXT"),))
    with BIND_LOCK, db.bind_ctx((schema.SessionMessage,)):
        for model, index in schema.V15_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


def _v16_run_graphs(db: Any) -> None:
    """run.graph_sha256: the definition's graph as data, stored when a run starts (workflows/graph_data.py),
    so that drawing a run imports nothing; with its digest-prefix index for state.prune. Runs stored
    before have none: they are drawn from the nodes they reached."""
    _add_columns(db, (("run", "graph_sha256", "TEXT"),))
    with BIND_LOCK, db.bind_ctx((schema.Run,)):
        for model, index in schema.V16_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


#: Schema v17: the channel columns that held Telegram's integers, now text (table model, columns).
V17_TEXT_COLUMNS = ((schema.ChannelEffect, ("chat_id",)), (schema.ChannelStream, ("cursor",)),
                    (schema.ChannelChatMove, ("chat_id", "moved_to")))


def _v17_channel_ids(db: Any) -> None:
    """Channels that are not Telegram-shaped (docs/channels.md): chat, user, message and update ids and
    the update cursor are opaque text, as the channel names them. Every row stays; an integer becomes
    its decimal text: `channel_effect.chat_id`, `channel_stream.cursor`, `channel_chat_move.chat_id`
    and `moved_to` become text columns (the engine's way: `Engine.retype_to_text`), and so do the ids
    inside a channel effect's JSON (`result`: chat_id and message_id; `detail`: user_id)."""
    models = tuple(model for model, _columns in V17_TEXT_COLUMNS)
    with BIND_LOCK, db.bind_ctx(models):
        for model, columns in V17_TEXT_COLUMNS:
            engine_of(db).retype_to_text(db, model, columns)
    conn = db.connection()
    for effect_id, result, detail in conn.execute(
            "SELECT effect_id, result, detail FROM channel_effect WHERE result IS NOT NULL OR detail IS NOT NULL"
            ).fetchall():
        new_result, new_detail = _ids_as_text(result, ("chat_id", "message_id")), _ids_as_text(detail, ("user_id",))
        if (new_result, new_detail) != (result, detail):
            conn.execute("UPDATE channel_effect SET result = ?, detail = ? WHERE effect_id = ?",
                         (new_result, new_detail, effect_id))


def _v18_http_tokens(db: Any) -> None:
    """The HTTP door (docs/http.md): `http_token`, the bearer tokens by name, hashed, with their role; in
    the database so that a standby that takes over knows them."""
    with BIND_LOCK, db.bind_ctx(schema.V18_MODELS):
        db.create_tables(schema.V18_MODELS, safe=True)


def _v19_http_sessions(db: Any) -> None:
    """The web console's sessions (docs/http.md, "Console"): `http_session`, each by the sha256 of its
    cookie, with the token it came from and its expiry; in the database so that a browser stays signed
    in across a host's restart and a standby's takeover."""
    with BIND_LOCK, db.bind_ctx(schema.V19_MODELS):
        db.create_tables(schema.V19_MODELS, safe=True)


def _v20_rate_limits(db: Any) -> None:
    """Flow control by rate (workflows/rate_limits.py): run.rate_key, rate_max and rate_per_s; the
    `rate_start` and `flow_timer` tables; the indexes the claim and the housekeeper read."""
    _add_columns(db, (("run", "rate_key", "TEXT"), ("run", "rate_max", "INTEGER"), ("run", "rate_per_s", engine_of(db).real_type)))
    with BIND_LOCK, db.bind_ctx(schema.V20_MODELS + (schema.Run,)):
        db.create_tables(schema.V20_MODELS, safe=True)
        for model, index in schema.V20_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


def _v21_events(db: Any) -> None:
    """Events (docs/durability.md "Events and batches"): `event`, `event_delivery`, `event_take`,
    `event_subscription` and `event_batch` from the models, and the index of pending event waits."""
    with BIND_LOCK, db.bind_ctx((*schema.V21_MODELS, schema.RunWait)):
        db.create_tables(schema.V21_MODELS, safe=True)
        for model, index in schema.V21_INDEXES:
            db.execute(model._schema._create_index(index, safe=True))


def _ids_as_text(text: str | None, keys: tuple[str, ...]) -> str | None:
    """A channel effect's JSON with the integers under `keys` as their decimal text (unchanged when none is)."""
    if not text:
        return text
    value = json.loads(text)
    if not isinstance(value, dict) or not any(isinstance(value.get(key), int) for key in keys):
        return text
    return canonical_json({key: str(item) if key in keys and isinstance(item, int) and not isinstance(item, bool)
                           else item for key, item in value.items()})


def _columns(db: Any, table: str) -> set[str]:
    return engine_of(db).column_names(db.connection(), table)


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


Migration = Callable[[Any], None]

#: The version every engine's database reaches its own way (see the module docstring).
BASELINE = 6
#: Versions BASELINE + 1, + 2, …: every engine, written once.
MIGRATIONS: list[Migration] = [_v7_schedules, _v8_child_machine, _v9_resource_managers, _v10_runner_hosts,
                               _v11_request_clocks, _v12_channel_streams, _v13_launch_ids,
                               _v14_waits_children_limits, _v15_addressed_notifications, _v16_run_graphs,
                               _v17_channel_ids, _v18_http_tokens, _v19_http_sessions, _v20_rate_limits,
                               _v21_events]
LATEST_VERSION = BASELINE + len(MIGRATIONS)


def migration(version: int) -> Migration:
    """The portable migration to `version` (above BASELINE)."""
    if version <= BASELINE:
        raise ValueError(f"version {version} is reached by each engine's own baseline")
    return MIGRATIONS[version - BASELINE - 1]
