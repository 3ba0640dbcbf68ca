"""Run control commands: start, cancel, pause, resume, restart.

Each is recorded for idempotency when the caller gives a client id and an
idempotency key (see `idempotency.py`), and checks `expected_revision`
when given (optimistic concurrency: a stale one is a `conflict`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import Conflict, Rejected
from piwf_actors.ids import derived_id, new_id
from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.blobs import put_blob
from piwf_actors.store.commands.events import deliver_resumed as deliver_resumed_events
from piwf_actors.store.commands.flow_timers import debounce_start
from piwf_actors.store.commands.holds import let_go
from piwf_actors.store.commands.idempotency import Adopted, Recorded, recorded, refusal_in
from piwf_actors.store.commands.mailbox import deliver_resumed, wait_topics_of
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.commands.request_clocks import restart_request_clocks, stop_request_clocks
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import (
    QUEUE_FRESH,
    bump_revision,
    cancel_open_requests,
    claim_row,
    run_row,
    set_status,
)
from piwf_actors.store.values import put_value

#: Run columns a spec may set beyond the basics (schema v14): priority, limits, a child's place.
_PLACEMENT = ("priority", "concurrency_key", "concurrency_max", "parent_node_id", "parent_wait_id", "child_index",
              "fanout_max", "held_by", "rate_key", "rate_max", "rate_per_s")


def insert_run(ctx: WriteContext, spec: dict[str, Any], *, stored_input: tuple[str | None, str | None] | None = None,
               source_sha: str | None = None, graph_sha: str | None = None, queue_class: int = QUEUE_FRESH,
               check_id: bool = True) -> dict[str, Any]:
    """Insert a queued run. `stored_input` is an (inline JSON, blob key) pair already stored (a
    restart reuses its parent's), else the spec's `input` is stored. The definition's graph is the
    blob `graph_sha` already stored, else the spec's `graph` (a document's bytes,
    workflows/graph_data.py), stored once per content. `check_id` False: the caller knows the id is
    new (a child's, derived and checked by the caller)."""
    run_id = spec.get("run_id")
    if run_id is None:
        run_id = new_id("run", ctx.now)  # time-ordered and random: cannot exist already
    elif check_id and ctx.conn.execute("SELECT 1 FROM run WHERE run_id = ?", (run_id,)).fetchone():
        raise Rejected(f"run {run_id} already exists")
    input_json, input_sha = stored_input or put_value(ctx.conn, spec.get("input"), ctx.now)
    source = spec.get("source")
    if source_sha is None and isinstance(source, bytes):
        source_sha = put_blob(ctx.conn, source, ctx.now)
    graph = spec.get("graph")
    if graph_sha is None and isinstance(graph, bytes):
        graph_sha = put_blob(ctx.conn, graph, ctx.now)
    ctx.conn.execute(
        """INSERT INTO run (run_id, workflow, workflow_path, workflow_attr, definition_digest,
               source_sha256, graph_sha256, input_sha256, input_json, project_path, session_id, parent_run_id,
               status, revision, progress, steps, pause_requested, cancel_requested, created_at, updated_at,
               queue_class, queued_at, priority, concurrency_key, concurrency_max, parent_node_id, parent_wait_id,
               child_index, fanout_max, held_by, rate_key, rate_max, rate_per_s)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 1, 0, 0, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                   ?, ?, ?)""",
        (run_id, spec["workflow"], spec.get("workflow_path"), spec.get("workflow_attr"),
         spec.get("definition_digest"), source_sha, graph_sha, input_sha, input_json, spec.get("project_path"),
         spec.get("session_id"), spec.get("parent_run_id"), ctx.now, ctx.now, queue_class, ctx.now,
         int(spec.get("priority") or 0), *(spec.get(key) for key in _PLACEMENT[1:])),
    )
    created: dict[str, Any] = {"workflow": spec["workflow"], "parent_run_id": spec.get("parent_run_id")}
    if spec.get("parent_node_id") is not None:
        created.update(parent_node_id=spec["parent_node_id"], child_index=spec.get("child_index"))
    topics = spec.get("wait_topics")
    if isinstance(topics, list) and all(isinstance(topic, str) for topic in topics):
        created["wait_topics"] = topics  # what message.send checks a topic against (mailbox.wait_topics_of)
    if isinstance(ctx.conn, BatchConnection):
        ctx.conn.prime_seq(run_id, 0)  # inserted just now: it has no event yet (no read of its last seq)
    append_event(ctx.conn, run_id, "run_created", ctx.now, payload=created)
    ctx.changes.touch("run", run_id)
    return {"run_id": run_id, "status": "queued", "revision": 1}


@command("run.start")
def start_run(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Insert a queued run (`args["spec"]`: workflow, input, snapshot…), recorded under the client's
    idempotency key when it gives one. `args.refusal` is the host's refusal of the request before it
    came here (its workflow did not resolve): recorded as the request's outcome, like any other."""

    def apply() -> dict[str, Any]:
        refusal_in(args)
        if args["spec"].get("debounce"):  # collapse into the run held for its key (flow_timers.py)
            return debounce_start(ctx, args["spec"], lambda spec, queue_class: insert_run(
                ctx, spec, queue_class=queue_class))
        return insert_run(ctx, args["spec"])

    return recorded(ctx, args, apply)


def _check_revision(run: dict[str, Any], args: dict[str, Any]) -> None:
    expected = args.get("expected_revision")
    if expected is not None and expected != run["revision"]:
        raise Conflict(f"run {run['run_id']} is at revision {run['revision']}, not {expected}")


def _cancel(ctx: WriteContext, run: dict[str, Any]) -> dict[str, Any]:
    run_id = run["run_id"]
    if run["status"] in TERMINAL_STATUSES:
        raise Rejected(f"run {run_id} is already {run['status']}")
    cancel_open_requests(ctx, run_id)
    if claim_row(ctx.conn, run_id) is not None:
        ctx.conn.execute("UPDATE run SET cancel_requested = 1 WHERE run_id = ?", (run_id,))
        ctx.changes.touch("run_control", run_id)  # the scheduler stops its runner
        append_event(ctx.conn, run_id, "cancel_requested", ctx.now)
        revision = bump_revision(ctx, run_id)
        return {"run_id": run_id, "status": "cancelling", "revision": revision}
    revision = set_status(ctx, run_id, "cancelled", "run_cancelled")
    return {"run_id": run_id, "status": "cancelled", "revision": revision}


@command("run.cancel")
def cancel_run(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Cancel a run. An active one is flagged; its supervisor kills the worker tree
    and the run ends `cancelled` when the runner's exit is settled."""

    def apply() -> dict[str, Any]:
        run = run_row(ctx.conn, args["run_id"])
        _check_revision(run, args)
        return _cancel(ctx, run)

    return recorded(ctx, args, apply)


@command("run.pause")
def pause_run(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Pause a run: a queued one parks at once; an active one parks at its next
    node boundary; a parked one stays parked and will not be resumed until `run.resume`.
    Its open requests' deadlines stop counting until then (request_clocks.py)."""

    def apply() -> dict[str, Any]:
        run = run_row(ctx.conn, args["run_id"])
        _check_revision(run, args)
        run_id = run["run_id"]
        if run["status"] in TERMINAL_STATUSES:
            raise Rejected(f"run {run_id} is already {run['status']}")
        if run["status"] == "parked" and run["park_reason"] == "paused" or run["pause_requested"]:
            raise Rejected(f"run {run_id} is already paused")
        stop_request_clocks(ctx, run_id)
        if run["status"] == "queued":
            revision = set_status(ctx, run_id, "parked", "run_parked", park_reason="paused",
                                  payload={"reason": "paused"})
            return {"run_id": run_id, "status": "parked", "revision": revision}
        ctx.conn.execute("UPDATE run SET pause_requested = 1 WHERE run_id = ?", (run_id,))
        ctx.changes.touch("run_control", run_id)  # the scheduler tells its runner to hold
        append_event(ctx.conn, run_id, "pause_requested", ctx.now)
        revision = bump_revision(ctx, run_id)
        return {"run_id": run_id, "status": "pausing" if run["status"] != "parked" else "parked",
                "revision": revision}

    return recorded(ctx, args, apply)


@command("run.resume")
def resume_run(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Resume a paused run (its open requests' deadlines go on from what was left), or retry one
    parked `no_progress`."""

    def apply() -> dict[str, Any]:
        run = run_row(ctx.conn, args["run_id"])
        _check_revision(run, args)
        run_id = run["run_id"]
        if run["status"] in TERMINAL_STATUSES:
            raise Rejected(f"run {run_id} is already {run['status']}")
        if run["pause_requested"]:
            ctx.conn.execute("UPDATE run SET pause_requested = 0 WHERE run_id = ?", (run_id,))
            restart_request_clocks(ctx, run_id)
            let_go(ctx, "parent_run_id", run_id)  # its children held while it was paused
            append_event(ctx.conn, run_id, "pause_cancelled", ctx.now)
            deliver_resumed(ctx, run_id)  # messages that came meanwhile (may queue a run parked on one)
            deliver_resumed_events(ctx, run_id)  # … and events
            revision = bump_revision(ctx, run_id)
            return {"run_id": run_id, "status": run["status"], "revision": revision}
        if run["status"] == "parked" and run["park_reason"] in ("paused", "no_progress"):
            ctx.conn.execute("UPDATE run SET start_failures = 0 WHERE run_id = ?", (run_id,))
            restart_request_clocks(ctx, run_id)
            let_go(ctx, "parent_run_id", run_id)  # its children held while it was paused
            revision = set_status(ctx, run_id, "queued", "run_resumed", payload={"from": run["park_reason"]})
            deliver_resumed(ctx, run_id)
            return {"run_id": run_id, "status": "queued", "revision": revision}
        if run["status"] == "parked" and run["park_reason"] == "ambiguous_effect":
            raise Rejected(f"run {run_id} waits for effect {run['park_detail']}: use effect.resolve")
        raise Rejected(f"run {run_id} is {run['status']} and not paused")

    return recorded(ctx, args, apply)


def restart_id(run_id: str, revision: int, from_node: str | None = None, code: str | None = None, *,
               at: float) -> str:
    """The id of the one restart of `run_id` at `revision` (from `from_node`, running the code of
    digest `code` when it is not the parent's): a second such restart finds it. A restart after
    the workflow was fixed runs other code, so it is another restart. `at` is the time the parent
    ended (fixed for a terminal run at a revision): it leads the id, which has every run id's shape
    (`ids.derived_id`)."""
    return derived_id("run", canonical_json(["restart", *_restart_key(run_id, revision, from_node, code)]), at)


def _restart_key(run_id: str, revision: int, from_node: str | None, code: str | None) -> list[Any]:
    key: list[Any] = [run_id, revision]
    if from_node is not None or code is not None:
        key += [from_node, code]
    return key


def _legacy_restart_id(run_id: str, revision: int, from_node: str | None, code: str | None) -> str:
    """The id hosts before the one id shape gave the same restart (26 hex characters): a restart made by
    one of them is adopted, never made a second time (DESIGN invariant 9)."""
    digest = hashlib.sha256(canonical_json(_restart_key(run_id, revision, from_node, code)).encode()).hexdigest()
    return f"run_{digest[:26]}"


@command("run.restart")
def restart_run(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Start a new run of a finished run's input, with `parent_run_id` set.

    Only a terminal run (done, failed, cancelled) at the given
    `expected_revision` (required), and never while one of its effects is
    `applying` or `ambiguous` (a restart would apply it again): a person
    resolves those first. One restart per (run, revision, from_node, code):
    the child's id derives from them, so a second restart of the same code,
    under any idempotency key, is `adopted` with the first receipt.

    args.spec (optional): the workflow as the host resolved it again (workflow,
    workflow_path, workflow_attr, definition_digest, source); without it the
    parent's stored snapshot runs. args.from_node (optional): the child starts
    at that node (it must be in args.node_ids, the definition's nodes), with
    the parent's outputs of the nodes that ran before it copied as committed
    attempts (`copied_from` the parent's attempt), so that work, side effects
    included, is not done again.
    """

    def apply() -> dict[str, Any] | Adopted:
        refusal_in(args)  # the host could not read the parent or resolve its workflow again
        run = run_row(ctx.conn, args["run_id"])
        run_id = run["run_id"]
        if args.get("expected_revision") is None:
            raise Rejected(f"run.restart of {run_id} needs the expected revision (the run is at {run['revision']})")
        _check_revision(run, args)
        if run["status"] not in TERMINAL_STATUSES:
            state = run["status"] + (f" ({run['park_reason']})" if run["park_reason"] else "")
            raise Rejected(f"run {run_id} is {state}; only a done, failed or cancelled run can be restarted")
        unsettled = [row[0] for row in ctx.conn.execute(
            "SELECT effect_id FROM effect WHERE run_id = ? AND status IN ('applying', 'ambiguous') "
            "ORDER BY reserved_at", (run_id,))]
        if unsettled:
            raise Rejected(f"run {run_id} has unsettled effect(s) {', '.join(unsettled)}: resolve them first "
                           "(effect.resolve confirm|retry), then restart")
        spec = {key: run[key] for key in ("workflow", "workflow_path", "workflow_attr", "definition_digest",
                                          "project_path", "session_id", "priority", "concurrency_key",
                                          "concurrency_max", "rate_key", "rate_max", "rate_per_s")}
        source_sha = run["source_sha256"]
        # The same code draws as the run did; a run stored before graphs were gets the one the host
        # built from its snapshot (args.graph, when it had to load it anyway).
        graph_sha = run["graph_sha256"]
        if graph_sha is None and isinstance(args.get("graph"), bytes):
            spec["graph"] = args["graph"]
        fresh = args.get("spec")
        if fresh:
            spec.update({key: fresh.get(key) for key in ("workflow", "workflow_path", "workflow_attr",
                                                           "definition_digest")})
            if "concurrency_key" in fresh:  # the new code's limit (built by protocol/catalog/runs.py)
                spec.update(concurrency_key=fresh["concurrency_key"], concurrency_max=fresh["concurrency_max"])
            if "rate_key" in fresh:  # likewise its rate limit (a restart is a start: it spends one)
                spec.update(rate_key=fresh["rate_key"], rate_max=fresh["rate_max"], rate_per_s=fresh["rate_per_s"])
            source_sha = graph_sha = None
            spec["source"] = fresh.get("source")
            spec["graph"] = fresh.get("graph")
            spec["wait_topics"] = fresh.get("wait_topics")
        else:  # the stored snapshot runs again: so do the topics it waits on
            spec["wait_topics"] = wait_topics_of(ctx.conn, run_id)
        from_node = args.get("from_node")
        if from_node is not None:
            nodes = args.get("node_ids") or []
            if args.get("function"):  # a durable function: its nodes are the steps the run recorded
                nodes = [row[0] for row in ctx.conn.execute(
                    "SELECT node_id FROM node_attempt WHERE run_id = ? GROUP BY node_id ORDER BY min(step)",
                    (run_id,))]
            if from_node not in nodes:
                raise Rejected(f"node {from_node!r} is not in workflow {spec['workflow']!r} "
                               f"(its nodes: {', '.join(nodes) or 'none'})")
        changed = spec["definition_digest"] != run["definition_digest"]
        code = spec["definition_digest"] if changed else None
        child_id = restart_id(run_id, run["revision"], from_node, code, at=run["finished_at"] or run["updated_at"])
        receipt: dict[str, Any] = {"run_id": child_id, "status": "queued", "revision": 1, "parent_run_id": run_id,
                                   "digest_changed": changed}
        if from_node is not None:
            receipt["from_node"] = from_node
        for made in (child_id, _legacy_restart_id(run_id, run["revision"], from_node, code)):
            if ctx.conn.execute("SELECT 1 FROM run WHERE run_id = ?", (made,)).fetchone():
                return Adopted({**receipt, "run_id": made})
        spec.update(parent_run_id=run_id, run_id=child_id)
        insert_run(ctx, spec, stored_input=(run["input_json"], run["input_sha256"]), source_sha=source_sha,
                   graph_sha=graph_sha)
        if from_node is not None:
            _copy_before(ctx, run_id, child_id, from_node, function=bool(args.get("function")))
        append_event(ctx.conn, run_id, "run_restarted", ctx.now,
                     payload={"child_run_id": child_id, "from_node": from_node,
                              "digest_changed": receipt["digest_changed"]})
        return receipt

    return recorded(ctx, args, apply)


def _copy_before(ctx: WriteContext, parent_id: str, child_id: str, from_node: str, *, function: bool = False) -> None:
    """Copy into the child the parent's latest succeeded attempt of every node that ran before
    `from_node` (all that ran, if it never did), and start the child at `from_node`. For a durable
    `function` the final failed attempts (a step whose failure the function caught) are copied too,
    failed: its replay meets them as the parent's did (worker/function_engine.py)."""
    first = ctx.conn.execute("SELECT min(step) FROM node_attempt WHERE run_id = ? AND node_id = ?",
                             (parent_id, from_node)).fetchone()[0]
    latest: dict[str, tuple[Any, ...]] = {}
    for row in ctx.conn.execute(
            f"""SELECT attempt_id, node_id, output_sha256, output_json, status, error_code, error_message
               FROM node_attempt WHERE run_id = ? AND status {"IN ('succeeded', 'failed')" if function
                                                              else "= 'succeeded'"}
               AND (CAST(? AS BIGINT) IS NULL OR step < ?) ORDER BY step, started_at""",
            (parent_id, first, first)):
        latest[row[1]] = row
    for index, (attempt_id, node_id, output_sha, output_json, status, code, error) in enumerate(latest.values()):
        copied = new_id("att", ctx.now)
        ctx.conn.execute(
            """INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, outcome, output_sha256,
                   output_json, error_code, error_message, generation, started_at, finished_at, copied_from)
               VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)""",
            (copied, child_id, node_id, index, status, "copied" if status == "succeeded" else "failed", output_sha,
             output_json, code, error, ctx.now, ctx.now, attempt_id))
        append_event(ctx.conn, child_id, "node_copied", ctx.now, node_id=node_id, attempt_id=copied,
                     payload={"from_run_id": parent_id, "from_attempt_id": attempt_id})
    ctx.conn.execute("UPDATE run SET current_node = ?, steps = ? WHERE run_id = ?",
                     (from_node, len(latest), child_id))
