"""`state.prune`: delete old terminal runs with everything that belongs to them; `state.backup`: the
record of a backup the host made.

The plan is computed inside the writer's transaction with the same
`plan_prune` (`store/prune_plan.py`) the read side uses, so the runs
deleted are exactly the runs that are terminal at commit time; the run rows
are deleted with the status condition repeated, and a mismatch undoes the
command.

The engine hands back the pages the deletes freed (`Engine.reclaim_pages`).
On SQLite that is `PRAGMA incremental_vacuum` in the same transaction (SQLite allows it inside a
transaction and a savepoint; the file itself shrinks when the WAL is next
checkpointed), so no separate vacuum command is needed. On PostgreSQL the
dead rows are reclaimed by autovacuum after the commit (VACUUM cannot run
inside a transaction), and the receipt says 0 pages handed back.
"""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.errors import Conflict, Rejected
from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.store.commands.events import prune_events
from piwf_actors.store.commands.idempotency import Recorded, recorded, refusal_in
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.engines.base import engine_of
from piwf_actors.store.prune_plan import PrunePlan, check_prune_args, plan_prune

DEFAULT_MAX_RUNS = 10_000
#: How many pruned run ids a receipt lists (the counts are always complete).
RECEIPT_RUN_IDS = 100


# Rows keyed by run_id that go with their run. Unreleased child_process rows
# are kept on purpose: they are the host's record of a process that may
# still be alive and must be reaped; the reaper releases them, and a later
# prune removes them. Idempotency records (host_command) are kept too: a
# client that replays a request after its run was pruned must get the first
# receipt back (`adopted`), not a second run; they go on their own retention.
#: Tables whose rows belong to one run and go with it. A schedule's fire record goes too: the
#: schedule's cursor (`schedule.next_fire_at`, only ever moving forward) is what keeps a clock fire
#: from happening twice, not the record; an `every_s=1` schedule would otherwise add 86,400 rows a day.
_RUN_TABLES = ("run_event", "node_attempt", "effect", "run_claim", "run_worker",
               "worker_message", "session_message", "schedule_fire", "run_wait", "run_message")


def _delete_runs(ctx: WriteContext, run_ids: list[str], before: float) -> None:
    _DOOMED = engine_of(ctx.conn).json_values
    doomed = json.dumps(run_ids)
    terminal = ",".join("?" * len(TERMINAL_STATUSES))
    deleted = ctx.conn.execute(
        f"DELETE FROM run WHERE run_id IN {_DOOMED} AND status IN ({terminal}) AND finished_at < ?",
        (doomed, *TERMINAL_STATUSES, before)).rowcount
    if deleted != len(run_ids):
        # Cannot happen while the plan is computed in this transaction; refuse rather than half-prune.
        raise Conflict(f"prune selected {len(run_ids)} runs but only {deleted} are still terminal")
    ctx.conn.execute(
        f"""DELETE FROM interactive_submission WHERE request_id IN
                (SELECT request_id FROM interactive_request WHERE run_id IN {_DOOMED})""", (doomed,))
    # A channel's record of the messages it sent about them goes too (the requests are gone).
    ctx.conn.execute(
        f"""DELETE FROM channel_effect WHERE request_id IN
                (SELECT request_id FROM interactive_request WHERE run_id IN {_DOOMED})""", (doomed,))
    # … and about their notifications (keyed by the outbox message they were sent from).
    ctx.conn.execute(
        f"""DELETE FROM channel_effect WHERE request_id IN
                (SELECT message_id FROM session_message WHERE run_id IN {_DOOMED} AND audience IS NOT NULL)""",
        (doomed,))
    ctx.conn.execute(f"DELETE FROM interactive_request WHERE run_id IN {_DOOMED}", (doomed,))
    for table in _RUN_TABLES:
        ctx.conn.execute(f"DELETE FROM {table} WHERE run_id IN {_DOOMED}", (doomed,))
    ctx.conn.execute(f"DELETE FROM child_process WHERE run_id IN {_DOOMED} AND released_at IS NOT NULL",
                     (doomed,))
    for run_id in run_ids:
        ctx.changes.touch("run", run_id)
    for table in ("run_event", "node_attempt", "effect", "interactive_request", "session_message"):
        ctx.changes.touch(table)


def _stale_commands(ctx: WriteContext, before: float | None) -> int:
    if before is None:
        return 0
    return int(ctx.conn.execute("SELECT count(*) FROM host_command WHERE created_at < ?", (before,)).fetchone()[0])


