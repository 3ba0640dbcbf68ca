"""Interactive requests: a run waiting for a person or an agent session.

A waiting node asks (`interaction_request`, a worker operation) for a
request; the run parks `waiting` and its worker ends the launch, so no
process is held while someone thinks. Answers arrive as client commands
(`checkpoint.answer`, `decision.answer`, `interaction.submit`) or from the
housekeeper (actors/housekeeping.py) when a deadline passes (`interaction.expire`). Exactly one
submission is accepted per request (the request's status and revision are
checked inside the transaction), and the accepted answer is consumed
exactly once, by the `node_finished` that completes the node.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json, fingerprint, loads
from piwf_actors.errors import Conflict, NotFound, Rejected
from piwf_actors.ids import new_id
from piwf_actors.store.blobs import get_blob, put_json_blob
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command, peer_provenance
from piwf_actors.store.commands.request_clocks import stop_request_clocks
from piwf_actors.store.commands.worker_ops import operation, start_attempt
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import park_waiting, run_row, set_status, wake_waiting
from piwf_actors.workflows.contracts import check_decision, contract_digest, request_id_for

_REQUEST_COLUMNS = ("request_id", "run_id", "node_id", "attempt_id", "kind", "target_session_id", "audience",
                    "contract_sha256", "digest", "revision", "status", "accepted_submission_id", "deadline_at",
                    "default_response", "rejected_count", "created_at", "consumed_at")


def _request(ctx: WriteContext, where: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
    row = ctx.conn.execute(f"SELECT {', '.join(_REQUEST_COLUMNS)} FROM interactive_request WHERE {where}",
                           params).fetchone()
    return None if row is None else dict(zip(_REQUEST_COLUMNS, row, strict=True))


def _contract(ctx: WriteContext, request: dict[str, Any]) -> dict[str, Any]:
    data = get_blob(ctx.conn, request["contract_sha256"])
    return loads(data.decode()) if data else {}


def _submission(ctx: WriteContext, submission_id: str) -> dict[str, Any] | None:
    row = ctx.conn.execute(
        "SELECT submission_id, request_id, outcome, payload, receipt, provenance FROM interactive_submission "
        "WHERE submission_id = ?", (submission_id,)).fetchone()
    if row is None:
        return None
    keys = ("submission_id", "request_id", "outcome", "payload", "receipt", "provenance")
    out = dict(zip(keys, row, strict=True))
    out["payload"] = loads(out["payload"])
    out["receipt"] = loads(out["receipt"])
    out["provenance"] = loads(out["provenance"])
    return out


def _park_waiting(ctx: WriteContext, run: dict[str, Any], request_id: str, attempt_id: str) -> None:
    park_waiting(ctx, run["run_id"], attempt_id, request_id, {"request_id": request_id})


# --- worker operations ---------------------------------------------------------------


@operation("interaction_request")
def _interaction_request(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Find or create the request of a waiting node.

    Returns {status: settled, answer, provenance} when an accepted answer
    waits to be consumed; {status: validating, submission} when an agent's
    submission needs the worker's verdict; otherwise parks the run and
    returns {status: waiting, directive: stop}.
    """
    run_id, node_id = run["run_id"], payload["node_id"]
    if run["cancel_requested"]:
        # Being cancelled: do not park (that would release the claim and lose the
        # cancel); the launch ends and runner.exit settles the run as cancelled.
        return {"status": "waiting", "directive": "stop"}
    existing = _request(ctx, "run_id = ? AND node_id = ? AND consumed_at IS NULL AND status != 'cancelled' "
                             "ORDER BY created_at DESC LIMIT 1", (run_id, node_id))
    if existing is not None:
        # A launch that was interrupted left the attempt `interrupted`; this
        # launch carries it on.
        ctx.conn.execute("UPDATE node_attempt SET status = 'running' WHERE attempt_id = ? "
                         "AND status IN ('waiting', 'interrupted')", (existing["attempt_id"],))
        if existing["status"] == "settled":
            accepted = _submission(ctx, existing["accepted_submission_id"])
            assert accepted is not None
            return {"status": "settled", "request_id": existing["request_id"], "attempt_id": existing["attempt_id"],
                    "answer": accepted["payload"], "provenance": accepted["provenance"]}
        validating = ctx.conn.execute(
            "SELECT submission_id, payload FROM interactive_submission WHERE request_id = ? AND outcome = 'validating' "
            "ORDER BY submitted_at LIMIT 1", (existing["request_id"],)).fetchone()
        if validating is not None:
            return {"status": "validating", "request_id": existing["request_id"],
                    "attempt_id": existing["attempt_id"], "rejected_count": existing["rejected_count"],
                    "submission": {"submission_id": validating[0], "value": loads(validating[1])}}
        _park_waiting(ctx, run, existing["request_id"], existing["attempt_id"])
        return {"status": "waiting", "request_id": existing["request_id"], "directive": "stop"}
    contract = payload["contract"]
    kind = payload["kind"]
    if kind not in ("checkpoint", "decision", "agent"):
        raise Rejected(f"unknown interaction kind {kind!r}")
    attempt_id, _ = start_attempt(ctx, run, node_id, payload.get("attempt_id"))
    digest = contract_digest(contract)
    request_id = request_id_for(run_id, node_id, attempt_id, digest)
    after_s = payload.get("after_s")
    default = payload.get("default_response")
    ctx.conn.execute(
        """INSERT INTO interactive_request (request_id, run_id, node_id, attempt_id, kind, target_session_id,
               audience, contract_sha256, digest, revision, status, deadline_at, default_response, rejected_count,
               created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 'pending', ?, ?, 0, ?, ?)""",
        (request_id, run_id, node_id, attempt_id, kind, run["session_id"], contract.get("audience"),
         put_json_blob(ctx.conn, contract, ctx.now), digest, None if after_s is None else ctx.timer_now + float(after_s),
         None if default is None else canonical_json(default), ctx.now, ctx.now))
    if run["pause_requested"]:
        stop_request_clocks(ctx, run_id)  # paused before it got here: the clock starts when it resumes
    append_event(ctx.conn, run_id, "interaction_requested", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"request_id": request_id, "kind": kind})
    ctx.changes.touch("interactive_request", run_id)
    _park_waiting(ctx, run, request_id, attempt_id)
    return {"status": "waiting", "request_id": request_id, "directive": "stop"}


