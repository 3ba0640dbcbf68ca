"""`worker.message`: every transition a worker reports, applied under its claim.

The runner supervisor forwards each worker message here unchanged. The
command checks, in order: the message was seen before (same runner epoch
and message id) — then the recorded answer is returned, or the message is
rejected if its payload differs; the claim is still this launch's (token
hash, generation, runner epoch, host epoch, expiry) — else `claimLost`; the
run's revision is the one the worker expects — else `conflict`. Only then
does the operation run, and its answer is recorded in the same transaction
as its effect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from piwf_actors.canonical import canonical_json, fingerprint, loads
from piwf_actors.errors import ClaimLost, Conflict, PiwfError, Rejected
from piwf_actors.ids import new_id
from piwf_actors.messages.content import INLINE_BYTES
from piwf_actors.store.blobs import put_json_blob
from piwf_actors.store.commands import children
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import release_claim, require_claim, run_row, set_status

Handler = Callable[[WriteContext, dict[str, Any], dict[str, Any]], Any]
#: Operations that neither check nor move the progress revision (bookkeeping, not transitions).
_UNFENCED_OPS = frozenset({"ready", "register_child", "release_child"})
_OPERATIONS: dict[str, Handler] = {}


def operation(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _OPERATIONS[name] = fn
        return fn

    return register


@command("worker.message")
def worker_message(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    run_id, runner_epoch, message_id = args["run_id"], args["runner_epoch"], args["message_id"]
    op = args["op"]
    payload = args.get("payload") or {}
    print_ = fingerprint({"op": op, "run_id": run_id, "generation": args["generation"],
                          "expected_revision": args.get("expected_revision"), "payload": payload})
    seen = ctx.conn.execute(
        "SELECT fingerprint, response FROM worker_message WHERE runner_epoch = ? AND message_id = ?",
        (runner_epoch, message_id)).fetchone()
    if seen is not None:
        if seen[0] != print_:
            raise Rejected(f"message id {message_id} was already used with another payload")
        return {**loads(seen[1]), "replayed": True}
    claim = require_claim(ctx, run_id, args["token_hash"], args["generation"], runner_epoch)
    handler = _OPERATIONS.get(op)
    if handler is None:
        raise Rejected(f"unknown worker operation {op!r}")
    run = run_row(ctx.conn, run_id)
    run["claim_generation"] = claim["generation"]
    expected = args.get("expected_revision")
    if expected is not None and expected != run["progress"] and op not in _UNFENCED_OPS:
        raise Conflict(f"run {run_id} progress conflict: expected {expected}, got {run['progress']}")
    ctx.conn.execute("SAVEPOINT op")
    try:
        value = handler(ctx, run, payload)
    except ClaimLost:
        ctx.conn.execute("ROLLBACK TO op")
        ctx.conn.execute("RELEASE op")
        raise
    except PiwfError as err:
        ctx.conn.execute("ROLLBACK TO op")
        ctx.conn.execute("RELEASE op")
        response = {"outcome": "rejected", "error": err.one_line(), "error_code": err.code,
                    "revision": run["progress"]}
    else:
        ctx.conn.execute("RELEASE op")
        progress = run["progress"]
        if op not in _UNFENCED_OPS:
            progress = ctx.conn.execute("UPDATE run SET progress = progress + 1 WHERE run_id = ? RETURNING progress",
                                        (run_id,)).fetchone()[0]
        response = {"outcome": "accepted", "value": value, "revision": progress}
        if "run_claim" in ctx.changes.tables:  # only release_claim touches it here
            # The transition ended the launch (run finished, failed or parked): the
            # supervisor need not settle the run when the worker then ends the launch.
            response["released"] = True
    ctx.conn.execute(
        """INSERT INTO worker_message (runner_epoch, message_id, run_id, generation, kind, fingerprint,
               response, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (runner_epoch, message_id, run_id, args["generation"], op, print_, canonical_json(response), ctx.now))
    return response


#: A launch carries stored values inline up to this many bytes in all; the
#: rest (and any single value over `INLINE_BYTES`) travel as content
#: references the worker reads in chunks, so no launch frame depends on the
#: size of the run's state.
LAUNCH_INLINE_BUDGET = 512 * 1024