def _apply(ctx: WriteContext, before: float, max_runs: int, idempotency_before: float | None) -> dict[str, Any]:
    plan = plan_prune(ctx.conn, before, max_runs)
    engine = engine_of(ctx.conn)
    pages_before, _ = engine.page_bytes(ctx.conn)
    if plan.run_ids:
        _delete_runs(ctx, plan.run_ids, before)
        ctx.conn.execute(f"DELETE FROM blob WHERE sha256 IN {engine.json_values}",
                         (json.dumps(plan.blob_shas),))
        ctx.changes.touch("blob")
    # Workers the host started and let go of (no run of their own): their released records
    # would otherwise pile up, one per worker process ever started.
    ctx.conn.execute("DELETE FROM child_process WHERE run_id IS NULL AND released_at IS NOT NULL "
                     "AND released_at < ?", (before,))
    # Starts that left their rate window (keys the claim did not read again since): timer time.
    ctx.conn.execute("DELETE FROM rate_start WHERE left_at <= ?", (ctx.timer_now,))
    # Emitted events go by the same cutoff (the runs they started stay until their own prune).
    emitted = prune_events(ctx, before)
    commands = 0
    if idempotency_before is not None:
        commands = ctx.conn.execute("DELETE FROM host_command WHERE created_at < ?", (idempotency_before,)).rowcount
    vacuumed = engine.reclaim_pages(ctx.conn)
    pages_after, page_size = engine.page_bytes(ctx.conn)
    return {**_receipt(plan, applied=True, idempotency_records=commands), "emitted_events": emitted,
            "vacuumed_pages": vacuumed,
            "bytes_returned": max(0, pages_before - pages_after) * page_size}


def _receipt(plan: PrunePlan, *, applied: bool, idempotency_records: int = 0) -> dict[str, Any]:
    summary = plan.summary(RECEIPT_RUN_IDS)
    return {"applied": applied, "before": summary["before"], "run_count": summary["run_count"],
            "remaining": summary["remaining"], "event_count": summary["event_count"],
            "blob_count": summary["blob_count"], "bytes_freed_estimate": summary["bytes_freed_estimate"],
            "idempotency_records": idempotency_records, "runs": summary["runs"]}


@command("state.prune")
def prune(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Plan (apply false, the default) or perform (apply true) a prune of terminal runs.

    args: {before: seconds, apply?: bool, max_runs?: int (10,000),
    idempotency_before?: seconds, client_id?, idempotency_key?, request_id?,
    payload?}. Answers like every recorded client command: {outcome:
    accepted | adopted, receipt, revision: None}; the receipt is {applied,
    before, run_count, remaining, event_count, blob_count,
    bytes_freed_estimate, idempotency_records, runs: [first 100 ids]} and,
    when applied, vacuumed_pages and bytes_returned. Idempotency records
    outlive their runs; only those created before `idempotency_before` go
    (none when it is not given). A dry run writes nothing and is not
    recorded; an applied prune is recorded under (client_id,
    idempotency_key) when both are given, so a replay is `adopted`.
    """
    before, max_runs = check_prune_args(args.get("before"), args.get("max_runs", DEFAULT_MAX_RUNS))
    idempotency_before = args.get("idempotency_before")
    if idempotency_before is not None:
        idempotency_before, _ = check_prune_args(idempotency_before, 1)
    apply = args.get("apply", False)
    if not isinstance(apply, bool):
        raise Rejected("prune `apply` must be true or false")
    if not apply:
        plan = plan_prune(ctx.conn, before, max_runs)
        return {"outcome": "accepted", "revision": None, "receipt": _receipt(
            plan, applied=False, idempotency_records=_stale_commands(ctx, idempotency_before))}
    # The fingerprint covers what decides the effect, unless the caller
    # supplies its own payload (the client protocol passes the request's).
    fingerprinted = {**args, "payload_for_fingerprint": args.get(
        "payload", {"before": before, "apply": True, "max_runs": max_runs, "idempotency_before": idempotency_before})}
    return recorded(ctx, fingerprinted, lambda: _apply(ctx, before, max_runs, idempotency_before))


@command("state.backup")
def record_backup(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Record a backup under the client's idempotency key: its receipt (`args.receipt`, from
    `store.backup.backup`, done by the host before this command because it writes a file, not
    the database) or its refusal (`args.refusal`: the destination exists, …).

    The host looks for the record first and makes no second copy for a replay; a replay that
    reaches this command anyway (two at once) is answered from the record like any other — `adopted`
    with the first receipt. Between a finished copy and this commit a host crash leaves the copy
    unrecorded: a replay then finds the file there and is refused "already exists".
    """

    def apply() -> dict[str, Any]:
        refusal_in(args)
        receipt = args.get("receipt")
        if not isinstance(receipt, dict):
            raise Rejected("state.backup records a backup the host made; this one has no receipt")
        return receipt

    return recorded(ctx, args, apply)
