"""Reads of debounced starts: why a run held by a debounce waits (`run.get`'s `queue_reason`)."""

from __future__ import annotations

import math
from typing import Any

from piwf_actors.store.engines.base import Connection


def debounce_reason(conn: Connection, run: dict[str, Any], now: float) -> str | None:
    """`debounced WF[key]: 3 starts, starts in 4 s unless another comes` for a run held by a debounce."""
    held_by = run.get("held_by")
    if not held_by or not str(held_by).startswith("debounce:"):
        return None
    row = conn.execute("SELECT wake_at, joined FROM flow_timer WHERE held_by = ?", (held_by,)).fetchone()
    if row is None or row[0] is None:
        return None
    wait_s = max(0, math.ceil(float(row[0]) - now))
    starts = int(row[1])
    return (f"debounced {str(held_by)[len('debounce:'):]}: {starts} start{'s' if starts != 1 else ''}, "
            f"starts in {wait_s} s unless another comes")
