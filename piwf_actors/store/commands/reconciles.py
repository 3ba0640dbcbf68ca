"""The scheduler's and the reconcile worker's commands: claim a due resource, renew the claims,
apply what a reconcile's worker asks for (`reconcile.message`), settle a reconcile whose worker
ended without a result (`reconcile.exit`).

A reconcile's claim fences everything its worker writes, like a run's: a random token (only its
sha256 is stored), a claim generation that grows with every claim of the resource, the runner
epoch of the launch, the host epoch, and an expiry (120 s, renewed every 30 s). Every operation
of `reconcile.message` can be sent twice (the worker resends after `unavailable`) and gives the
same answer the second time, so no message record is kept.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import ClaimLost, Rejected
from piwf_actors.ids import new_id
from piwf_actors.resources.policy import BadResult, check_finalizers, merge_status, owned_run_id, settle
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.commands.runs import insert_run
from piwf_actors.store.resource_state import (
    append_resource_event,
    make_applying_ambiguous,
    release_resource_claim,
    require_resource,
    resource_row,
)
from piwf_actors.store.values import get_value
from piwf_actors.workflows.graph_data import GraphDataError, document_from_bytes, graph_of


def reconcile_id(manager: str, key: str) -> str:
    """How the scheduler and the runner supervisor name a reconcile's launch (beside run ids)."""
    return f"reconcile:{manager}/{key}"


_DUE = """SELECT manager, resource_key FROM resource
          WHERE available_at <= ? AND (claim_expires_at IS NULL OR claim_expires_at <= ?)
          ORDER BY available_at LIMIT ?"""


@command("reconcile.claim")
def claim_reconcile(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any] | None:
    """Claim the resource due the longest (args: token_hash, launch_id, claim_lease_s, exclude: launch
    ids this host runs now). A claim that expired is taken over: its reconcile is gone, its `applying`
    effects become `ambiguous` and it counts as an error. Returns the launch, or None."""
    exclude = set(args.get("exclude") or ())
    for manager, key in ctx.conn.execute(_DUE, (ctx.now, ctx.now, len(exclude) + 1)).fetchall():
        if reconcile_id(manager, key) not in exclude:
            return _claim(ctx, require_resource(ctx.conn, manager, key), args)
    return None


