"""Named read queries. SQL lives here (and in commands), nowhere else."""

from __future__ import annotations

import json
import time
from typing import Any

from piwf_actors.statuses import LIVE_SQL, RUN_STATUSES
from piwf_actors.store.flow_queries import flow_view
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.run_parts import run_row_and_parts
from piwf_actors.store.schedule_queries import run_schedule
from piwf_actors.wire.content import CHUNK_BYTES


def lease_holder(reader: StoreReader) -> tuple[int | None, str | None]:
    row = reader.one("SELECT pid, process_start_identity FROM host_state WHERE id = 1")
    return (row[0], row[1]) if row else (None, None)


def lease_row(reader: StoreReader, now: float) -> dict[str, Any]:
    row = reader.one(
        """SELECT epoch, host_id, pid, process_start_identity, started_at, heartbeat_at,
                  expires_at, released_at FROM host_state WHERE id = 1""")
    assert row is not None
    keys = ("epoch", "host_id", "pid", "process_start_identity", "started_at", "heartbeat_at",
            "expires_at", "released_at")
    record = dict(zip(keys, row, strict=True))
    record["live"] = record["host_id"] is not None and (record["expires_at"] or 0) > now
    return record


def unreleased_children(reader: StoreReader) -> list[dict[str, Any]]:
    rows = reader.all("SELECT pid, create_time, kind, run_id, host_epoch, machine_id, runner_id FROM child_process "
                      "WHERE released_at IS NULL")
    keys = ("pid", "create_time", "kind", "run_id", "host_epoch", "machine_id", "runner_id")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def runner_hosts(reader: StoreReader, now: float) -> list[dict[str, Any]]:
    """Every runner host's lease row (docs/runners.md), live ones first, with `live` and the number of
    runs it holds claims on now."""
    rows = reader.all(
        """SELECT h.runner_id, h.epoch, h.pid, h.machine_id, h.state_dir, h.max_workers, h.started_at,
                  h.heartbeat_at, h.expires_at, h.released_at,
                  (SELECT count(*) FROM run_claim c WHERE c.runner_id = h.runner_id AND c.runner_lease_epoch = h.epoch)
           FROM runner_host h ORDER BY h.runner_id""")
    keys = ("runner_id", "epoch", "pid", "machine_id", "state_dir", "max_workers", "started_at", "heartbeat_at",
            "expires_at", "released_at", "active_runs")
    found = [dict(zip(keys, r, strict=True)) for r in rows]
    for row in found:
        row["live"] = row["released_at"] is None and (row["expires_at"] or 0) > now
    return sorted(found, key=lambda row: (not row["live"], row["runner_id"]))


def live_runner_hosts_exist(reader: StoreReader, now: float) -> bool:
    """Whether a runner host holds a live lease (one that may be claiming from the queue now)."""
    return reader.one("SELECT 1 FROM runner_host WHERE released_at IS NULL AND expires_at > ? LIMIT 1",
                      (now,)) is not None


def dead_runner_work(reader: StoreReader, now: float) -> bool:
    """Whether a runner host whose lease is gone (expired, released, or a later epoch) left claims or
    unreleased child processes behind: then the active host runs `runners.recover`."""
    live = """EXISTS (SELECT 1 FROM runner_host h WHERE h.runner_id = {t}.runner_id
              AND h.epoch = {t}.runner_lease_epoch AND h.released_at IS NULL AND h.expires_at > ?)"""
    return reader.one(
        f"""SELECT 1 WHERE EXISTS (SELECT 1 FROM run_claim WHERE runner_id IS NOT NULL
                                    AND NOT {live.format(t='run_claim')})
                        OR EXISTS (SELECT 1 FROM child_process WHERE released_at IS NULL AND runner_id IS NOT NULL
                                    AND NOT {live.format(t='child_process')})""", (now, now)) is not None


