"""Run statuses and park reasons: the one definition every module and the protocol use.

`queued → starting → running → done | failed | cancelled`, and `parked`
(with a `park_reason`) which goes back to `queued` on an answer or resume.
"""

from __future__ import annotations

RUN_STATUSES = ("queued", "starting", "running", "parked", "done", "failed", "cancelled")
#: A worker holds the run (it has a claim).
ACTIVE_STATUSES = ("starting", "running")
#: Not finished: in the queue, on a worker, or waiting.
LIVE_STATUSES = ("queued", "starting", "running", "parked")
TERMINAL_STATUSES = ("done", "failed", "cancelled")
PARK_REASONS = ("waiting", "paused", "no_progress", "ambiguous_effect")

#: `('done', 'failed', 'cancelled')`, for SQL written in the store.
TERMINAL_SQL = "(" + ", ".join(f"'{status}'" for status in TERMINAL_STATUSES) + ")"
LIVE_SQL = "(" + ", ".join(f"'{status}'" for status in LIVE_STATUSES) + ")"