class _LaunchValues:
    """Loads stored JSON values for a launch, inline while they fit, as references beyond."""

    def __init__(self, ctx: WriteContext) -> None:
        self._conn = ctx.conn
        self._left = LAUNCH_INLINE_BUDGET
        self.refs: list[dict[str, Any]] = []

    def load(self, sha256: str | None, path: list[str]) -> Any:
        if sha256 is None:
            return None
        row = self._conn.execute("SELECT size, CASE WHEN size <= ? THEN data END FROM blob WHERE sha256 = ?",
                                 (min(INLINE_BYTES, self._left), sha256)).fetchone()
        if row is None:
            return None
        size, data = int(row[0]), row[1]
        if data is None:
            self.refs.append({"path": path, "digest": sha256, "bytes": size, "encoding": "json"})
            return None
        self._left -= size
        return loads(bytes(data).decode())


def _latest_outputs(ctx: WriteContext, run_id: str, values: _LaunchValues) -> dict[str, Any]:
    latest: dict[str, str | None] = {}
    for node_id, sha in ctx.conn.execute(
            """SELECT node_id, output_sha256 FROM node_attempt WHERE run_id = ?
               AND (status = 'succeeded' OR (status = 'failed' AND output_sha256 IS NOT NULL))
               ORDER BY step, started_at""", (run_id,)):
        latest[node_id] = sha
    return {node_id: values.load(sha, ["outputs", node_id]) for node_id, sha in latest.items()}


def _attempt_counts(ctx: WriteContext, run_id: str) -> tuple[dict[str, int], bool]:
    """Attempts per node, and whether the watchdog stopped one (its failure is still to be routed)."""
    counts: dict[str, int] = {}
    timed_out = False
    for node, count, stopped in ctx.conn.execute(
            "SELECT node_id, count(*), max(status = 'timed_out') FROM node_attempt WHERE run_id = ? GROUP BY node_id",
            (run_id,)):
        counts[node] = count
        timed_out = timed_out or bool(stopped)
    return counts, timed_out


@operation("ready")
def _ready(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The worker loaded the workflow: mark the run running and hand it the state to resume from."""
    run_id = run["run_id"]
    ctx.conn.execute("UPDATE run_worker SET status = 'live' WHERE run_id = ? AND status = 'starting'", (run_id,))
    if run["start_failures"]:
        ctx.conn.execute("UPDATE run SET start_failures = 0 WHERE run_id = ?", (run_id,))
    first = ctx.conn.execute("SELECT 1 FROM run_event WHERE run_id = ? AND kind = 'run_started' LIMIT 1",
                             (run_id,)).fetchone() is None
    if run["current_node"] is None and payload.get("start_at"):
        # Shown by run.get while the first node runs (pure nodes announce themselves only when done).
        ctx.conn.execute("UPDATE run SET current_node = ? WHERE run_id = ?", (payload["start_at"], run_id))
    if payload.get("definition_digest") and not run["definition_digest"]:
        ctx.conn.execute("UPDATE run SET definition_digest = ? WHERE run_id = ?",
                         (payload["definition_digest"], run_id))
    set_status(ctx, run_id, "running", "run_started" if first else "run_resumed",
               payload={"current_node": run["current_node"], "steps": run["steps"]})
    return launch_state(ctx, run)


def launch_state(ctx: WriteContext, run: dict[str, Any]) -> dict[str, Any]:
    """What a launch resumes from: input, where it stands, the latest output per node.

    Large values are left None and listed in `content_refs` ({path, digest,
    bytes, encoding}, paths from the state's root); the runner supervisor
    turns them into the launch frame's references. `timed_out` names a node
    the host's watchdog stopped: the worker reports its failure (and routes
    it) instead of running it again.
    """
    run_id = run["run_id"]
    values = _LaunchValues(ctx)
    confirmed = {}
    for effect_id, node_id, sha in ctx.conn.execute(
            """SELECT effect_id, node_id, output_sha256 FROM effect WHERE run_id = ? AND status = 'applied'
               AND resolution = 'confirmed'""", (run_id,)):
        confirmed[node_id] = {"effect_id": effect_id,
                              "output": values.load(sha, ["confirmed_effects", node_id, "output"])}
    attempts, any_timed_out = _attempt_counts(ctx, run_id)
    timed_out = {} if not any_timed_out else {
        node_id: {"attempt_id": attempt_id, "error": error or "timed out"}
        for node_id, attempt_id, error in ctx.conn.execute(
            "SELECT node_id, attempt_id, error_message FROM node_attempt WHERE run_id = ? AND status = 'timed_out'",
            (run_id,))}
    state = {
        "input": values.load(run["input_sha256"], ["input"]),
        "current_node": run["current_node"],  # None on a fresh run: the worker starts at start_at
        "steps": run["steps"],
        "outputs": _latest_outputs(ctx, run_id, values),
        "attempts": attempts,
        "confirmed_effects": confirmed,
        "timed_out": timed_out,
        "session_id": run["session_id"],
    }
    if values.refs:
        state["content_refs"] = values.refs
    return state


def _boundary_directive(ctx: WriteContext, run: dict[str, Any]) -> str | None:
    """At a node boundary: park a run whose pause was requested. Returns 'stop' if parked."""
    # `run` was read in this transaction; only this command could have changed
    # the flags since, and it does not.
    current = run
    if current["cancel_requested"]:
        return "stop"
    if current["pause_requested"]:
        ctx.conn.execute("UPDATE run SET pause_requested = 0 WHERE run_id = ?", (run["run_id"],))
        set_status(ctx, run["run_id"], "parked", "run_parked", park_reason="paused", payload={"reason": "paused"})
        release_claim(ctx, run["run_id"])
        return "stop"
    return None


@operation("effect_reserve")
def _effect_reserve(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Start an attempt of a side-effecting node and reserve its effect (`applying`) before it acts."""
    if _boundary_directive(ctx, run) == "stop":
        return {"directive": "stop"}
    node_id = payload["node_id"]
    attempt_id, attempt_no = _start_attempt(ctx, run, node_id, payload.get("attempt_id"))
    effect_id = new_id("eff", ctx.now)
    ctx.conn.execute(
        """INSERT INTO effect (effect_id, run_id, node_id, attempt_id, status, idempotent, reserved_at)
           VALUES (?, ?, ?, ?, 'applying', ?, ?)""",
        (effect_id, run["run_id"], node_id, attempt_id, bool(payload.get("idempotent")), ctx.now))
    append_event(ctx.conn, run["run_id"], "effect_reserved", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"effect_id": effect_id})
    ctx.changes.touch("effect", run["run_id"])
    return {"attempt_id": attempt_id, "attempt_no": attempt_no, "effect_id": effect_id}