def run_counts(reader: StoreReader) -> dict[str, int]:
    """Runs per status: every known status (0 when none), plus any other status a row holds.

    Read from the `run_count` counters (schema v5, kept exact by triggers on `run`): a few rows,
    whatever the number of runs, where a `GROUP BY status` over `run` grew with the history. (On
    PostgreSQL a status has a row per shard, see `pg_schema.RUN_COUNT_SHARDS`: they are summed.)"""
    counts = dict.fromkeys(RUN_STATUSES, 0)
    for status, count in reader.all("SELECT status, CAST(sum(n) AS BIGINT) FROM run_count GROUP BY status"):
        if count:  # a status no run holds any more keeps a row with 0
            counts[status] = count
    return counts


def blob(reader: StoreReader, sha256: str | None) -> bytes | None:
    if sha256 is None:
        return None
    row = reader.one("SELECT data FROM blob WHERE sha256 = ?", (sha256,))
    return None if row is None else bytes(row[0])


#: Values larger than this are shown to clients as content markers (`content_marker`).
CONTENT_INLINE_BYTES = 64 * 1024
#: The longest chunk `content.read` returns: the wire's chunk, which fits a frame with its envelope.
CONTENT_CHUNK_BYTES = CHUNK_BYTES
PREVIEW_CHARS = 200


def bounded_json(reader: StoreReader, sha256: str | None, inline: str | None = None) -> Any:
    """A stored JSON value (inline, or in the blob table), or for one over CONTENT_INLINE_BYTES a
    marker `{"$content": digest, "bytes": n, "preview": first characters…}` that `content.read`
    resolves. Inline values are small (store/values.py) and always returned whole."""
    if inline is not None:
        return _json(inline)
    if sha256 is None:
        return None
    row = reader.one("SELECT size, CASE WHEN size <= ? THEN data END FROM blob WHERE sha256 = ?",
                     (CONTENT_INLINE_BYTES, sha256))
    if row is None:
        return None
    size = int(row[0])
    if size <= CONTENT_INLINE_BYTES:
        return _json(bytes(row[1]).decode())
    with reader.snapshot():  # the preview only: a view of a run with large values does not read them
        found = reader.engine.blob_slice(reader.conn, sha256, 0, PREVIEW_CHARS * 4)
    data = b"" if found is None else found[1]
    preview = data.decode("utf-8", errors="ignore")[:PREVIEW_CHARS] + "…"
    return {"$content": sha256, "bytes": size, "preview": preview}


def content_chunk(reader: StoreReader, digest: str, offset: int = 0,
                  length: int = CONTENT_CHUNK_BYTES) -> dict[str, Any] | None:
    """`{digest, offset, total_bytes, data}`: bytes [offset, offset+length) of a stored value
    (its canonical JSON; a workflow source as written). None when no such content is stored."""
    length = max(0, min(length, CONTENT_CHUNK_BYTES))
    with reader.snapshot():
        found = reader.engine.blob_slice(reader.conn, digest, offset, length)
    if found is None:
        return None
    return {"digest": digest, "offset": offset, "total_bytes": found[0], "data": found[1]}