@operation("submission_verdict")
def _submission_verdict(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The worker validated an agent's submission: accept it (settling the request) or reject it."""
    request = _request(ctx, "request_id = ?", (payload["request_id"],))
    if request is None or request["run_id"] != run["run_id"]:
        raise NotFound("interactive request", str(payload["request_id"]))
    submission_id = payload["submission_id"]
    accepted = bool(payload["accepted"])
    receipt = {"submission_id": submission_id, "outcome": "accepted" if accepted else "rejected"}
    if not accepted:
        receipt["error"] = str(payload.get("error") or "rejected")[:1000]
    changed = ctx.conn.execute(
        "UPDATE interactive_submission SET outcome = ?, receipt = ?, decided_at = ? "
        "WHERE submission_id = ? AND request_id = ? AND outcome = 'validating'",
        (receipt["outcome"], canonical_json(receipt), ctx.now, submission_id, request["request_id"])).rowcount
    if changed != 1:
        raise Rejected(f"submission {submission_id} is not awaiting validation")
    ctx.changes.touch("interactive_submission", run["run_id"])
    if accepted:
        _settle(ctx, request, submission_id)
        return {"status": "settled"}
    count = request["rejected_count"] + 1
    ctx.conn.execute("UPDATE interactive_request SET rejected_count = ?, revision = revision + 1, updated_at = ? "
                     "WHERE request_id = ?", (count, ctx.now, request["request_id"]))
    append_event(ctx.conn, run["run_id"], "submission_rejected", ctx.now, node_id=request["node_id"],
                 payload={"request_id": request["request_id"], "submission_id": submission_id,
                          "error": receipt["error"]})
    ctx.changes.touch("interactive_request", run["run_id"])
    if count >= int(payload.get("max_submissions") or 3):
        return {"status": "exhausted", "rejected_count": count}
    if run["cancel_requested"]:
        return {"status": "waiting", "rejected_count": count, "directive": "stop"}
    _park_waiting(ctx, run, request["request_id"], request["attempt_id"])
    return {"status": "waiting", "rejected_count": count, "directive": "stop"}


def consume_request(ctx: WriteContext, run_id: str, request_id: str) -> None:
    """Mark an accepted answer consumed; refused if it already was (the node never completes twice)."""
    changed = ctx.conn.execute(
        "UPDATE interactive_request SET consumed_at = ?, updated_at = ? WHERE request_id = ? AND run_id = ? "
        "AND status = 'settled' AND consumed_at IS NULL", (ctx.now, ctx.now, request_id, run_id)).rowcount
    if changed != 1:
        raise Rejected(f"request {request_id} has no unconsumed answer")
    ctx.changes.touch("interactive_request", run_id)


# --- settling --------------------------------------------------------------------------


def _settle(ctx: WriteContext, request: dict[str, Any], submission_id: str) -> int:
    changed = ctx.conn.execute(
        """UPDATE interactive_request SET status = 'settled', accepted_submission_id = ?, revision = revision + 1,
               updated_at = ?, settled_at = ? WHERE request_id = ? AND revision = ? AND status IN ('pending', 'presenting')""",
        (submission_id, ctx.now, ctx.now, request["request_id"], request["revision"])).rowcount
    if changed != 1:
        raise Conflict(f"request {request['request_id']} was answered already")
    # Who answered travels with the event (`piwf events` shows it): the accepted submission's provenance.
    provenance = ctx.conn.execute("SELECT provenance FROM interactive_submission WHERE submission_id = ?",
                                  (submission_id,)).fetchone()
    append_event(ctx.conn, request["run_id"], "interaction_settled", ctx.now, node_id=request["node_id"],
                 payload={"request_id": request["request_id"], "submission_id": submission_id,
                          "answered_by": loads(provenance[0]) if provenance and provenance[0] else None})
    ctx.changes.touch("interactive_request", request["run_id"])
    return int(request["revision"]) + 1


def _wake_run(ctx: WriteContext, run_id: str, reason: str) -> None:
    wake_waiting(ctx, run_id, reason)


def _open_request(ctx: WriteContext, request_id: str, kind: str) -> dict[str, Any]:
    request = _request(ctx, "request_id = ?", (request_id,))
    if request is None:
        raise NotFound("interactive request", request_id)
    if request["kind"] != kind:
        raise Rejected(f"request {request_id} is a {request['kind']}, not a {kind}")
    if request["status"] == "cancelled":
        raise Rejected(f"request {request_id} was cancelled")
    if request["status"] == "settled":
        raise Conflict(f"request {request_id} was answered already")
    run = run_row(ctx.conn, request["run_id"])
    if run["pause_requested"] or run["park_reason"] == "paused":
        raise Rejected(f"run {run['run_id']} is paused; resume it before answering")
    return request


def _insert_submission(ctx: WriteContext, request: dict[str, Any], args: dict[str, Any], payload: Any,
                       outcome: str, provenance: dict[str, Any]) -> str:
    key = args.get("idempotency_key") or args.get("submission_id") or new_id("sub", ctx.now)
    payload_hash = fingerprint(payload)
    seen = ctx.conn.execute("SELECT submission_id, payload_hash FROM interactive_submission "
                            "WHERE request_id = ? AND idempotency_key = ?", (request["request_id"], key)).fetchone()
    if seen is not None:
        raise Conflict(f"idempotency key {key} was already used on request {request['request_id']}")
    submission_id = args.get("submission_id") or new_id("sub", ctx.now)
    if ctx.conn.execute("SELECT 1 FROM interactive_submission WHERE submission_id = ?", (submission_id,)).fetchone():
        raise Conflict(f"submission id {submission_id} was already used")
    ctx.conn.execute(
        """INSERT INTO interactive_submission (submission_id, request_id, idempotency_key, payload_hash, payload,
               outcome, provenance, submitted_at, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (submission_id, request["request_id"], key, payload_hash, canonical_json(payload), outcome,
         canonical_json(provenance), ctx.now, ctx.now if outcome != "validating" else None))
    ctx.changes.touch("interactive_submission", request["run_id"])
    return submission_id


def _who(args: dict[str, Any], kind: str) -> dict[str, Any]:
    """An answer's provenance: the client id and session the request named, and the process that sent
    it as the host saw it (`peer`: pid and uid from the socket's peer credentials, or the embedding
    process, or the HTTP door's token name) — kept with the submission, shown by `run.get` (docs/security.md)."""
    provenance: dict[str, Any] = {"kind": kind, "client_id": args.get("client_id"), "session_id": args.get("session_id")}
    provenance.update(peer_provenance(args.get("peer")))
    return provenance


def _human(args: dict[str, Any]) -> dict[str, Any]:
    return _who(args, "human")


# --- client commands ---------------------------------------------------------------------


@command("checkpoint.answer")
def checkpoint_answer(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Answer a checkpoint with any JSON input; it becomes the checkpoint's output."""
    return recorded(ctx, args, lambda: answer_checkpoint(ctx, args, _human(args), "checkpoint.answer"))


def answer_checkpoint(ctx: WriteContext, args: dict[str, Any], provenance: dict[str, Any], via: str) -> dict[str, Any]:
    """Accept `args.input` for the checkpoint `args.request_id` at `args.expected_revision` (if
    given), recording `provenance`; wakes the run. Raises the refusal otherwise (a channel's
    answer comes through here too, `store/commands/channel_answers.py`)."""
    request = _open_request(ctx, args["request_id"], "checkpoint")
    expected = args.get("expected_revision")
    if expected is not None and expected != request["revision"]:
        raise Conflict(f"request {request['request_id']} is at revision {request['revision']}, not {expected}")
    submission_id = _insert_submission(ctx, request, args, args.get("input"), "accepted", provenance)
    revision = _settle(ctx, request, submission_id)
    _wake_run(ctx, request["run_id"], via)
    return {"request_id": request["request_id"], "submission_id": submission_id, "run_id": request["run_id"],
            "revision": revision}


@command("decision.answer")
def decision_answer(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Answer a human decision. Checked exactly against its contract; the first valid
    answer wins, a later one (or one with a stale expected revision) is a conflict."""
    # The last "decision.answer" is `via`, what woke the run (a channel's answer passes its own),
    # not the record's name: that is this command's, from the registry.
    return recorded(ctx, args, lambda: answer_decision(ctx, args, _human(args), "decision.answer"))


def answer_decision(ctx: WriteContext, args: dict[str, Any], provenance: dict[str, Any], via: str) -> dict[str, Any]:
    """Accept `args.response` for the decision `args.request_id` at `args.expected_revision`
    (if given), recording `provenance`; wakes the run. Raises the refusal otherwise."""
    request = _open_request(ctx, args["request_id"], "decision")
    expected = args.get("expected_revision")
    if expected is not None and expected != request["revision"]:
        raise Conflict(f"request {request['request_id']} is at revision {request['revision']}, not {expected}")
    problem = check_decision(_contract(ctx, request), args.get("response"))
    if problem is not None:
        raise Rejected(problem)
    submission_id = _insert_submission(ctx, request, args, args["response"], "accepted", provenance)
    revision = _settle(ctx, request, submission_id)
    _wake_run(ctx, request["run_id"], via)
    return {"request_id": request["request_id"], "submission_id": submission_id, "run_id": request["run_id"],
            "choice": args["response"]["choice"], "revision": revision}


@command("interaction.submit")
def interaction_submit(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """An agent session submits structured output; the run's worker decides on it.

    The submission starts `validating` and the run is queued to validate it;
    the caller learns the verdict when the submission is decided.
    """

    def apply() -> dict[str, Any]:
        request = _open_request(ctx, args["request_id"], "agent")
        target = request["target_session_id"]
        if target is not None and args.get("session_id") != target:
            raise Rejected(f"request {request['request_id']} is addressed to another session")
        busy = ctx.conn.execute("SELECT submission_id FROM interactive_submission WHERE request_id = ? "
                                "AND outcome = 'validating'", (request["request_id"],)).fetchone()
        if busy is not None:
            raise Conflict(f"submission {busy[0]} is still being validated")
        submission_id = _insert_submission(ctx, request, args, args.get("value"), "validating", _who(args, "agent"))
        _wake_run(ctx, request["run_id"], "interaction.submit")
        return {"request_id": request["request_id"], "submission_id": submission_id, "run_id": request["run_id"],
                "outcome": "validating"}

    return recorded(ctx, args, apply)


@command("interaction.ack")
def interaction_ack(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Acknowledge a session message: it leaves the pending list."""

    def apply() -> dict[str, Any]:
        row = ctx.conn.execute("SELECT run_id, acked_at FROM session_message WHERE message_id = ?",
                               (args["message_id"],)).fetchone()
        if row is None:
            raise NotFound("message", str(args["message_id"]))
        if row[1] is None:
            ctx.conn.execute("UPDATE session_message SET acked_at = ? WHERE message_id = ?",
                             (ctx.now, args["message_id"]))
            ctx.changes.touch("session_message", row[0])
        return {"message_id": args["message_id"], "acked": True}

    return recorded(ctx, args, apply)


@command("interaction.expire")
def interaction_expire(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Apply every passed deadline (the housekeeper sends this; also right after a
    host start, so a deadline that passed while no host ran is applied then).

    A decision takes its default response with `timeout` provenance; an agent
    step counts a missing submission and fails the run `missing_submission`
    at the limit; a checkpoint fails the run `checkpoint_timeout`.
    """
    expired: dict[str, str] = {}
    rows = ctx.conn.execute(
        "SELECT request_id FROM interactive_request r WHERE status IN ('pending', 'presenting') "
        "AND deadline_at IS NOT NULL AND deadline_at <= ? AND NOT EXISTS (SELECT 1 FROM interactive_submission s "
        "WHERE s.request_id = r.request_id AND s.outcome = 'validating') ORDER BY deadline_at LIMIT 100",
        (ctx.timer_now,)).fetchall()  # deadlines are timer time (piwf_actors/clock.py)
    for (request_id,) in rows:
        request = _request(ctx, "request_id = ?", (request_id,))
        assert request is not None
        run = run_row(ctx.conn, request["run_id"])
        if run["status"] in ("done", "failed", "cancelled"):
            ctx.conn.execute("UPDATE interactive_request SET status = 'cancelled', revision = revision + 1, "
                             "updated_at = ? WHERE request_id = ?", (ctx.now, request_id))
            continue
        busy = ctx.conn.execute("SELECT 1 FROM interactive_submission WHERE request_id = ? "
                                "AND outcome = 'validating'", (request_id,)).fetchone()
        if busy:
            continue  # a submission arrived in time; its verdict decides
        contract = _contract(ctx, request)
        if request["kind"] == "decision" and request["default_response"] is not None:
            default = loads(request["default_response"])
            submission_id = _insert_submission(ctx, request, {"idempotency_key": f"timeout:{request_id}"}, default,
                                               "accepted", {"kind": "timeout", "deadline_at": request["deadline_at"]})
            _settle(ctx, request, submission_id)
            _wake_run(ctx, request["run_id"], "timeout")
            expired[request_id] = "default_applied"
        elif request["kind"] == "agent":
            count = request["rejected_count"] + 1
            limit = int(contract.get("max_submissions") or 3)
            after_s = float(contract.get("timeout_s") or 0)
            append_event(ctx.conn, run["run_id"], "submission_missing", ctx.now, node_id=request["node_id"],
                         payload={"request_id": request_id, "missing": count})
            if count >= limit or after_s <= 0:
                _fail_waiting(ctx, request, run, "missing_submission",
                              f"no acceptable submission for {request['node_id']!r} after {count} attempt(s)")
                expired[request_id] = "failed"
            else:
                ctx.conn.execute("UPDATE interactive_request SET rejected_count = ?, deadline_at = ?, "
                                 "revision = revision + 1, updated_at = ? WHERE request_id = ?",
                                 (count, ctx.timer_now + after_s, ctx.now, request_id))
                expired[request_id] = "extended"
        else:
            _fail_waiting(ctx, request, run, f"{request['kind']}_timeout",
                          f"{request['kind']} {request['node_id']!r} was not answered in time")
            expired[request_id] = "failed"
        ctx.changes.touch("interactive_request", request["run_id"])
    return {"expired": expired}


def _fail_waiting(ctx: WriteContext, request: dict[str, Any], run: dict[str, Any], code: str, message: str) -> None:
    ctx.conn.execute("UPDATE interactive_request SET status = 'cancelled', revision = revision + 1, updated_at = ? "
                     "WHERE request_id = ?", (ctx.now, request["request_id"]))
    ctx.conn.execute("UPDATE node_attempt SET status = 'failed', error_code = ?, error_message = ?, finished_at = ? "
                     "WHERE attempt_id = ? AND status IN ('running', 'waiting')",
                     (code, message, ctx.now, request["attempt_id"]))
    if run["status"] in ("parked", "queued"):
        set_status(ctx, run["run_id"], "failed", "run_failed", error_code=code, error_message=message,
                   node_id=request["node_id"], payload={"error_code": code})
