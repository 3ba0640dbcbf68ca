"""The views clients read and watch: host status, run lists, one run, interactions.

Each view is plain data built from a read-only connection plus the live
board; a watch pushes an event only when the view changed. The `runs` view
and the run counts are kept up to date in memory instead (`run_window`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from piwf_actors.board import HostBoard, Section
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.wire import pack

#: A list answer (events, interactions) stops adding items past this many packed bytes and
#: says there is more: no answer depends on how much a run has accumulated.
LIST_BUDGET = 2 * 1024 * 1024


def fit(items: list[Any], budget: int = LIST_BUDGET) -> tuple[list[Any], bool]:
    """The longest prefix of `items` that packs within `budget` (at least one item), and whether
    items were left out."""
    used = 0
    for index, item in enumerate(items):
        used += len(pack(item))
        if used > budget and index > 0:
            return items[:index], True
    return items, False


def host_view(reader: StoreReader, board: HostBoard, *, include_rates: bool = True,
              counts: dict[str, int] | None = None) -> dict[str, Any]:
    """`host.status` (without the gateway's own figures); `counts` are the run counts when the caller keeps
    them (the run window), else they are read."""
    now = time.time()
    lease = queries.lease_row(reader, now)
    scheduler = board.snapshot(Section.SCHEDULER)
    role = board.snapshot(Section.ROLE)
    view: dict[str, Any] = {
        "pid": os.getpid(),
        # active: this host holds the lease; standby: it serves reads and takes over when the lease of the
        # host named in `active` runs out (docs/standby.md).
        "role": role.get("role", "active"),
        "host_id": role.get("host_id"),
        # `pid` is the lease holder's (None once its lease is not live); this host's own is `pid` above.
        "active": {"host_id": lease["host_id"], "epoch": lease["epoch"], "expires_at": lease["expires_at"],
                   "live": lease["live"], "pid": lease["pid"] if lease["live"] else None},
        "epoch": lease["epoch"],
        "lease": {k: lease[k] for k in ("epoch", "host_id", "pid", "started_at", "heartbeat_at", "expires_at",
                                        "live")},
        "runs": queries.run_counts(reader) if counts is None else counts,
        "workers": {"max": scheduler.get("max_workers"), "active": scheduler.get("active", []),
                    "idle": len(scheduler.get("idle_workers", [])), "idle_pids": scheduler.get("idle_workers", [])},
        # The runner hosts that share the queue (docs/runners.md): id, epoch, workers, heartbeat, live.
        "runners": queries.runner_hosts(reader, now),
    }
    if view["role"] == "runner":
        # This runner host's own lease, as its RunnerLease actor last published it.
        view["runner"] = board.snapshot(Section.RUNNER_LEASE)
    if include_rates:
        writer = board.snapshot(Section.WRITER)
        view["writer"] = {k: writer.get(k) for k in ("queue_depth", "commits", "commands", "commits_per_s",
                                                     "commands_per_s", "conflict_retries", "conflicts_given_up",
                                                     "statements", "round_trips", "disk_full")}
    return view


def runs_view(reader: StoreReader, limit: int = 50) -> dict[str, Any]:
    """The `runs` watch's view read afresh (the gateway keeps it in a RunWindow instead; tests compare)."""
    return {"runs": queries.run_list(reader, None, limit), "counts": queries.run_counts(reader)}


def run_view(reader: StoreReader, run_id: str, now: float | None = None) -> dict[str, Any] | None:
    """A `run` watch's view: run.get's, its `remaining_s` counted to `now` (timer time; default: host time)."""
    return queries.run_view(reader, run_id, now)


def interactions_view(reader: StoreReader, session_id: str | None) -> dict[str, Any]:
    """Pending requests and messages, oldest first, within the list budget (`more` when cut)."""
    found = queries.pending_interactions(reader, session_id)
    requests, more_requests = fit(found["requests"], LIST_BUDGET // 2)
    messages, more_messages = fit(found["messages"], LIST_BUDGET // 2)
    view: dict[str, Any] = {"requests": requests, "messages": messages}
    if more_requests or more_messages:
        view["more"] = True
    return view
