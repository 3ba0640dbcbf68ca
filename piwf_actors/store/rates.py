"""Rate limits: whether a fresh run may start now under its `rate_key`, counted in the claim transaction.

The budget is a sliding window of recorded starts (`rate_start`), not a token bucket: a run may start
while fewer than `rate_max` runs of its key started in the last `rate_per_s` seconds. So *any*
`rate_per_s` seconds see at most `rate_max` starts — what "60 per minute" means to the API on the
other side, and what a test can check from the start times alone — where a bucket that refills at
`max / per_s` lets up to `2 × max - 1` starts into some window (a full bucket spent at the end of
one period, refilled tokens at the start of the next). The price is one row per start, at most
`rate_max` per key: the claim deletes the rows of a key that left its window as it reads them.

A start is counted once per run, by the claim that first starts it (`generation` 0): a run that a
crash put back in the queue resumes without a token, as it holds its concurrency slot. Counting in
the claim's transaction is what makes the budget durable and shared: a host that dies after the
claim committed has spent the token; a standby that takes over reads the same rows; runner hosts
claim in the same transaction shape (on PostgreSQL SERIALIZABLE: two hosts that both read room for
one more start conflict, and one of them retries).

`window_state` is the arithmetic, a pure function tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from piwf_actors.store.engines.base import Connection


def window_state(starts: Iterable[float], maximum: int, per_s: float, now: float) -> tuple[int, float | None]:
    """(starts inside the window ending at `now`, the time the next start is allowed or None when one
    is allowed now). A start at `t` counts while `t > now - per_s`: a start exactly `per_s` ago has
    left the window. With `used >= maximum`, the next start is allowed when the oldest start that
    keeps the count at `maximum` leaves: `recent[used - maximum] + per_s` (a limit lowered below the
    starts already counted waits for more than one to leave)."""
    recent = sorted(at for at in starts if at > now - per_s)
    used = len(recent)
    if used < maximum:
        return used, None
    return used, recent[used - maximum] + per_s


def limiter_name(rate_key: str) -> str:
    """The limiter's name a rate key starts with (`mail-api[eu]` → `mail-api`): the metrics label."""
    return rate_key.split("[", 1)[0]


def reason(rate_key: str, maximum: int, per_s: float, next_at: float, now: float) -> str:
    """The queue reason of a run held by a rate limit: `rate limit mail-api: 60 per 60 s, next in 12 s`."""
    wait_s = max(0, math.ceil(next_at - now))
    return f"rate limit {rate_key}: {maximum} per {per_s:g} s, next in {wait_s} s"


def window(conn: Connection, rate_key: str, maximum: int, per_s: float, now: float,
           starting_now: int = 0) -> tuple[int, float | None]:
    """`window_state` of the recorded starts of `rate_key`, read with two index range reads whatever
    the budget (a count, then the one start whose leaving frees the next: OFFSET `used - maximum`).
    `starting_now` adds that many starts at `now` (runs just let go, which the claim will count)."""
    since = now - float(per_s)
    used = int(conn.execute("SELECT count(*) FROM rate_start WHERE rate_key = ? AND started_at > ?",
                            (rate_key, since)).fetchone()[0])
    total = used + starting_now
    if total < maximum:
        return total, None
    nth = total - maximum  # the start that must leave the window first (0: the oldest)
    if nth >= used:
        return total, now + float(per_s)  # one of those starting now
    row = conn.execute("SELECT started_at FROM rate_start WHERE rate_key = ? AND started_at > ? "
                       "ORDER BY started_at LIMIT 1 OFFSET ?", (rate_key, since, nth)).fetchone()
    return total, float(row[0]) + float(per_s)


def next_start(conn: Connection, rate_key: str, maximum: int, per_s: float, now: float) -> float | None:
    """When the next run of `rate_key` may start (None: now), from the recorded starts."""
    return window(conn, rate_key, int(maximum), float(per_s), now)[1]


def count_start(conn: Connection, run: dict[str, Any], now: float) -> None:
    """Record the start of fresh run `run` (SLOT_COLUMNS) against its rate key, in the claim's
    transaction, and forget the starts of that key that left the window."""
    conn.execute("DELETE FROM rate_start WHERE rate_key = ? AND started_at <= ?",
                 (run["rate_key"], now - float(run["rate_per_s"])))
    conn.execute("INSERT INTO rate_start (rate_key, run_id, started_at, left_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT (rate_key, run_id) DO NOTHING",
                 (run["rate_key"], run["run_id"], now, now + float(run["rate_per_s"])))


def counts_start(run: dict[str, Any]) -> bool:
    """Whether claiming `run` spends a start of a rate limit (a fresh run with a rate key)."""
    return not run["generation"] and run.get("rate_key") is not None and bool(run.get("rate_max"))


def held_by_limiter(conn: Connection) -> dict[str, int]:
    """Runs held by a rate limit, per limiter name (the `piwf_runs_rate_held` gauge): fresh runs held
    back from the claim and runs parked before a limited node; two ranges of the `run_held_by` index."""
    counts: dict[str, int] = {}
    for held_by, n in conn.execute(
            "SELECT held_by, count(*) FROM run WHERE ((held_by >= 'rate_key:' AND held_by < 'rate_key;') "
            "OR (held_by >= 'rate_node:' AND held_by < 'rate_node;')) AND status IN ('queued', 'parked') "
            "GROUP BY held_by"):
        name = limiter_name(str(held_by).split(":", 1)[1])
        counts[name] = counts.get(name, 0) + int(n)
    return counts