def run_source(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    """What a restart needs of a run: its workflow's name, file, attribute, digest, project and source,
    with the source's stored digest (`source_sha256`, None when the source is not stored)."""
    row = reader.one("""SELECT r.workflow, r.workflow_path, r.workflow_attr, r.definition_digest, r.project_path,
                               b.data, b.sha256 FROM run r LEFT JOIN blob b ON b.sha256 = r.source_sha256
                        WHERE r.run_id = ?""", (run_id,))
    if row is None:
        return None
    keys = ("workflow", "workflow_path", "workflow_attr", "definition_digest", "project_path")
    return {**dict(zip(keys, row[:5], strict=True)), "source": None if row[5] is None else bytes(row[5]),
            "source_sha256": row[6]}


def run_graph(reader: StoreReader, run_id: str) -> tuple[str | None, bytes | None] | None:
    """(blob key, bytes) of the graph stored with a run when it started (workflows/graph_data.py), (None,
    None) for a run stored without one (before schema v16, or read from a file not migrated yet), None
    when there is no such run."""
    cursor = reader.conn.execute("SELECT * FROM run WHERE run_id = ?", (run_id,))
    row = cursor.fetchone()
    if row is None:
        return None
    key = dict(zip([d[0] for d in cursor.description], row, strict=True)).get("graph_sha256")
    data = reader.one("SELECT data FROM blob WHERE sha256 = ?", (key,)) if key else None
    return (key, None) if data is None else (key, bytes(data[0]))


def run_input(reader: StoreReader, run_id: str) -> Any:
    """A run's input value, whatever its size (None when there is no such run)."""
    row = reader.one("SELECT input_json, input_sha256 FROM run WHERE run_id = ?", (run_id,))
    if row is None:
        return None
    if row[0] is not None:
        return json.loads(row[0])
    data = reader.one("SELECT data FROM blob WHERE sha256 = ?", (row[1],)) if row[1] else None
    return None if data is None else json.loads(bytes(data[0]).decode())


def control_requests(reader: StoreReader, run_ids: list[str]) -> list[tuple[str, bool, bool]]:
    """(run id, cancel requested, pause requested) of those of `run_ids` with either pending."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    return [(r[0], bool(r[1]), bool(r[2])) for r in reader.all(
        f"""SELECT run_id, cancel_requested, pause_requested FROM run
            WHERE run_id IN ({marks}) AND (cancel_requested = 1 OR pause_requested = 1)""", tuple(run_ids))]


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _blob_json(reader: StoreReader, sha256: str | None) -> Any:
    data = blob(reader, sha256)
    return None if data is None else _json(data.decode())


RUN_SUMMARY_COLUMNS = ("run_id", "workflow", "status", "park_reason", "revision", "parent_run_id",
                       "session_id", "current_node", "steps", "error_code", "created_at", "updated_at",
                       "finished_at")


def run_list(reader: StoreReader, status: str | None = None, limit: int = 100, *, workflow: str | None = None,
             since: float | None = None, parent: str | None = None,
             before: tuple[float, str] | None = None) -> list[dict[str, Any]]:
    """The newest `limit` runs, optionally only those in `status`, of `workflow` (its name), created at or
    after `since` (seconds since the epoch), or child runs of `parent`; with `before` (created_at, run_id
    of the last run of a page), only the runs after it in this order. Newest first; runs created in the
    same instant by run id, descending (the order the gateway's run window keeps too)."""
    cols = ", ".join(RUN_SUMMARY_COLUMNS)
    where, params = [], []
    for clause, value in (("status = ?", status), ("workflow = ?", workflow), ("created_at >= ?", since),
                          ("parent_run_id = ? AND parent_node_id IS NOT NULL", parent)):
        if value is not None and value != "":
            where.append(clause)
            params.append(value)
    if before is not None:
        where.append("(created_at < ? OR (created_at = ? AND run_id < ?))")
        params.extend((before[0], before[0], before[1]))
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    rows = reader.all(f"SELECT {cols} FROM run {condition}ORDER BY created_at DESC, run_id DESC LIMIT ?",
                      (*params, limit))
    return [dict(zip(RUN_SUMMARY_COLUMNS, row, strict=True)) for row in rows]


_SUMMARY_SQL = ", ".join(RUN_SUMMARY_COLUMNS)


def _with_rowid(rows: list[tuple[Any, ...]]) -> list[tuple[int, dict[str, Any]]]:
    return [(row[0], dict(zip(RUN_SUMMARY_COLUMNS, row[1:], strict=True))) for row in rows]


def newest_runs(reader: StoreReader, limit: int) -> list[tuple[int, dict[str, Any]]]:
    """`(rowid, run_list row)` of the newest `limit` runs, in run_list's order."""
    return _with_rowid(reader.all(
        f"SELECT rowid, {_SUMMARY_SQL} FROM run ORDER BY created_at DESC, run_id DESC LIMIT ?", (limit,)))


def run_summaries(reader: StoreReader, run_ids: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """`(rowid, run_list row)` of each of `run_ids` that exists, in one statement.

    Up to 8 ids as `IN (?, …)` (each shape a statement sqlite3 keeps prepared: the usual case is one
    to three runs per commit), more as one JSON list (`Dialect.json_values`)."""
    if len(run_ids) <= 8:
        marks = ", ".join("?" * len(run_ids))
        return _with_rowid(reader.all(f"SELECT rowid, {_SUMMARY_SQL} FROM run WHERE run_id IN ({marks})",
                                      tuple(run_ids)))
    return _with_rowid(reader.all(
        f"SELECT rowid, {_SUMMARY_SQL} FROM run WHERE run_id IN {reader.engine.json_values}",
        (json.dumps(run_ids),)))


def live_run_statuses(reader: StoreReader) -> dict[str, str]:
    """run_id → status of every run that has not ended (through the status index: no table scan)."""
    return dict(reader.all(f"SELECT run_id, status FROM run WHERE status IN {LIVE_SQL}"))


def max_run_rowid(reader: StoreReader) -> int:
    """The highest rowid of the run table (0 when empty). SQLite gives a new row max(rowid) + 1."""
    row = reader.one("SELECT max(rowid) FROM run")
    return int(row[0] or 0) if row else 0


def run_view(reader: StoreReader, run_id: str, now: float | None = None) -> dict[str, Any] | None:
    """Everything `run.get` returns: the run, its output and error, and its nodes (one snapshot).
    `now` is the timer time the clocks' `remaining_s` count to (piwf_actors/clock.py; default: the
    system clock)."""
    with reader.snapshot():
        return _run_view(reader, run_id, time.time() if now is None else now)


def _run_view(reader: StoreReader, run_id: str, now: float) -> dict[str, Any] | None:
    found = run_row_and_parts(reader, run_id)
    if found is None:
        return None
    # The parts without rows (most runs have no waits, effects, requests...) are not read (run_parts.py).
    run, parts = found
    nodes: dict[str, dict[str, Any]] = {}
    last_traceback: str | None = None
    for (node_id, status, attempt_no, output_sha, output_json, error_code, error_message, attempt_id, trace,
         copied, executed_by) in reader.all(
            """SELECT node_id, status, attempt_no, output_sha256, output_json, error_code, error_message, attempt_id,
                      traceback, copied_from, executed_by FROM node_attempt WHERE run_id = ? ORDER BY step, started_at""",
            (run_id,)):
        node = nodes.setdefault(node_id, {"node_id": node_id, "status": status, "attempts": 0, "output": None,
                                          "error": None, "attempt_id": attempt_id, "executed_by": None,
                                          "executors": []})
        node["attempts"] = max(node["attempts"], attempt_no)
        # Which host or runner host executed the latest attempt, and every one that executed an attempt
        # of this node, in order (at most the number of hosts: the view stays bounded).
        node["executed_by"] = executed_by
        if executed_by is not None and executed_by not in node["executors"]:
            node["executors"].append(executed_by)
        node["status"] = status
        node["attempt_id"] = attempt_id
        node["output"] = bounded_json(reader, output_sha, output_json)
        node["error"] = None if status == "succeeded" or not error_message else {
            "code": error_code, "message": error_message, **({"traceback": trace} if trace else {})}
        if copied:
            node["copied_from"] = copied
        if status == "failed" and trace:
            last_traceback = trace
    # What each node waited on, if it did (a function run's picture has no graph that would say so).
    for node_id, kind in reader.all("SELECT DISTINCT node_id, kind FROM run_wait WHERE run_id = ?",
                                    (run_id,)) if parts.waits else ():
        if node_id in nodes:
            nodes[node_id]["wait_kind"] = kind
    effects = [dict(zip(("effect_id", "node_id", "status", "resolution"), r, strict=True)) for r in reader.all(
        "SELECT effect_id, node_id, status, resolution FROM effect WHERE run_id = ? ORDER BY reserved_at",
        (run_id,))] if parts.effects else []
    waiting = _requests_of(reader, run_id, nodes, now) if parts.requests else []
    return {
        "run_id": run["run_id"], "workflow": run["workflow"], "status": run["status"],
        "park_reason": run["park_reason"], "park_detail": run["park_detail"], "revision": run["revision"],
        "input": bounded_json(reader, run["input_sha256"], run["input_json"]),
        "output": bounded_json(reader, run["output_sha256"], run["output_json"]),
        "error": None if run["error_code"] is None else {
            "code": run["error_code"], "message": run["error_message"],
            # The frames of the node that failed the run (the last attempt that raised).
            **({"traceback": last_traceback} if last_traceback and run["status"] == "failed" else {})},
        "parent_run_id": run["parent_run_id"], "session_id": run["session_id"],
        "project_path": run["project_path"], "definition_digest": run["definition_digest"],
        "current_node": run["current_node"], "steps": run["steps"],
        "pause_requested": bool(run["pause_requested"]), "cancel_requested": bool(run["cancel_requested"]),
        "created_at": run["created_at"], "updated_at": run["updated_at"], "finished_at": run["finished_at"],
        "nodes": list(nodes.values()), "effects": effects,
        "waiting": waiting,
        # {name, fire_time, kind} when a schedule started it
        "schedule": run_schedule(reader, run_id) if parts.schedule else None,
        # priority, waits, mailbox, children, queue_reason (store/flow_queries.py)
        **flow_view(reader, run, now, parts),
    }


def _requests_of(reader: StoreReader, run_id: str, nodes: dict[str, dict[str, Any]],
                 now: float) -> list[dict[str, Any]]:
    """The run's interactive requests, read once: who answered each waiting node's latest attempt, and
    when (`answer: {by, at}` on the node, the accepted submission's provenance: `human` with client id,
    session, pid and uid; `channel` with the Telegram user; `timeout`; `agent`), and the open requests
    with their clocks (returned, run.get's `waiting`): `running` (the deadline counts, `remaining_s`
    until it), `paused` (the run is paused: `remaining_s` is what is left when it resumes) or `none`
    (no deadline). `remaining_s` counts to `now`, timer time."""
    latest = {node["attempt_id"]: node for node in nodes.values()}
    waiting = []
    for request_id, node_id, attempt_id, kind, status, deadline_at, paused_left, provenance, submitted_at in reader.all(
            """SELECT r.request_id, r.node_id, r.attempt_id, r.kind, r.status, r.deadline_at, r.paused_remaining_s,
                      s.provenance, s.submitted_at
               FROM interactive_request r LEFT JOIN interactive_submission s
                    ON s.submission_id = r.accepted_submission_id
               WHERE r.run_id = ? ORDER BY r.created_at""", (run_id,)):
        node = latest.get(attempt_id)
        if node is not None:
            node["wait_kind"] = kind  # decision, checkpoint or agent
        if provenance is not None and node is not None:
            node["answer"] = {"by": _json(provenance), "at": submitted_at}
            node["answered_by"] = node["answer"]["by"]  # beside `output`, the answer it gave (docs/protocol.md)
        if status not in ("pending", "presenting"):
            continue
        paused = paused_left is not None
        remaining = paused_left if paused else None if deadline_at is None else max(0.0, deadline_at - now)
        clock = "paused" if paused else "none" if deadline_at is None else "running"
        waiting.append({"request_id": request_id, "node_id": node_id, "kind": kind, "status": status,
                        "deadline_at": deadline_at, "clock": clock, "remaining_s": remaining})
    return waiting


def run_events(reader: StoreReader, run_id: str, after: int = 0, limit: int = 500) -> list[dict[str, Any]]:
    rows = reader.all(
        """SELECT seq, kind, node_id, attempt_id, payload, created_at FROM run_event
           WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?""", (run_id, after, limit))
    return [{"seq": seq, "kind": kind, "node_id": node_id, "attempt_id": attempt_id, "payload": _json(payload),
             "created_at": created_at} for seq, kind, node_id, attempt_id, payload, created_at in rows]


def run_status(reader: StoreReader, run_id: str) -> tuple[str, int] | None:
    row = reader.one("SELECT status, revision FROM run WHERE run_id = ?", (run_id,))
    return None if row is None else (row[0], row[1])


def pending_interactions(reader: StoreReader, session_id: str | None = None) -> dict[str, Any]:
    """Pending interactive requests and unacknowledged session messages (all sessions when None)."""
    params: tuple[Any, ...] = ()
    where = "r.status IN ('pending', 'presenting')"
    if session_id is not None:
        where += " AND (r.target_session_id = ? OR r.target_session_id IS NULL)"
        params = (session_id,)
    requests = []
    for row in reader.all(
            f"""SELECT r.request_id, r.run_id, r.node_id, r.attempt_id, r.kind, r.target_session_id, r.audience,
                       r.revision, r.status, r.deadline_at, r.paused_remaining_s, r.contract_sha256, r.created_at
                FROM interactive_request r WHERE {where} ORDER BY r.created_at""", params):
        # A paused run's request has no deadline_at: its clock stands still with paused_remaining_s left.
        keys = ("request_id", "run_id", "node_id", "attempt_id", "kind", "session_id", "audience", "revision",
                "status", "deadline_at", "paused_remaining_s", "contract_sha256", "created_at")
        item = dict(zip(keys, row, strict=True))
        item["contract"] = _blob_json(reader, item.pop("contract_sha256"))
        requests.append(item)
    msg_where = "acked_at IS NULL" + (" AND session_id = ?" if session_id is not None else "")
    messages = [dict(zip(("message_id", "session_id", "run_id", "kind", "body", "created_at"), row, strict=True))
                for row in reader.all(
                    f"""SELECT message_id, session_id, run_id, kind, body, created_at FROM session_message
                        WHERE {msg_where} ORDER BY created_at""", params)]
    for message in messages:
        message["body"] = _json(message["body"])
    return {"requests": requests, "messages": messages}


def submission_state(reader: StoreReader, submission_id: str) -> dict[str, Any] | None:
    """A submission's outcome and its request's status; `decided`: the worker's verdict is in (or the
    request was cancelled under it, which decides it too)."""
    row = reader.one(
        """SELECT s.request_id, s.outcome, s.receipt, r.status FROM interactive_submission s
           JOIN interactive_request r ON r.request_id = s.request_id WHERE s.submission_id = ?""", (submission_id,))
    if row is None:
        return None
    return {"request_id": row[0], "outcome": row[1], "receipt": _json(row[2]), "request_status": row[3],
            "decided": row[1] != "validating" or row[3] == "cancelled"}


def next_deadline(reader: StoreReader) -> float | None:
    row = reader.one(
        """SELECT min(deadline_at) FROM interactive_request r WHERE status IN ('pending', 'presenting')
           AND NOT EXISTS (SELECT 1 FROM interactive_submission s
                           WHERE s.request_id = r.request_id AND s.outcome = 'validating')""")
    return None if row is None else row[0]


def next_wake(reader: StoreReader) -> float | None:
    """The nearest wake-up time of a pending wait (a sleep, a message timeout) or of held runs' timer:
    one probe of the `run_wait_wake_at` and `flow_timer_wake_at` indexes, however many runs wait."""
    row = reader.one("SELECT min(wake_at) FROM run_wait WHERE status = 'pending' AND wake_at IS NOT NULL")
    wait = None if row is None or row[0] is None else float(row[0])
    # ... and of the timers of runs held by a rate limit or a debounce (store/commands/flow_timers.py)
    row = reader.one("SELECT min(wake_at) FROM flow_timer WHERE wake_at IS NOT NULL")
    timer = None if row is None or row[0] is None else float(row[0])
    return min((at for at in (wait, timer) if at is not None), default=None)


def claimable_exists(reader: StoreReader, exclude: list[str]) -> bool:
    """Is any run waiting to be claimed? (A cheap read before asking the writer to claim.) Runs held
    back by a limit (queue class 3) are not: they wait until a run of their key ends."""
    marks = ",".join("?" * len(exclude)) or "''"
    row = reader.one(
        f"""SELECT 1 FROM run WHERE status = 'queued' AND queue_class < 3 AND pause_requested = 0
            AND cancel_requested = 0 AND run_id NOT IN ({marks}) LIMIT 1""", tuple(exclude))
    return row is not None
