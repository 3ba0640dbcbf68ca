"""Named read queries for the metrics exporter (`piwf_actors.metrics`).

Two kinds: gauges read whole at scrape time (the run counters of `run_count`
and counts through indexes: a scrape costs the same whatever the history), and
the rows the exporter's followers track between scrapes.

Followers page through `run` and `node_attempt` by rowid: both are rowid
tables that are only appended to by the one writer, so a row committed later
always has a higher rowid than every row committed before it (SQLite hands
out max(rowid) + 1). Reading "rows above the last rowid seen" plus "the rows
we already know are unfinished" by rowid is exact and costs what changed,
never a scan of the whole history. Rowids are reused only after the newest
rows are deleted (pruning everything); `max_rowid` lets the follower notice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from piwf_actors.statuses import LIVE_SQL, TERMINAL_STATUSES
from piwf_actors.store.channel_queries import notifications_since
from piwf_actors.store.reader import IN_LIST_MAX, StoreReader, chunked

#: Statuses a run can still leave.


@dataclass(frozen=True, slots=True)
class RunRow:
    rowid: int
    status: str
    #: Launches that reached a worker: its `run_started` event, then one `run_resumed` per later
    #: launch (a restart, a crash, an answer). 0: it never began.
    launches: int
    #: The run's highest event seq when it was read: its launches were counted up to there, and a
    #: later read counts only the events above it (`runs_by_rowid`).
    last_seq: int = 0

    @property
    def started(self) -> bool:
        return self.launches > 0

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class AttemptRow:
    rowid: int
    finished: bool  # finished_at is set (succeeded, failed, interrupted or timed out)
    duration_s: float | None  # finished_at - started_at once finished
    kind: str | None  # once finished: effect | checkpoint | decision | agent | compute (see _ATTEMPT_COLUMNS)
    run_live: bool  # its run has not finished (an unfinished attempt of a finished run never finishes)


# --- runs ----------------------------------------------------------------------------------

# A worker's `ready` writes `run_started` on a run's first launch and `run_resumed` with the run's
# `steps` on every later one; a run_resumed without `steps` is a park ending (answer, resume), which
# only queues the run. Counted through the (run_id, seq) primary key, over the run's events above a
# seq (0: all of them): a run watched between scrapes has only its new events read, so a scrape costs
# what happened since the last one, not every live run's whole history. Its highest seq is the last
# entry of that key, found without a scan.
_LAUNCHES_ABOVE = """(SELECT count(*) FROM run_event e WHERE e.run_id = r.run_id AND e.seq > {since}
        AND (e.kind = 'run_started' OR (e.kind = 'run_resumed' AND e.payload LIKE '%"steps":%')))"""
_LAST_SEQ = "(SELECT coalesce(max(e.seq), 0) FROM run_event e WHERE e.run_id = r.run_id)"
_RUN_COLUMNS = f"r.rowid, r.status, {_LAUNCHES_ABOVE.format(since='0')}, {_LAST_SEQ}"


def _run_rows(reader: StoreReader, where: str, params: tuple[int, ...] = ()) -> list[RunRow]:
    return [RunRow(int(rowid), status, int(launches), int(last_seq))
            for rowid, status, launches, last_seq in reader.all(f"SELECT {_RUN_COLUMNS} FROM run r WHERE {where}",
                                                                 params)]


def max_run_rowid(reader: StoreReader) -> int:
    return _count(reader, "SELECT coalesce(max(rowid), 0) FROM run")


def live_runs(reader: StoreReader) -> list[RunRow]:
    """Every run that has not finished (uses the status index)."""
    return _run_rows(reader, f"r.status IN {LIVE_SQL}")


def runs_after(reader: StoreReader, rowid: int) -> list[RunRow]:
    """Runs created after the run with this rowid."""
    return _run_rows(reader, "r.rowid > ?", (rowid,))


def runs_by_rowid(reader: StoreReader, seen: Mapping[int, tuple[int, int]]) -> list[RunRow]:
    """The runs of `seen` (rowid → (last seq counted, launches counted by then)) as they are now: their
    launches are those counted plus the ones among their events above that seq."""
    found: list[RunRow] = []
    for chunk in chunked(seen, IN_LIST_MAX // 3):  # three parameters a run
        values = ", ".join("(CAST(? AS INTEGER), CAST(? AS INTEGER), CAST(? AS INTEGER))" for _ in chunk)
        params = tuple(value for rowid in chunk for value in (rowid, *seen[rowid]))
        found += [RunRow(int(rowid), status, int(launches), int(last_seq)) for rowid, status, launches, last_seq in
                  reader.all(f"""WITH seen(run_rowid, since, counted) AS (VALUES {values})
                                 SELECT r.rowid, r.status, s.counted + {_LAUNCHES_ABOVE.format(since="s.since")},
                                        {_LAST_SEQ}
                                 FROM seen s JOIN run r ON r.rowid = s.run_rowid""", params)]
    return found


# --- node attempts -------------------------------------------------------------------------

# The node's kind is not stored with its attempt; what is stored tells enough:
# an attempt that reserved an effect ran an `action` or a `shell` node
# ("effect"); one that opened an interactive request was a checkpoint, a human
# decision or an agent step (the request's own kind); anything else — compute,
# notify — is "compute". Both lookups use the (run_id, …) indexes.
_ATTEMPT_COLUMNS = f"""a.rowid, a.finished_at IS NOT NULL, a.finished_at - a.started_at,
    CASE WHEN a.finished_at IS NULL THEN NULL
         WHEN EXISTS (SELECT 1 FROM effect f WHERE f.run_id = a.run_id AND f.attempt_id = a.attempt_id)
              THEN 'effect'
         ELSE coalesce((SELECT q.kind FROM interactive_request q
                        WHERE q.run_id = a.run_id AND q.attempt_id = a.attempt_id LIMIT 1), 'compute')
    END,
    EXISTS (SELECT 1 FROM run r WHERE r.run_id = a.run_id AND r.status IN {LIVE_SQL})"""


def _attempt_rows(reader: StoreReader, where: str, params: tuple[int, ...] = ()) -> list[AttemptRow]:
    return [AttemptRow(int(rowid), bool(finished), None if duration is None else max(0.0, float(duration)), kind,
                       bool(live))
            for rowid, finished, duration, kind, live in reader.all(
                f"SELECT {_ATTEMPT_COLUMNS} FROM node_attempt a WHERE {where}", params)]


def max_attempt_rowid(reader: StoreReader) -> int:
    return _count(reader, "SELECT coalesce(max(rowid), 0) FROM node_attempt")


def open_attempts_of_live_runs(reader: StoreReader) -> list[int]:
    """Rowids of the unfinished attempts of runs that have not finished (indexes only, no full scan)."""
    return [int(r[0]) for r in reader.all(
        f"""SELECT a.rowid FROM run r JOIN node_attempt a ON a.run_id = r.run_id
            WHERE r.status IN {LIVE_SQL} AND a.finished_at IS NULL""")]


def attempts_after(reader: StoreReader, rowid: int) -> list[AttemptRow]:
    """Attempts recorded after the attempt with this rowid (not those a restart copied from a parent
    run: nothing ran for them)."""
    return _attempt_rows(reader, "a.rowid > ? AND a.copied_from IS NULL", (rowid,))


def attempts_by_rowid(reader: StoreReader, rowids: Iterable[int]) -> list[AttemptRow]:
    found: list[AttemptRow] = []
    for chunk in chunked(rowids):
        found += _attempt_rows(reader, f"a.rowid IN ({','.join('?' * len(chunk))})", tuple(chunk))
    return found


# --- gauges --------------------------------------------------------------------------------


def _count(reader: StoreReader, sql: str) -> int:
    row = reader.one(sql)
    return 0 if row is None else int(row[0])


def pending_decisions(reader: StoreReader) -> int:
    """Human decisions waiting for an answer (pending or being presented on a channel)."""
    return _count(reader, "SELECT count(*) FROM interactive_request "
                          "WHERE status IN ('pending', 'presenting') AND kind = 'decision'")


def ambiguous_effects(reader: StoreReader) -> int:
    """Side effects whose outcome is unknown (they wait for `effect resolve`). Counted in the
    partial index `effect_ambiguous` (schema v5), which holds only those; the literal
    `'ambiguous'` is what lets the planner match the query to the index's WHERE."""
    return _count(reader, "SELECT count(*) FROM effect WHERE status = 'ambiguous'")