def _start_attempt(ctx: WriteContext, run: dict[str, Any], node_id: str,
                   attempt_id: str | None = None) -> tuple[str, int]:
    """Record a new running attempt (the worker proposes its id so callbacks can see it)."""
    attempt_no = ctx.conn.execute("SELECT count(*) FROM node_attempt WHERE run_id = ? AND node_id = ?",
                                  (run["run_id"], node_id)).fetchone()[0] + 1
    attempt_id = attempt_id or new_id("att", ctx.now)
    generation = run.get("claim_generation")
    if generation is None:
        generation = ctx.conn.execute("SELECT generation FROM run_claim WHERE run_id = ?",
                                      (run["run_id"],)).fetchone()[0]
    ctx.conn.execute(
        """INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, generation, started_at)
           VALUES (?, ?, ?, ?, ?, 'running', ?, ?)""",
        (attempt_id, run["run_id"], node_id, attempt_no, run["steps"], generation, ctx.now))
    ctx.conn.execute("UPDATE run SET current_node = ? WHERE run_id = ?", (node_id, run["run_id"]))
    append_event(ctx.conn, run["run_id"], "node_started", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"attempt_no": attempt_no})
    return attempt_id, attempt_no


@operation("node_finished")
def _node_finished(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Commit one node's result and where the run goes next, atomically.

    `next` is what the worker's routing decided: {"node": id}, {"finish": true},
    {"fail": {"code", "message"}} or {"retry": true} (the attempt failed and
    the node will run again). Pure nodes arrive here without a prior
    `effect_reserve`; their attempt is created and finished in one go.
    """
    run_id, node_id = run["run_id"], payload["node_id"]
    attempt_id = payload.get("attempt_id")
    if attempt_id is None or payload.get("new_attempt"):
        attempt_id, _ = _start_attempt(ctx, run, node_id, attempt_id)
    outcome = payload["outcome"]
    # A failed node keeps its output too (a shell's exit code and stderr) for a
    # `$result.outcome` route to inspect.
    keep = outcome == "ok" or payload.get("output") is not None
    output_sha = put_json_blob(ctx.conn, payload.get("output"), ctx.now) if keep else None
    changed = ctx.conn.execute(
        """UPDATE node_attempt SET status = ?, outcome = ?, output_sha256 = ?, error_code = ?, error_message = ?,
               traceback = ?, finished_at = ?
           WHERE attempt_id = ? AND run_id = ? AND status IN ('running', 'waiting', 'timed_out')""",
        ("succeeded" if outcome == "ok" else "failed", outcome, output_sha, payload.get("error_code"),
         (payload.get("error") or None) and str(payload.get("error"))[:4000],
         (payload.get("traceback") or None) and str(payload["traceback"])[:8192], ctx.now, attempt_id,
         run_id)).rowcount
    if changed != 1:
        raise Rejected(f"attempt {attempt_id} of run {run_id} is not running")
    if payload.get("request_id") is not None:
        from piwf_actors.store.commands.interactions import consume_request

        consume_request(ctx, run_id, payload["request_id"])
    effect_id = payload.get("effect_id")
    if effect_id is not None:
        status = "applied" if outcome == "ok" else "failed"
        resolution = "confirmed_consumed" if payload.get("confirmed") else None
        ctx.conn.execute(
            """UPDATE effect SET status = ?, output_sha256 = ?, error = ?, settled_at = ?,
                   resolution = coalesce(?, resolution) WHERE effect_id = ? AND run_id = ?""",
            (status, output_sha, payload.get("error"), ctx.now, resolution, effect_id, run_id))
        append_event(ctx.conn, run_id, "effect_settled", ctx.now, node_id=node_id, attempt_id=attempt_id,
                     payload={"effect_id": effect_id, "status": status})
    nxt = payload.get("next") or {}
    event_payload: dict[str, Any] = {"outcome": outcome}
    if outcome != "ok":
        event_payload["error"] = str(payload.get("error") or "")[:1000]
    append_event(ctx.conn, run_id, "node_finished" if outcome == "ok" else "node_failed", ctx.now,
                 node_id=node_id, attempt_id=attempt_id, payload=event_payload)
    if payload.get("notification") is not None:
        _notify(ctx, run, node_id, payload["notification"])
    if nxt.get("retry"):
        ctx.changes.touch("node_attempt", run_id)
        return {"attempt_id": attempt_id, "directive": _boundary_directive(ctx, run)}
    ctx.conn.execute("UPDATE run SET steps = steps + 1, current_node = ? WHERE run_id = ?",
                     (nxt.get("node"), run_id))
    if nxt.get("finish"):
        ctx.conn.execute("UPDATE run SET output_sha256 = ? WHERE run_id = ?", (output_sha, run_id))
        set_status(ctx, run_id, "done", "run_finished", node_id=node_id, payload={"status": "done"})
        release_claim(ctx, run_id)
        return {"attempt_id": attempt_id, "directive": "stop"}
    if nxt.get("fail"):
        fail = nxt["fail"]
        set_status(ctx, run_id, "failed", "run_failed", node_id=node_id, error_code=fail["code"],
                   error_message=str(fail.get("message", ""))[:4000], payload={"error_code": fail["code"]})
        release_claim(ctx, run_id)
        return {"attempt_id": attempt_id, "directive": "stop"}
    if nxt.get("node") is None:
        raise Rejected("node_finished needs next.node, next.finish, next.fail or next.retry")
    ctx.changes.touch("run", run_id)
    return {"attempt_id": attempt_id, "directive": _boundary_directive(ctx, run)}


def _notify(ctx: WriteContext, run: dict[str, Any], node_id: str, message: Any) -> None:
    ctx.conn.execute(
        "INSERT INTO session_message (message_id, session_id, run_id, kind, body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (new_id("msg", ctx.now), run["session_id"], run["run_id"], "notify",
         canonical_json({"node_id": node_id, "message": message}), ctx.now))
    ctx.changes.touch("session_message", run["run_id"])


@operation("run_failed")
def _run_failed(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The worker ends the run as failed (cannot load the workflow, step limit, …)."""
    code = str(payload.get("code") or "run_failed")
    set_status(ctx, run["run_id"], "failed", "run_failed", error_code=code,
               error_message=str(payload.get("message", ""))[:8192], payload={"error_code": code})
    release_claim(ctx, run["run_id"])
    return {"directive": "stop"}


@operation("register_child")
def _register_child(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> bool:
    children.register(ctx, payload["pid"], payload["create_time"], payload.get("kind", "shell"), run["run_id"])
    return True


@operation("release_child")
def _release_child(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> bool:
    children.release(ctx, payload["pid"], payload["create_time"], run["run_id"])
    return True