def _claim(ctx: WriteContext, row: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    manager, key, uid = row["manager"], row["resource_key"], row["uid"]
    errors = row["consecutive_errors"]
    if row["claim_token_hash"] is not None:
        ambiguous = make_applying_ambiguous(ctx, row)
        errors += 1
        append_resource_event(ctx, manager, key, uid, "reconcile_finished", {
            "result": "error", "error": "the reconcile's claim expired (its worker is gone)",
            "generation": row["generation"], "ambiguous_effects": ambiguous})
    generation = row["claim_generation"] + 1
    ctx.conn.execute(
        """UPDATE resource SET claim_token_hash = ?, claim_generation = ?, claim_queue_version = queue_version,
               claim_launch_id = ?, claim_host_epoch = ?, claimed_at = ?, claim_expires_at = ?,
               consecutive_errors = ?
           WHERE manager = ? AND resource_key = ?""",
        (args["token_hash"], generation, args["launch_id"], ctx.host_epoch, ctx.now,
         ctx.now + float(args["claim_lease_s"]), errors, manager, key))
    append_resource_event(ctx, manager, key, uid, "reconcile_started",
                          {"generation": row["generation"], "claim_generation": generation})
    ctx.changes.touch("resource")
    return {
        "reconcile_id": reconcile_id(manager, key), "manager": manager, "key": key, "uid": uid,
        "claim_generation": generation, "launch_id": args["launch_id"], "token_hash": args["token_hash"],
        "project_path": row["project_path"], "manager_path": row["manager_path"],
        "resource": {"spec": loads(row["spec_json"]), "status": loads(row["status_json"]),
                     "finalizers": loads(row["finalizers_json"]), "generation": row["generation"],
                     "resource_version": row["resource_version"],
                     "deleting": row["deletion_requested_at"] is not None, "consecutive_errors": errors},
    }


@command("reconcile.renew")
def renew_reconciles(ctx: WriteContext, args: dict[str, Any]) -> dict[str, bool]:
    """Extend the listed claims ({manager, key, claim_generation, token_hash}); maps launch id → still held."""
    held: dict[str, bool] = {}
    for item in args["claims"]:
        changed = ctx.conn.execute(
            """UPDATE resource SET claim_expires_at = ? WHERE manager = ? AND resource_key = ?
                   AND claim_generation = ? AND claim_token_hash = ? AND claim_host_epoch = ? AND claim_expires_at > ?""",
            (ctx.now + float(args["claim_lease_s"]), item["manager"], item["key"], item["claim_generation"],
             item["token_hash"], ctx.host_epoch, ctx.now)).rowcount
        held[reconcile_id(item["manager"], item["key"])] = changed == 1
    return held


def _claimed(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The resource, if the claim in `args` is still the current one; else ClaimLost."""
    name = reconcile_id(args["manager"], args["key"])
    row = resource_row(ctx.conn, args["manager"], args["key"])
    if row is None or row["claim_token_hash"] is None:
        raise ClaimLost(name, "the resource is not claimed")
    if row["claim_generation"] != args["claim_generation"] or row["claim_token_hash"] != args["token_hash"]:
        raise ClaimLost(name, f"claim generation {args['claim_generation']} is not the current claim")
    if row["claim_launch_id"] != args["launch_id"]:
        raise ClaimLost(name, "launch id is stale")
    if row["claim_host_epoch"] != ctx.host_epoch:
        raise ClaimLost(name, "claim belongs to an earlier host epoch")
    if row["claim_expires_at"] <= ctx.now:
        raise ClaimLost(name, "claim lease expired")
    return row


@command("reconcile.message")
def reconcile_message(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """One request of a reconcile's worker, under its claim: ready, effect_reserve, effect_settle,
    workflow_ensure or finish. Answers {outcome, value} (and `released` once `finish` ended the claim)."""
    row = _claimed(ctx, args)
    payload = args.get("payload") or {}
    op = _OPERATIONS.get(args["op"])
    if op is None:
        raise Rejected(f"unknown reconcile operation {args['op']!r}")
    value = op(ctx, row, payload)
    answer: dict[str, Any] = {"outcome": "accepted", "value": value}
    if args["op"] == "finish":
        answer["released"] = True
    return answer


def _ready(_ctx: WriteContext, _row: dict[str, Any], _payload: dict[str, Any]) -> dict[str, Any]:
    return {}


def _effect_reserve(ctx: WriteContext, row: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Reserve effect `key` before its function runs: `reserved` (run it), `applied` (it ran: here is
    its result), or `ambiguous` (it may have run; a person must resolve it)."""
    effect_key = payload["key"]
    if not isinstance(effect_key, str) or not effect_key or len(effect_key) > 512:
        raise Rejected("an effect key must be 1 to 512 characters")
    manager, key, uid = row["manager"], row["resource_key"], row["uid"]
    found = ctx.conn.execute("SELECT effect_id, status, result_json, claim_generation FROM resource_effect "
                             "WHERE uid = ? AND effect_key = ?", (uid, effect_key)).fetchone()
    if found is not None:
        effect_id, status, result_json, claimed_by = found
        if status == "applied":
            return {"state": "applied", "effect_id": effect_id, "result": loads(result_json)}
        if status == "applying" and claimed_by == row["claim_generation"]:
            return {"state": "reserved", "effect_id": effect_id}  # this reconcile's own reservation, asked again
        if status in ("applying", "ambiguous"):
            return {"state": "ambiguous", "effect_id": effect_id}
        # failed (its function raised, or a person chose retry): this reconcile runs it again
        ctx.conn.execute(
            """UPDATE resource_effect SET status = 'applying', attempts = attempts + 1, error = NULL, resolution = NULL,
                   claim_generation = ?, generation = ?, reserved_at = ?, settled_at = NULL WHERE effect_id = ?""",
            (row["claim_generation"], row["generation"], ctx.now, effect_id))
    else:
        effect_id = new_id("reff", ctx.now)
        ctx.conn.execute(
            """INSERT INTO resource_effect (effect_id, uid, manager, resource_key, effect_key, status, attempts,
                   generation, claim_generation, reserved_at) VALUES (?, ?, ?, ?, ?, 'applying', 1, ?, ?, ?)""",
            (effect_id, uid, manager, key, effect_key, row["generation"], row["claim_generation"], ctx.now))
    append_resource_event(ctx, manager, key, uid, "effect_applying", {"effect_id": effect_id, "effect_key": effect_key})
    ctx.changes.touch("resource_effect")
    return {"state": "reserved", "effect_id": effect_id}


def _effect_settle(ctx: WriteContext, row: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The effect's function returned (`ok`, with its result), raised (`error`: failed, the next
    reconcile runs it again) or was cut off by the reconcile's timeout (`interrupted`: it may have
    happened, so it becomes `ambiguous` and waits for a person, as after a crash)."""
    effect_id, ok = payload["effect_id"], bool(payload.get("ok"))
    status = "applied" if ok else "ambiguous" if payload.get("interrupted") else "failed"
    found = ctx.conn.execute("SELECT status, claim_generation, effect_key FROM resource_effect "
                             "WHERE effect_id = ? AND uid = ?", (effect_id, row["uid"])).fetchone()
    if found is None:
        raise Rejected(f"effect {effect_id} is not an effect of {row['manager']}/{row['resource_key']}")
    current, claimed_by, effect_key = found
    if claimed_by != row["claim_generation"]:
        raise Rejected(f"effect {effect_id} was reserved by another reconcile")
    if current == status:
        return {"status": status}  # settled already: the same message sent again
    if current != "applying":
        raise Rejected(f"effect {effect_id} is {current}, not applying")
    ctx.conn.execute("UPDATE resource_effect SET status = ?, result_json = ?, error = ?, settled_at = ? "
                     "WHERE effect_id = ?", (status, canonical_json(payload.get("result")) if ok else None,
                                             None if ok else str(payload.get("error") or "")[:2000], ctx.now, effect_id))
    event = {"effect_id": effect_id, "effect_key": effect_key}
    if not ok:
        event["error"] = str(payload.get("error") or "")[:500]
    append_resource_event(ctx, row["manager"], row["resource_key"], row["uid"], f"effect_{status}", event)
    ctx.changes.touch("resource_effect")
    return {"status": status}


def _workflow_ensure(ctx: WriteContext, row: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The run this resource owns under `key` ({run_id, status, output, error}), started if it does not
    exist yet. The worker resolved the workflow (it loads the project's files; the writer never does)
    and sends its spec: name, file, attribute, digest and source snapshot."""
    manager, key, uid = row["manager"], row["resource_key"], row["uid"]
    ensure_key = payload["key"]
    if not isinstance(ensure_key, str) or not ensure_key or len(ensure_key) > 512:
        raise Rejected("an ensure key must be 1 to 512 characters")
    run_id = owned_run_id(manager, key, ensure_key)
    found = ctx.conn.execute("SELECT status, output_json, output_sha256, error_code, error_message FROM run "
                             "WHERE run_id = ?", (run_id,)).fetchone()
    if found is None and payload.get("spec") is None:
        return {"run_id": run_id, "missing": True}  # the worker loads the workflow and asks again with its spec
    ctx.conn.execute(
        """INSERT INTO resource_run (run_id, manager, resource_key, uid, ensure_key, created_at)
           VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (run_id) DO UPDATE SET uid = excluded.uid""",
        (run_id, manager, key, uid, ensure_key, ctx.now))
    if found is not None:
        status, output_json, output_sha, error_code, error_message = found
        output = get_value(ctx.conn, output_json, output_sha)
        error = None if error_code is None else {"code": error_code, "message": error_message}
        return {"run_id": run_id, "status": status, "output": output, "error": error, "created": False}
    spec = dict(payload["spec"])
    if spec.get("graph") is not None:  # the definition's graph, built by the worker that loaded it
        try:
            graph_of(document_from_bytes(spec["graph"]) if isinstance(spec["graph"], bytes) else None)
        except GraphDataError as exc:
            raise Rejected(f"workflow_ensure: the spec's graph is not a graph document: {exc}") from None
    spec.update(run_id=run_id, input=payload.get("input"), project_path=row["project_path"], session_id=None,
                parent_run_id=None)
    insert_run(ctx, spec)
    append_resource_event(ctx, manager, key, uid, "run_ensured",
                          {"run_id": run_id, "ensure_key": ensure_key, "workflow": spec["workflow"]})
    return {"run_id": run_id, "status": "queued", "output": None, "error": None, "created": True}


def _finish(ctx: WriteContext, row: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The reconcile's result: merge its status patch (observed_generation = the generation it saw),
    replace the finalizers when given, then settle (`policy.settle`): queue it again, or delete it."""
    result = payload.get("result")
    if result not in ("done", "requeue_after", "error"):
        raise Rejected(f"unknown reconcile result {result!r}")
    seen = payload.get("generation")
    if not isinstance(seen, int) or isinstance(seen, bool) or not 0 < seen <= row["generation"]:
        raise Rejected(f"generation {seen!r} is not one this resource had")
    try:
        finalizers = loads(row["finalizers_json"]) if payload.get("finalizers") is None else \
            check_finalizers(payload["finalizers"])
    except BadResult as exc:
        raise Rejected(str(exc)) from None
    status = merge_status(loads(row["status_json"]), payload.get("status_patch") or {})
    changed = canonical_json(status) != row["status_json"] or canonical_json(finalizers) != row["finalizers_json"]
    manager, key, uid = row["manager"], row["resource_key"], row["uid"]
    event: dict[str, Any] = {"result": result, "generation": seen, "duration_ms": payload.get("duration_ms"),
                             "manager_digest": payload.get("manager_digest")}
    if payload.get("error"):
        event["error"] = str(payload["error"])[:2000]
    plan = settle(result, now=ctx.now, consecutive_errors=row["consecutive_errors"], after_s=payload.get("after_s"),
                  deleting=row["deletion_requested_at"] is not None, finalizers=finalizers,
                  enqueued_meanwhile=row["queue_version"] != row["claim_queue_version"],
                  pending_at=row["available_at"])
    if result != "done" and plan.available_at is not None:
        event["requeue_after_s"] = round(plan.available_at - ctx.now, 3)
    append_resource_event(ctx, manager, key, uid, "reconcile_finished", event)
    if plan.delete:
        append_resource_event(ctx, manager, key, uid, "resource_deleted", {"generation": row["generation"]})
        for table in ("resource_effect", "resource_run"):
            ctx.conn.execute(f"DELETE FROM {table} WHERE uid = ?", (uid,))
        ctx.conn.execute("DELETE FROM resource WHERE manager = ? AND resource_key = ?", (manager, key))
        ctx.changes.touch("resource")
        return {"deleted": True}
    ctx.conn.execute(
        """UPDATE resource SET status_json = ?, finalizers_json = ?, observed_generation = ?,
               resource_version = resource_version + ?, updated_at = CASE WHEN ? = 1 THEN ? ELSE updated_at END,
               available_at = ?, consecutive_errors = ?, last_result = ?, last_error = ?, reconciled_at = ?
           WHERE manager = ? AND resource_key = ?""",
        (canonical_json(status), canonical_json(finalizers), seen, int(changed), int(changed), ctx.now,
         plan.available_at, plan.consecutive_errors, result, event.get("error"), ctx.now, manager, key))
    release_resource_claim(ctx, manager, key)
    return {"deleted": False, "available_at": plan.available_at}


_OPERATIONS = {"ready": _ready, "effect_reserve": _effect_reserve, "effect_settle": _effect_settle,
               "workflow_ensure": _workflow_ensure, "finish": _finish}


@command("reconcile.exit")
def reconcile_exit(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The supervisor reports that a reconcile's worker ended without a result (crashed, killed by the
    watchdog, claim lost, host stopping). While the claim is still this launch's: its `applying`
    effects become `ambiguous` and the reconcile counts as an error (back-off); a host that stops
    cleanly (`requeue`) puts the resource back at once instead."""
    try:
        row = _claimed(ctx, {**args, "launch_id": args["launch_id"]})
    except ClaimLost:
        return {"status": None, "settled": False, "children": []}
    manager, key, uid = row["manager"], row["resource_key"], row["uid"]
    ambiguous = make_applying_ambiguous(ctx, row)
    error = f"the reconcile's worker ended without a result ({args.get('outcome')}"
    error += f": {args['diagnostic']})" if args.get("diagnostic") else ")"
    if args.get("requeue"):
        append_resource_event(ctx, manager, key, uid, "reconcile_interrupted",
                              {"reason": "host stopping", "ambiguous_effects": ambiguous})
        available_at, errors = ctx.now, row["consecutive_errors"]
    else:
        plan = settle("error", now=ctx.now, consecutive_errors=row["consecutive_errors"],
                      enqueued_meanwhile=row["queue_version"] != row["claim_queue_version"],
                      pending_at=row["available_at"])
        assert plan.available_at is not None  # an error is always due again, after its back-off
        available_at, errors = plan.available_at, plan.consecutive_errors
        append_resource_event(ctx, manager, key, uid, "reconcile_finished", {
            "result": "error", "generation": row["generation"], "error": error[:2000],
            "duration_ms": round((ctx.now - row["claimed_at"]) * 1000), "ambiguous_effects": ambiguous,
            "requeue_after_s": round(available_at - ctx.now, 3)})
    ctx.conn.execute(
        """UPDATE resource SET available_at = ?, consecutive_errors = ?, last_result = ?, last_error = ?,
               reconciled_at = ? WHERE manager = ? AND resource_key = ?""",
        (available_at, errors, "error" if not args.get("requeue") else row["last_result"],
         error[:2000] if not args.get("requeue") else row["last_error"], ctx.now, manager, key))
    release_resource_claim(ctx, manager, key)
    return {"status": "error", "settled": True, "children": []}