def ambiguous_channel_deliveries(reader: StoreReader) -> int:
    """Channel messages of decisions still open, and notifications still wanted, that may or may not
    have been sent (they wait for `channel recover`, as `channel.status` lists them); found through
    the partial index `channel_effect_ambiguous` (schema v5), like `ambiguous_effects`."""
    return _count(reader, "SELECT count(*) FROM channel_effect e JOIN interactive_request r "
                          "ON r.request_id = e.request_id WHERE e.status = 'ambiguous' "
                          "AND r.status IN ('pending', 'presenting') AND e.purpose <> 'input_prompt'") \
        + _notifications(reader, "ambiguous")


def undelivered_channel_messages(reader: StoreReader) -> int:
    """Channel messages that surely were not sent and are being tried again (deliveries of open
    decisions, edits, and notifications still wanted), as `channel.status` lists them under
    `undelivered`; found through the partial index `channel_effect_failed` (schema v12)."""
    return _count(reader, "SELECT count(*) FROM channel_effect e JOIN interactive_request r "
                          "ON r.request_id = e.request_id WHERE e.status = 'failed' AND e.purpose <> 'input_prompt' "
                          "AND (e.purpose = 'settlement' OR r.status IN ('pending', 'presenting'))") \
        + _notifications(reader, "failed")


def _notifications(reader: StoreReader, status: str) -> int:
    """Notifications still wanted (channel_queries.notifications_since) whose channel effect is `status`
    (a literal: the partial index of that status serves the statement)."""
    assert status in ("ambiguous", "failed")
    row = reader.one(f"SELECT count(*) FROM channel_effect e JOIN session_message m ON m.message_id = e.request_id "
                     f"WHERE e.status = '{status}' AND e.purpose = 'notification' AND m.created_at >= ?",
                     (notifications_since(),))
    return int(row[0]) if row is not None else 0
