"""The views clients read and watch: host status, run lists, one run, interactions.

Each view is plain data built from a read-only connection plus the live
board; a watch pushes an event only when the view's digest changed.
"""

from __future__ import annotations

import os
import time
from typing import Any

from piwf_actors.board import HostBoard
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader


def host_view(reader: StoreReader, board: HostBoard, *, include_rates: bool = True) -> dict[str, Any]:
    now = time.time()
    lease = queries.lease_row(reader, now)
    scheduler = board.snapshot("scheduler")
    view: dict[str, Any] = {
        "pid": os.getpid(),
        "epoch": lease["epoch"],
        "lease": {k: lease[k] for k in ("epoch", "host_id", "pid", "started_at", "heartbeat_at", "expires_at",
                                        "live")},
        "runs": queries.run_counts(reader),
        "workers": {"max": scheduler.get("max_workers"), "active": scheduler.get("active", []),
                    "idle": len(scheduler.get("idle_workers", [])), "idle_pids": scheduler.get("idle_workers", [])},
    }
    if include_rates:
        writer = board.snapshot("writer")
        view["writer"] = {k: writer.get(k) for k in ("queue_depth", "commits", "commands", "commits_per_s",
                                                     "commands_per_s")}
    return view


def runs_view(reader: StoreReader, limit: int = 50) -> dict[str, Any]:
    return {"runs": queries.run_list(reader, None, limit), "counts": queries.run_counts(reader)}


def run_view(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    return queries.run_view(reader, run_id)


def interactions_view(reader: StoreReader, session_id: str | None) -> dict[str, Any]:
    return queries.pending_interactions(reader, session_id)
