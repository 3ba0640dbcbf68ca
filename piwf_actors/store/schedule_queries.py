"""Reads of the schedule tables: what the keeper fires from, what `schedule.list` shows, and which
schedule fire started a run (`run.get`'s `schedule`)."""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.store.reader import StoreReader

_COLUMNS = ("name", "definition_digest", "timing_key", "summary", "paused", "last_fire_at", "next_fire_at",
            "fire_count", "skipped_count", "last_error", "created_at", "updated_at")


def schedule_rows(reader: StoreReader) -> dict[str, dict[str, Any]]:
    """Every recorded schedule by name (a row per schedule ever loaded: a small table)."""
    found: dict[str, dict[str, Any]] = {}
    for row in reader.all(f"SELECT {', '.join(_COLUMNS)} FROM schedule"):
        item = dict(zip(_COLUMNS, row, strict=True))
        item["paused"] = bool(item["paused"])
        item["summary"] = json.loads(item["summary"]) if item["summary"] else {}
        found[item["name"]] = item
    return found


def run_schedule(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    """{name, fire_time, kind} of the fire that started `run_id`, or None for a run no schedule started."""
    try:
        row = reader.one("SELECT schedule, fire_time, kind FROM schedule_fire WHERE run_id = ?", (run_id,))
    except reader.engine.missing_table_errors:  # a file of schema v6 or older read offline (no schedule tables)
        return None
    return None if row is None else {"name": row[0], "fire_time": row[1], "kind": row[2]}


def recent_fires(reader: StoreReader, name: str, limit: int = 5) -> list[dict[str, Any]]:
    """The newest `limit` fires of schedule `name`, newest first."""
    rows = reader.all("""SELECT fire_time, kind, run_id, error FROM schedule_fire WHERE schedule = ?
                         ORDER BY fire_time DESC LIMIT ?""", (name, limit))
    return [dict(zip(("fire_time", "kind", "run_id", "error"), row, strict=True)) for row in rows]
