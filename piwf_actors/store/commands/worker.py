"""`worker.message`: every transition a worker reports, applied under its claim.

The runner supervisor forwards each worker message here unchanged. The
command checks, in order: the message was seen before (same launch id
and message id) — then the recorded answer is returned, or the message is
rejected if its payload differs; the claim is still this launch's (token
hash, generation, launch id, and the owner: the host epoch for the
active host's claims, the runner id and runner lease epoch for a runner
host's (docs/runners.md); expiry) — else `claimLost`; the
run's revision is the one the worker expects — else `conflict`. Only then
does the operation run, and its answer is recorded in the same transaction
as its effect.

This is the writer's hot path (a trivial node costs one of these), so it is
kept to a handful of statements: one read for the recorded answer, the
claim, the run's last event seq and the run row together; the operation's
own writes, with the move of the run's progress folded into its update of
the run row; the record, held back and inserted with the batch's others
(store/batch_connection.py; a resend in the same batch finds it there).
A refusal that comes after the operation wrote something needs its writes
undone: the first pass runs without a savepoint and, in that rare case,
asks the batch to run again with savepoints (`NeedsSavepoints`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import ClaimLost, Conflict, PiwfError, Rejected
from piwf_actors.ids import new_id
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.blobs import put_json_blob
from piwf_actors.store.commands import children
from piwf_actors.store.commands.interactions import consume_request
from piwf_actors.store.commands.registry import NeedsSavepoints, WriteContext, command
from piwf_actors.store.commands.waits import consume_wait
from piwf_actors.store.commands.worker_ops import claim_generation, lookup_operation, operation, start_attempt
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import release_claim, set_status
from piwf_actors.store.values import put_value
from piwf_actors.wire.content import INLINE_BYTES

#: The recorded answer, the claim, the run's last event seq (so the events the message appends
#: cost no read of their own: BatchConnection.prime_seq) and the run row, read in one statement.
_MESSAGE_CONTEXT = """
    SELECT m.fingerprint, m.response, c.claim_token_hash, c.generation, c.launch_id, c.host_epoch,
           c.expires_at, c.runner_id, c.runner_lease_epoch,
           (SELECT coalesce(max(e.seq), 0) FROM run_event e WHERE e.run_id = r.run_id), r.*
    FROM run r
    LEFT JOIN run_claim c ON c.run_id = r.run_id
    LEFT JOIN worker_message m ON m.launch_id = ? AND m.message_id = ?
    WHERE r.run_id = ?"""
_CONTEXT_COLUMNS = 10
_RECORD = """INSERT INTO worker_message (launch_id, message_id, run_id, generation, kind, fingerprint, response,
                 created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""


def message_fingerprint(args: dict[str, Any]) -> str:
    """What identifies a worker message's content, for telling a resend from a reused id.

    A resend carries the very bytes of the first sending, decoded to equal
    values in the same order, so msgpack's packing (C, no canonical JSON
    of a possibly large output) is as good a basis as any and far cheaper.
    """
    packed = msgpack.packb([args["op"], args["run_id"], args["generation"], args.get("expected_revision"),
                            args.get("payload")], use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=16).hexdigest()


@command("worker.message")
def worker_message(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    run_id, launch_id, message_id = args["run_id"], args["launch_id"], args["message_id"]
    op_name = args["op"]
    payload = args.get("payload") or {}
    print_ = message_fingerprint(args)
    batch = ctx.conn if isinstance(ctx.conn, BatchConnection) else None
    if batch is not None:
        # The run's last seq is primed below and the records this batch holds are looked up in memory.
        cursor = batch.execute_beside(_MESSAGE_CONTEXT, (launch_id, message_id, run_id),
                                      tables=("run_event", "worker_message"))
    else:
        cursor = ctx.conn.execute(_MESSAGE_CONTEXT, (launch_id, message_id, run_id))
    row = cursor.fetchone()
    if row is None:
        raise ClaimLost(run_id, "the run is not claimed")
    (seen_print, seen_response, token_hash, generation, claim_epoch, claim_host_epoch, expires_at,
     claim_runner_id, claim_runner_lease_epoch, last_seq) = row[:_CONTEXT_COLUMNS]
    if batch is not None:
        batch.prime_seq(run_id, int(last_seq))
        if batch.deleting("worker_message", launch_id):
            seen_print = seen_response = None  # the launch ended in this batch: its records are going
        elif seen_print is None:
            held = batch.held_row("worker_message", (launch_id, message_id))
            if held is not None:
                seen_print, seen_response = held[5], held[6]
    if seen_print is not None:
        if seen_print != print_:
            raise Rejected(f"message id {message_id} was already used with another payload")
        return {**msgpack.unpackb(seen_response, raw=False), "replayed": True}
    if token_hash is None:
        raise ClaimLost(run_id, "the run is not claimed")
    if generation != args["generation"] or token_hash != args["token_hash"]:
        raise ClaimLost(run_id, f"generation {args['generation']} is not the current claim")
    if claim_epoch != launch_id:
        raise ClaimLost(run_id, "launch id is stale")
    if not ctx.owns_claim(claim_host_epoch, claim_runner_id, claim_runner_lease_epoch):
        raise ClaimLost(run_id, "claim belongs to an earlier host epoch" if claim_runner_id is None
                        and ctx.runner_id is None else "claim belongs to another host or runner lease")
    if expires_at <= ctx.now:
        raise ClaimLost(run_id, "claim lease expired")
    op = lookup_operation(op_name)
    if op is None:
        raise Rejected(f"unknown worker operation {op_name!r}")
    run = dict(zip([d[0] for d in cursor.description[_CONTEXT_COLUMNS:]], row[_CONTEXT_COLUMNS:], strict=True))
    run["claim_generation"] = generation
    expected = args.get("expected_revision")
    if op.fenced and expected is not None and expected != run["progress"]:
        raise Conflict(f"run {run_id} progress conflict: expected {expected}, got {run['progress']}")
    response = _apply(ctx, op, run, payload)
    if response.get("released"):
        # The launch ended with this message, and its records went with its claim: a resend
        # now finds the claim gone (claimLost), which is the truth for a launch that is over.
        return response
    # The answer as msgpack (a blob): it only ever goes back to the worker, and packing it
    # costs a fraction of canonical JSON on this hot path.
    record = (launch_id, message_id, run_id, args["generation"], op_name, print_,
              msgpack.packb(response, use_bin_type=True), ctx.now)
    if batch is not None:
        # Held back and inserted with the batch's other records (or never, when the launch ends in this
        # batch: release_claim drops them); a resend in this batch finds it through held_row above.
        batch.hold_insert("worker_message", _RECORD, record, keys=((launch_id, message_id),))
    else:
        ctx.conn.execute(_RECORD, record)
    return response


def _apply(ctx: WriteContext, op: Any, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Run the operation; a refusal becomes a recorded `rejected` answer with nothing of it written."""
    if ctx.savepoints:
        ctx.conn.execute("SAVEPOINT op")
    before = ctx.conn.total_changes
    progress = run["progress"]
    try:
        value = op.fn(ctx, run, payload)
    except PiwfError as err:
        if ctx.savepoints:
            ctx.conn.execute("ROLLBACK TO op")
            ctx.conn.execute("RELEASE op")
        elif ctx.conn.total_changes != before:
            raise NeedsSavepoints() from err
        if isinstance(err, ClaimLost):
            raise
        return {"outcome": "rejected", "error": err.one_line(), "error_code": err.code, "revision": progress}
    if ctx.savepoints:
        ctx.conn.execute("RELEASE op")
    if op.fenced and not op.moves_progress:
        run["progress"] = ctx.conn.execute(
            "UPDATE run SET progress = progress + 1 WHERE run_id = ? RETURNING progress", (run["run_id"],)).fetchone()[0]
    response = {"outcome": "accepted", "value": value, "revision": run["progress"]}
    if "run_claim" in ctx.changes.tables:  # only release_claim touches it here
        # The transition ended the launch (run finished, failed or parked): the
        # supervisor need not settle the run when the worker then ends the launch.
        response["released"] = True
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

    def load(self, sha256: str | None, path: list[str], inline: str | None = None) -> Any:
        if inline is not None:
            self._left -= len(inline)
            return loads(inline)
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
    latest: dict[str, tuple[str | None, str | None]] = {}
    for node_id, sha, inline in ctx.conn.execute(
            """SELECT node_id, output_sha256, output_json FROM node_attempt WHERE run_id = ?
               AND (status = 'succeeded'
                    OR (status = 'failed' AND (output_sha256 IS NOT NULL OR output_json IS NOT NULL)))
               ORDER BY step, started_at""", (run_id,)):
        latest[node_id] = (sha, inline)
    return {node_id: values.load(sha, ["outputs", node_id], inline) for node_id, (sha, inline) in latest.items()}


def _attempt_counts(ctx: WriteContext, run_id: str) -> tuple[dict[str, int], dict[str, int], bool]:
    """Attempts per node, those of them that finished (not cut off by a crash: a node's messages are
    keyed by these, worker/engine.py), and whether the watchdog stopped one (its failure is still to
    be routed)."""
    counts: dict[str, int] = {}
    finished: dict[str, int] = {}
    timed_out = False
    for node, count, ended, stopped in ctx.conn.execute(
            "SELECT node_id, count(*), sum(CASE WHEN status IN ('succeeded', 'failed', 'timed_out') THEN 1 ELSE 0 "
            "END), max(CASE WHEN status = 'timed_out' THEN 1 ELSE 0 END) FROM node_attempt "
            "WHERE run_id = ? GROUP BY node_id",
            (run_id,)):
        counts[node] = count
        finished[node] = int(ended or 0)
        timed_out = timed_out or bool(stopped)
    return counts, finished, timed_out


@operation("ready", fenced=False)
def _ready(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any] | None:
    """The worker loaded the workflow: mark the run running. The launch state is in the answer
    only when the worker asks for it (`want_state`): a claim ships it with the launch."""
    run_id = run["run_id"]
    # (The worker's row is `live` already: recorded so by the claim, or by the `runner.attach`
    # the supervisor sent before the launch.)
    # The first launch of a run starts it; a later one resumes it, unless no launch ever got
    # this far (its workers failed to start).
    first = run["claim_generation"] == 1 or ctx.conn.execute(
        "SELECT 1 FROM run_event WHERE run_id = ? AND kind = 'run_started' LIMIT 1", (run_id,)).fetchone() is None
    # current_node is shown by run.get while the first node runs (pure nodes announce
    # themselves only when done).
    set_status(ctx, run_id, "running", "run_started" if first else "run_resumed",
               payload={"current_node": run["current_node"], "steps": run["steps"]},
               also="current_node = coalesce(current_node, ?), definition_digest = coalesce(definition_digest, ?), "
                    "start_failures = 0",
               also_params=(payload.get("start_at"), payload.get("definition_digest")))
    return launch_state(ctx, run) if payload.get("want_state", True) else None


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
    if (run.get("claim_generation") == 1 and run["progress"] == 0 and run["steps"] == 0
            and run["current_node"] is None):
        # The first launch of a run that starts at the beginning (not a fork of another run's
        # outputs): no attempt, output or effect can exist yet.
        state: dict[str, Any] = {"input": values.load(run["input_sha256"], ["input"], run["input_json"]), "current_node": None,
                                 "steps": 0, "outputs": {}, "attempts": {}, "finished_attempts": {},
                                 "confirmed_effects": {},
                                 "timed_out": {}, "session_id": run["session_id"]}
        if values.refs:
            state["content_refs"] = values.refs
        return state
    confirmed = {}
    for effect_id, node_id, sha in ctx.conn.execute(
            """SELECT effect_id, node_id, output_sha256 FROM effect WHERE run_id = ? AND status = 'applied'
               AND resolution = 'confirmed'""", (run_id,)):
        confirmed[node_id] = {"effect_id": effect_id,
                              "output": values.load(sha, ["confirmed_effects", node_id, "output"])}
    attempts, finished, any_timed_out = _attempt_counts(ctx, run_id)
    timed_out = {} if not any_timed_out else {
        node_id: {"attempt_id": attempt_id, "error": error or "timed out"}
        for node_id, attempt_id, error in ctx.conn.execute(
            "SELECT node_id, attempt_id, error_message FROM node_attempt WHERE run_id = ? AND status = 'timed_out'",
            (run_id,))}
    state = {
        "input": values.load(run["input_sha256"], ["input"], run["input_json"]),
        "current_node": run["current_node"],  # None on a fresh run: the worker starts at start_at
        "steps": run["steps"],
        "outputs": _latest_outputs(ctx, run_id, values),
        "attempts": attempts,
        "finished_attempts": finished,
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


@operation("effect_reserve", moves_progress=True)
def _effect_reserve(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Start an attempt of a side-effecting node and reserve its effect (`applying`) before it acts."""
    if _boundary_directive(ctx, run) == "stop":
        run["progress"] = ctx.conn.execute("UPDATE run SET progress = progress + 1 WHERE run_id = ? "
                                           "RETURNING progress", (run["run_id"],)).fetchone()[0]
        return {"directive": "stop"}
    node_id = payload["node_id"]
    attempt_id, attempt_no = start_attempt(ctx, run, node_id, payload.get("attempt_id"), payload.get("attempt_no"),
                                           move_progress=True)
    effect_id = new_id("eff", ctx.now)
    ctx.conn.execute(
        """INSERT INTO effect (effect_id, run_id, node_id, attempt_id, status, idempotent, reserved_at)
           VALUES (?, ?, ?, ?, 'applying', ?, ?)""",
        (effect_id, run["run_id"], node_id, attempt_id, bool(payload.get("idempotent")), ctx.now))
    append_event(ctx.conn, run["run_id"], "effect_reserved", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"effect_id": effect_id})
    ctx.changes.touch("effect", run["run_id"])
    return {"attempt_id": attempt_id, "attempt_no": attempt_no, "effect_id": effect_id}


_FINISHED_ATTEMPT = """INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, outcome,
        output_json, output_sha256, error_code, error_message, traceback, generation, started_at, finished_at,
        executed_by)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


@operation("node_finished", moves_progress=True)
def _node_finished(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Commit one node's result and where the run goes next, atomically.

    `next` is what the worker's routing decided: {"node": id}, {"finish": true},
    {"fail": {"code", "message"}} or {"retry": true} (the attempt failed and
    the node will run again); a durable function's step says {"continue": true}:
    the run goes on and the worker decides what is next (current_node NULL). Pure nodes arrive here without a prior
    `effect_reserve`: their attempt is recorded started and finished in one
    insert (`attempt_no` counted by the worker), and a trivial node costs one
    read, three writes and the message's record.
    """
    run_id, node_id = run["run_id"], payload["node_id"]
    outcome = payload["outcome"]
    nxt = payload.get("next") or {}
    if not (nxt.get("retry") or nxt.get("finish") or nxt.get("fail") or nxt.get("node") is not None
            or nxt.get("continue")):
        raise Rejected("node_finished needs next.node, next.continue, next.finish, next.fail or next.retry")
    # A failed node keeps its output too (a shell's exit code and stderr) for a
    # `$result.outcome` route to inspect.
    keep = outcome == "ok" or payload.get("output") is not None
    output_json, output_sha = put_value(ctx.conn, payload.get("output"), ctx.now) if keep else (None, None)
    status = "succeeded" if outcome == "ok" else "failed"
    error = (payload.get("error") or None) and str(payload["error"])[:4000]
    trace = (payload.get("traceback") or None) and str(payload["traceback"])[:8192]
    attempt_id = payload.get("attempt_id")
    if attempt_id is None or payload.get("new_attempt"):
        attempt_id = attempt_id or new_id("att", ctx.now)
        attempt_no = payload.get("attempt_no")
        if not isinstance(attempt_no, int) or isinstance(attempt_no, bool):
            attempt_no = ctx.conn.execute("SELECT count(*) FROM node_attempt WHERE run_id = ? AND node_id = ?",
                                          (run_id, node_id)).fetchone()[0] + 1
        row = (attempt_id, run_id, node_id, attempt_no, run["steps"], status, outcome, output_json, output_sha,
               payload.get("error_code"), error, trace, claim_generation(ctx, run), ctx.now, ctx.now, ctx.executed_by)
        if isinstance(ctx.conn, BatchConnection):
            ctx.conn.hold_insert("node_attempt", _FINISHED_ATTEMPT, row)  # inserted with the batch's others
        else:
            ctx.conn.execute(_FINISHED_ATTEMPT, row)
    elif ctx.conn.execute(
            """UPDATE node_attempt SET status = ?, outcome = ?, output_json = ?, output_sha256 = ?, error_code = ?,
                   error_message = ?, traceback = ?, finished_at = ?
               WHERE attempt_id = ? AND run_id = ? AND status IN ('running', 'waiting', 'timed_out')""",
            (status, outcome, output_json, output_sha, payload.get("error_code"), error, trace, ctx.now, attempt_id,
             run_id)).rowcount != 1:
        raise Rejected(f"attempt {attempt_id} of run {run_id} is not running")
    if payload.get("request_id") is not None:
        consume_request(ctx, run_id, payload["request_id"])
    if payload.get("wait_id") is not None:
        consume_wait(ctx, run_id, payload["wait_id"])
    effect_id = payload.get("effect_id")
    if effect_id is not None:
        # `effect_applied`: the function returned (it acted) and then its output failed a check; the
        # output, if any, is the effect's only. Without it (older workers too): applied only when ok.
        after_effect = outcome != "ok" and payload.get("effect_applied") is True
        effect_status = "applied" if outcome == "ok" or after_effect else "failed"
        resolution = "confirmed_consumed" if payload.get("confirmed") else None
        # An effect's output is kept as a blob (effects are few, and `resolve` reads it back).
        if not after_effect:
            effect_sha = output_sha if output_json is None else put_json_blob(ctx.conn, payload.get("output"), ctx.now)
        else:
            effect_sha = put_json_blob(ctx.conn, payload["effect_output"], ctx.now) if "effect_output" in payload else None
        ctx.conn.execute(
            """UPDATE effect SET status = ?, output_sha256 = ?, error = ?, settled_at = ?,
                   resolution = coalesce(?, resolution) WHERE effect_id = ? AND run_id = ?""",
            (effect_status, effect_sha, payload.get("error"), ctx.now, resolution, effect_id, run_id))
        append_event(ctx.conn, run_id, "effect_settled", ctx.now, node_id=node_id, attempt_id=attempt_id,
                     payload={"effect_id": effect_id, "status": effect_status})
    # node_finished says it all by its kind; node_failed carries the outcome and the error.
    event_payload = None if outcome == "ok" else {"outcome": outcome, "error": str(payload.get("error") or "")[:1000]}
    append_event(ctx.conn, run_id, "node_finished" if outcome == "ok" else "node_failed", ctx.now,
                 node_id=node_id, attempt_id=attempt_id, payload=event_payload)
    if payload.get("notification") is not None:
        _notify(ctx, run, node_id, payload["notification"], payload.get("notification_audience"))
    ctx.changes.touch("node_attempt", run_id)
    if nxt.get("retry"):
        run["progress"] = ctx.conn.execute("UPDATE run SET progress = progress + 1 WHERE run_id = ? "
                                           "RETURNING progress", (run_id,)).fetchone()[0]
        return {"attempt_id": attempt_id, "directive": _boundary_directive(ctx, run)}
    if nxt.get("finish"):
        set_status(ctx, run_id, "done", "run_finished", node_id=node_id,
                   also="steps = steps + 1, current_node = NULL, progress = progress + 1, output_json = ?, "
                        "output_sha256 = ?",
                   also_params=(output_json, output_sha), run=run)
        release_claim(ctx, run_id)
        return {"attempt_id": attempt_id, "directive": "stop"}
    if nxt.get("fail"):
        fail = nxt["fail"]
        set_status(ctx, run_id, "failed", "run_failed", node_id=node_id, error_code=fail["code"],
                   error_message=str(fail.get("message", ""))[:4000], payload={"error_code": fail["code"]},
                   also="steps = steps + 1, current_node = NULL, progress = progress + 1", run=run)
        release_claim(ctx, run_id)
        return {"attempt_id": attempt_id, "directive": "stop"}
    run["progress"] = ctx.conn.execute(
        "UPDATE run SET steps = steps + 1, current_node = ?, progress = progress + 1 WHERE run_id = ? "
        "RETURNING progress", (nxt.get("node"), run_id)).fetchone()[0]
    ctx.changes.touch("run", run_id)
    return {"attempt_id": attempt_id, "directive": _boundary_directive(ctx, run)}


def _notify(ctx: WriteContext, run: dict[str, Any], node_id: str, message: Any, audience: Any) -> None:
    """The notification in the run's session outbox; with an audience, the channels that route it send
    it too (docs/channels.md, *Notifications*), reading it from this row."""
    audience = audience if isinstance(audience, str) and audience else None
    body = {"node_id": node_id, "message": message, **({"audience": audience} if audience else {})}
    ctx.conn.execute(
        "INSERT INTO session_message (message_id, session_id, run_id, kind, body, created_at, audience) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (new_id("msg", ctx.now), run["session_id"], run["run_id"], "notify", canonical_json(body), ctx.now, audience))
    ctx.changes.touch("session_message", run["run_id"])


@operation("effect_interrupted")
def _effect_interrupted(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """A non-idempotent effect was cut off by its timeout inside the worker (the action's SIGALRM, or
    its shell command's process group killed): it may have happened, so its outcome is unknown.

    The effect becomes `ambiguous` and the run parks `ambiguous_effect` on it, exactly as after a
    worker crash (a cancel requested meanwhile wins: the run ends `cancelled`, the effect stays
    ambiguous for the record); `retries` does not apply. The attempt is kept `interrupted` with the
    timeout as its error (and a command's output so far). Only `effect.resolve` goes on from here.
    """
    run_id, node_id = run["run_id"], payload["node_id"]
    attempt_id, effect_id = payload.get("attempt_id"), payload.get("effect_id")
    error = str(payload.get("error") or "interrupted")[:4000]
    code = str(payload.get("error_code") or "interrupted")
    output_json, output_sha = put_value(ctx.conn, payload["output"], ctx.now) if payload.get("output") is not None \
        else (None, None)
    if ctx.conn.execute(
            """UPDATE node_attempt SET status = 'interrupted', error_code = ?, error_message = ?, output_json = ?,
                   output_sha256 = ?, finished_at = ? WHERE attempt_id = ? AND run_id = ? AND status = 'running'""",
            (code, error, output_json, output_sha, ctx.now, attempt_id, run_id)).rowcount != 1:
        raise Rejected(f"attempt {attempt_id} of run {run_id} is not running")
    if ctx.conn.execute("UPDATE effect SET status = 'ambiguous', error = ? WHERE effect_id = ? AND run_id = ? "
                        "AND status = 'applying'", (error, effect_id, run_id)).rowcount != 1:
        raise Rejected(f"effect {effect_id} of run {run_id} is not applying")
    append_event(ctx.conn, run_id, "node_interrupted", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"error_code": code, "error": error[:1000], "effect_id": effect_id})
    append_event(ctx.conn, run_id, "effect_ambiguous", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"effect_id": effect_id, "reason": code})
    ctx.changes.touch("effect", run_id)
    ctx.changes.touch("node_attempt", run_id)
    if run["cancel_requested"]:
        set_status(ctx, run_id, "cancelled", "run_cancelled", payload={"after": "effect_interrupted"})
    else:
        set_status(ctx, run_id, "parked", "run_parked", park_reason="ambiguous_effect", park_detail=effect_id,
                   payload={"reason": "ambiguous_effect", "effect_id": effect_id})
    release_claim(ctx, run_id)
    return {"directive": "stop"}


@operation("run_failed")
def _run_failed(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The worker ends the run as failed (cannot load the workflow, step limit, …)."""
    code = str(payload.get("code") or "run_failed")
    set_status(ctx, run["run_id"], "failed", "run_failed", error_code=code,
               error_message=str(payload.get("message", ""))[:8192], payload={"error_code": code})
    release_claim(ctx, run["run_id"])
    return {"directive": "stop"}


@operation("register_child", fenced=False)
def _register_child(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> bool:
    children.register(ctx, payload["pid"], payload["create_time"], payload.get("kind", "shell"), run["run_id"],
                      payload.get("machine_id"))
    return True


@operation("release_child", fenced=False)
def _release_child(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> bool:
    children.release(ctx, payload["pid"], payload["create_time"], run["run_id"])
    return True
