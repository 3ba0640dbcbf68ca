"""Schema v17 (channels that are not Telegram-shaped): a version 16 database, whose channel tables hold
Telegram's integers, keeps every row of every channel table; each integer id and cursor becomes its
decimal text (in the columns and inside a channel effect's JSON), the columns become text columns, and
the store reads the migrated rows as the adapter now writes them, on both engines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from test_migration_v6 import _structure
from test_store_regressions import Store

from piwf_actors.store import channel_queries
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.reader import StoreReader

#: The columns that held integers at v16, as (table, column).
INTEGER_COLUMNS = (("channel_effect", "chat_id"), ("channel_stream", "cursor"), ("channel_chat_move", "chat_id"),
                   ("channel_chat_move", "moved_to"))

#: A row of every channel table as v16 wrote it (a delivery to a group that moved, a prompt for text
#: asked of user 1001 in chat 2002, a notification waiting for its next try).
ROWS_V16 = (
    "INSERT INTO channel_effect (effect_id, profile, purpose, request_id, chat_id, effect_key, attempt, status, "
    "manual_retries, adapter_epoch, detail, result, error, created_at, updated_at, settled_at, retry_at) VALUES "
    "('chf_1', 'ops', 'delivery', 'req_1', -1002002, 'ops|delivery|req_1|-1002002', 1, 'applied', 0, 'a1', "
    "'{\"revision\":1}', '{\"chat_id\":-1002002,\"message_id\":41}', NULL, 1.0, 1.0, 1.0, NULL)",
    "INSERT INTO channel_effect (effect_id, profile, purpose, request_id, chat_id, effect_key, attempt, status, "
    "manual_retries, adapter_epoch, detail, result, error, created_at, updated_at, settled_at, retry_at) VALUES "
    "('chf_2', 'ops', 'input_prompt', 'req_1', 2002, 'ops|input_prompt|req_1|2002|1001:fix:1', 1, 'applied', 0, "
    "'a1', '{\"choice\":\"fix\",\"input_name\":\"why\",\"label\":\"Needs changes\",\"revision\":1,\"user_id\":1001}', "
    "'{\"chat_id\":2002,\"message_id\":42}', NULL, 2.0, 2.0, 2.0, NULL)",
    "INSERT INTO channel_effect (effect_id, profile, purpose, request_id, chat_id, effect_key, attempt, status, "
    "manual_retries, adapter_epoch, detail, result, error, created_at, updated_at, settled_at, retry_at) VALUES "
    "('chf_3', 'ops', 'notification', 'msg_1', 2002, 'ops|notification|msg_1|2002', 2, 'failed', 1, 'a1', NULL, "
    "NULL, 'not sent: error 429', 3.0, 3.0, 3.0, 5.0)",
    "INSERT INTO channel_stream (stream, profile, cursor, generation, updated_at) VALUES ('telegram:abc', 'ops', "
    "1006, 1, 4.0)",
    "INSERT INTO channel_chat_move (profile, chat_id, moved_to, moved_at) VALUES ('ops', 2002, -1002002, 5.0)",
    "INSERT INTO channel_adapter (profile, adapter_epoch, host_epoch, started_at) VALUES ('ops', 'a1', 1, 6.0)",
)

EFFECTS_V17 = [
    ("chf_1", "delivery", "-1002002", "ops|delivery|req_1|-1002002", "applied", {"revision": 1},
     {"chat_id": "-1002002", "message_id": "41"}, None, None),
    ("chf_2", "input_prompt", "2002", "ops|input_prompt|req_1|2002|1001:fix:1", "applied",
     {"choice": "fix", "input_name": "why", "label": "Needs changes", "revision": 1, "user_id": "1001"},
     {"chat_id": "2002", "message_id": "42"}, None, None),
    ("chf_3", "notification", "2002", "ops|notification|msg_1|2002", "failed", None, None, "not sent: error 429",
     5.0),
]


def _rows(db: Any) -> dict[str, list[tuple[Any, ...]]]:
    def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in db.execute_sql(sql).fetchall()]

    effects = rows("SELECT effect_id, purpose, chat_id, effect_key, status, detail, result, error, retry_at "
                   "FROM channel_effect ORDER BY effect_id")
    return {"effects": [(*row[:5], None if row[5] is None else json.loads(row[5]),
                         None if row[6] is None else json.loads(row[6]), *row[7:]) for row in effects],
            "streams": rows("SELECT stream, profile, cursor, generation FROM channel_stream"),
            "moves": rows("SELECT profile, chat_id, moved_to FROM channel_chat_move"),
            "adapters": rows("SELECT profile, adapter_epoch, host_epoch FROM channel_adapter")}


def _check_migrated(location: Any) -> None:
    """Every row is there, its ids text; and the store reads them as the adapter now writes them."""
    db = open_store(location)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert _rows(db) == {"effects": EFFECTS_V17, "streams": [("telegram:abc", "ops", "1006", 1)],
                             "moves": [("ops", "2002", "-1002002")], "adapters": [("ops", "a1", 1)]}
    finally:
        db.close()
    reader = StoreReader(location)
    try:
        assert channel_queries.prompt_for_reply(reader, "ops", "2002", "42") == {
            "request_id": "req_1", "detail": EFFECTS_V17[1][5]}
        assert [(m["chat_id"], m["moved_to"]) for m in channel_queries.chat_moves(reader)] == [("2002", "-1002002")]
    finally:
        reader.close()
    store = Store(location)
    try:
        started = store.call("channel.adapter_start", {"profile": "ops", "adapter_epoch": "a2", "stream": "telegram:abc",
                                                       "channel": "telegram"})
        assert (started["cursor"], started["generation"], started["moves"]) == ("1006", 1, {"2002": "-1002002"})
        # Telegram's order reads the migrated cursor: an update below it was applied before.
        assert store.call("channel.answer", {"profile": "ops", "adapter_epoch": "a2", "stream": "telegram:abc",
                                             "channel": "telegram", "update_id": "1005", "request_id": "req_1",
                                             "expected_revision": 1, "response": {"choice": "ship"},
                                             "user_id": "1001", "chat_id": "2002"}) == {"status": "seen"}
    finally:
        store.db.close()


def _make_v16_sqlite(path: Path) -> None:
    """Give the channel tables v16's INTEGER columns (SQLite makes a table anew for that) and v16's rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for table in ("channel_effect", "channel_stream", "channel_chat_move"):
            [sql] = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
            indexes = [row[0] for row in conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", (table,))]
            for column in (column for named, column in INTEGER_COLUMNS if named == table):
                assert f'"{column}" TEXT NOT NULL' in sql
                sql = sql.replace(f'"{column}" TEXT NOT NULL', f'"{column}" INTEGER NOT NULL')
            conn.execute(f'DROP TABLE "{table}"')
            conn.execute(sql)
            for index in indexes:
                conn.execute(index)
        for statement in ROWS_V16:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 16")
        conn.execute("COMMIT")
        assert conn.execute("SELECT typeof(chat_id), typeof(result) FROM channel_effect WHERE effect_id = 'chf_1'"
                            ).fetchone() == ("integer", "text")
    finally:
        conn.close()


def test_a_version_16_sqlite_database_keeps_every_channel_row_with_its_ids_as_text(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    _make_v16_sqlite(old)
    assert _structure(old) != _structure(fresh)

    _check_migrated(old)
    assert _structure(old) == _structure(fresh)
    conn = sqlite3.connect(old)
    try:
        # Stored as text, not only read back so: an INTEGER column would have kept them integers.
        assert {row[0] for row in conn.execute("SELECT typeof(chat_id) FROM channel_effect UNION "
                                               "SELECT typeof(cursor) FROM channel_stream UNION "
                                               "SELECT typeof(chat_id) FROM channel_chat_move UNION "
                                               "SELECT typeof(moved_to) FROM channel_chat_move")} == {"text"}
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


def test_a_version_16_postgresql_database_keeps_every_channel_row_with_its_ids_as_text(
        pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            for table, column in INTEGER_COLUMNS:
                conn.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE BIGINT USING "{column}"::bigint')
            for statement in ROWS_V16:
                conn.execute(statement)
            pg_schema.write_version(conn, 16)
    finally:
        db.close()

    _check_migrated(pg_database)
    db = open_store(pg_database)
    try:
        types = {tuple(row) for row in db.execute_sql(
            "SELECT table_name, column_name, data_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name IN ('channel_effect', 'channel_stream', "
            "'channel_chat_move') AND column_name IN ('chat_id', 'cursor', 'moved_to')").fetchall()}
        assert types == {(table, column, "text", "C") for table, column in INTEGER_COLUMNS}
    finally:
        db.close()
