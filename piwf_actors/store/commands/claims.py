"""The scheduler's commands: claim a run, renew claims, settle a runner's exit,
and recover what a previous host left behind.

A claim is the fence for everything a worker writes: a random token (only
its sha256 is stored), a generation that grows with every claim of the run,
a launch id naming one launch, the host epoch, and an expiry. A claim a
runner host took (docs/runners.md) names that runner and the epoch of its
runner lease instead: it belongs to that lease, not to any host epoch, so a
new active host leaves it alone while the runner's lease is live and
recovers it (`runners.recover`) once it is not.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.store import rates
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.blobs import put_json_blob
from piwf_actors.store.commands.flow_timers import arm_rate_timer
from piwf_actors.store.commands.holds import hold_blocked
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command, peer_provenance
from piwf_actors.store.commands.resources import resolve_resource_effect
from piwf_actors.store.commands.worker import launch_state
from piwf_actors.store.engines.base import engine_of
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import QUEUE_HELD, claim_row, release_claim, run_row, set_status
from piwf_actors.store.slots import SLOT_COLUMNS, blocked_by, needs_check
from piwf_actors.wire.content import INLINE_BYTES

_CANDIDATE_COLUMNS = ", ".join(SLOT_COLUMNS)


def _candidates(ctx: WriteContext, exclude: list[str], limit: int) -> list[dict[str, Any]]:
    """The next runs to start, at most `limit`: a submission waiting for validation first, then runs
    woken by an answer, a deadline or a resume, then fresh runs, each class higher priority first
    and then in the order it was queued (the seed's order; `runstate.set_status` stamps the class).
    One walk of the `run_queue_order` index; held runs (class 3) are past its end.

    Several hosts may claim from one queue at once (the active host and runner hosts): on PostgreSQL
    the rows read are locked until the claim commits and rows another claim holds are skipped
    (`Engine.skip_locked`), so two hosts take different runs instead of conflicting on one."""
    placeholders = ",".join("?" * len(exclude)) or "''"
    return [dict(zip(SLOT_COLUMNS, row, strict=True)) for row in ctx.conn.execute(
        f"""SELECT {_CANDIDATE_COLUMNS} FROM run
            WHERE status = 'queued' AND queue_class < {QUEUE_HELD} AND pause_requested = 0 AND cancel_requested = 0
              AND run_id NOT IN ({placeholders})
              AND run_id NOT IN (SELECT run_id FROM run_claim)
            ORDER BY queue_class, priority DESC, queued_at LIMIT ?{engine_of(ctx.conn).skip_locked}""",
        (*exclude, limit))]


#: Passes of the queue one claim makes while the runs it read were held back (each pass holds
#: at least one whole group: a key, a fan-out, a paused parent's children).
_CLAIM_PASSES = 16


@command("scheduler.claim_next")
def claim_next(ctx: WriteContext, args: dict[str, Any]) -> Any:
    """Claim eligible runs for new launches, one per slot.

    `args.slots` lists {token_hash, launch_id, pid?, create_time?} — one
    per free worker; the answer is the list of claimed runs (possibly
    empty). Without `slots` the args are one slot and the answer is one
    claimed run or None. Each claimed run is marked `starting`, gets a claim
    and a `run_worker` row (with the worker's pid when it is known already).

    A fresh run over its concurrency limit or its fan-out's `max_parallel` (or whose parent is
    paused) is not claimed: it is held, with every fresh run of the same key (store/commands/holds.py),
    until a run of that key ends. A fresh run over its rate limit is held the same way until the
    time its next start is allowed (a timer, store/commands/flow_timers.py); a fresh run claimed
    under a rate limit records its start (store/rates.py). The check is made run by run in this
    transaction, after the claims before it, so a limit holds across hosts.
    """
    single = "slots" not in args
    slots = [args] if single else list(args["slots"])
    exclude = list(args.get("exclude", []))
    claimed: list[dict[str, Any]] = []
    for _ in range(_CLAIM_PASSES):
        held = False
        for run in _candidates(ctx, exclude, len(slots) - len(claimed)):
            exclude.append(run["run_id"])
            block = blocked_by(ctx.conn, run, ctx.timer_now) if needs_check(run) else None
            if block is not None:
                held = hold_blocked(ctx, block) > 0 or held
                if block.wake_at is not None:
                    arm_rate_timer(ctx, block, run["rate_max"], run["rate_per_s"])  # held runs of a rate key wake when a start is allowed
                continue
            if rates.counts_start(run):
                rates.count_start(ctx.conn, run, ctx.timer_now)
            claimed.append(_claim(ctx, run["run_id"], slots[len(claimed)], float(args["claim_lease_s"])))
        if not held or len(claimed) == len(slots):
            break
    # Fewer eligible runs than slots leave the last slots unused.
    if single:
        return claimed[0] if claimed else None
    return claimed


_CLAIM_ROW = """INSERT INTO run_claim (run_id, claim_token_hash, generation, launch_id, host_epoch, claimed_at,
                   expires_at, progress_at_claim, runner_id, runner_lease_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_WORKER_ROW = """INSERT INTO run_worker (worker_id, run_id, generation, launch_id, host_epoch, pid, process_create_time,
                    status, started_at, runner_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def _insert(ctx: WriteContext, table: str, sql: str, row: tuple[Any, ...]) -> None:
    if isinstance(ctx.conn, BatchConnection):
        ctx.conn.hold_insert(table, sql, row)
    else:
        ctx.conn.execute(sql, row)


def _claim(ctx: WriteContext, run_id: str, slot: dict[str, Any], claim_lease_s: float) -> dict[str, Any]:
    # The new generation, the status and the run row the launch needs: one update (set_status's).
    run: dict[str, Any] = {}
    revision = set_status(ctx, run_id, "starting", "run_claimed", also="generation = generation + 1", whole_row=run,
                          payload=lambda row: {"generation": row["generation"], "launch_id": slot["launch_id"],
                                               "by": ctx.executed_by})
    generation = int(run["generation"])
    run["claim_generation"] = generation
    pid = slot.get("pid")
    # Held back in a write batch and inserted with the batch's other claims (BatchConnection.hold_insert).
    _insert(ctx, "run_claim", _CLAIM_ROW,
            (run_id, slot["token_hash"], generation, slot["launch_id"], ctx.host_epoch, ctx.now,
             ctx.now + claim_lease_s, run["steps"], ctx.runner_id, ctx.runner_lease_epoch))
    _insert(ctx, "run_worker", _WORKER_ROW,
            (slot["launch_id"], run_id, generation, slot["launch_id"], ctx.host_epoch, pid,
             slot.get("create_time"), "starting" if pid is None else "live", ctx.now, ctx.runner_id))
    return {
        "run_id": run_id, "generation": generation, "launch_id": slot["launch_id"], "revision": run["progress"],
        "run_revision": revision, "token_hash": slot["token_hash"],
        "workflow": run["workflow"], "workflow_path": run["workflow_path"], "workflow_attr": run["workflow_attr"],
        "definition_digest": run["definition_digest"], "source_sha256": run["source_sha256"],
        "project_path": run["project_path"], "worker_pid": pid, **_source(ctx, run["source_sha256"]),
        # The state ships with the launch, so the worker starts its first node
        # while its `ready` is being committed (see worker/engine.py).
        "state": launch_state(ctx, run),
    }


def _source(ctx: WriteContext, sha256: str | None) -> dict[str, Any]:
    """The workflow snapshot for the launch: inline when small, else its size (the worker reads it
    in chunks); size -1 when there is none."""
    batch = ctx.conn if isinstance(ctx.conn, BatchConnection) else None
    # Runs of one workflow share their snapshot: a batch that claims several reads it once.
    row = None if sha256 is None or batch is None else batch.blob_read(sha256)
    if row is None and sha256 is not None:
        row = ctx.conn.execute("SELECT size, CASE WHEN size <= ? THEN data END FROM blob WHERE sha256 = ?",
                               (INLINE_BYTES, sha256)).fetchone()
        if row is not None and batch is not None:
            batch.note_blob(sha256, tuple(row))
    if row is None:
        return {"source": None, "source_size": -1}
    return {"source": None if row[1] is None else bytes(row[1]), "source_size": int(row[0])}


@command("scheduler.renew_claims")
def renew_claims(ctx: WriteContext, args: dict[str, Any]) -> dict[str, bool]:
    """Extend the listed claims; the answer maps run id → still held (by this host or runner)."""
    held: dict[str, bool] = {}
    owner, owner_params = ctx.owner_condition()
    for item in args["claims"]:
        changed = ctx.conn.execute(
            f"""UPDATE run_claim SET expires_at = ? WHERE run_id = ? AND generation = ?
                   AND claim_token_hash = ? AND {owner} AND expires_at > ?""",
            (ctx.now + float(args["claim_lease_s"]), item["run_id"], item["generation"], item["token_hash"],
             *owner_params, ctx.now),
        ).rowcount
        held[item["run_id"]] = changed == 1
    return held


@command("scheduler.settle_abandoned")
def settle_abandoned(ctx: WriteContext, args: dict[str, Any]) -> dict[str, str]:
    """Safety net: claims of this host whose lease ran out and whose run has no
    runner any more (its exit could not be recorded) are settled like a
    runner that went away, so no run stays `running` until the next restart."""
    active = set(args.get("active", []))
    settled: dict[str, str] = {}
    owner, owner_params = ctx.owner_condition()
    for run_id, progress in ctx.conn.execute(
            f"SELECT run_id, progress_at_claim FROM run_claim WHERE {owner} AND expires_at <= ?",
            (*owner_params, ctx.now)).fetchall():
        if run_id in active:
            continue
        settled[run_id] = settle_interrupted_run(ctx, run_id, outcome="abandoned",
                                                 diagnostic="the runner's exit was never recorded",
                                                 progress_at_claim=progress)
    return settled


@command("runner.attach")
def attach_runner(ctx: WriteContext, args: dict[str, Any]) -> bool:
    """Record the worker process serving a launch (pid + create_time) for reaping."""
    ctx.conn.execute(
        "UPDATE run_worker SET pid = ?, process_create_time = ?, status = 'live' WHERE worker_id = ?",
        (args["pid"], args["create_time"], args["launch_id"]),
    )
    ctx.changes.touch("run_worker", args.get("run_id"))
    return True


def recover_applying_effects(ctx: WriteContext, run_id: str) -> str | None:
    """Settle effects left `applying`: idempotent ones are abandoned (the node
    simply runs again), any other becomes `ambiguous`. Returns the first
    ambiguous effect id, or None."""
    ambiguous: str | None = None
    rows = ctx.conn.execute(
        "SELECT effect_id, idempotent, node_id FROM effect WHERE run_id = ? AND status = 'applying'",
        (run_id,)).fetchall()
    for effect_id, idempotent, node_id in rows:
        if idempotent:
            ctx.conn.execute("UPDATE effect SET status = 'failed', resolution = 'abandoned', settled_at = ? "
                             "WHERE effect_id = ?", (ctx.now, effect_id))
            append_event(ctx.conn, run_id, "effect_settled", ctx.now, node_id=node_id,
                         payload={"effect_id": effect_id, "status": "abandoned"})
        else:
            ctx.conn.execute("UPDATE effect SET status = 'ambiguous' WHERE effect_id = ?", (effect_id,))
            append_event(ctx.conn, run_id, "effect_ambiguous", ctx.now, node_id=node_id,
                         payload={"effect_id": effect_id})
            ambiguous = ambiguous or effect_id
    if ambiguous is None:
        row = ctx.conn.execute("SELECT effect_id FROM effect WHERE run_id = ? AND status = 'ambiguous' LIMIT 1",
                               (run_id,)).fetchone()
        ambiguous = None if row is None else row[0]
    return ambiguous


def _interrupt_attempts(ctx: WriteContext, run_id: str) -> None:
    ctx.conn.execute("UPDATE node_attempt SET status = 'interrupted', finished_at = ? "
                     "WHERE run_id = ? AND status = 'running'", (ctx.now, run_id))


def settle_interrupted_run(ctx: WriteContext, run_id: str, *, outcome: str, diagnostic: str | None,
                           progress_at_claim: int | None, load_failure: str | None = None) -> str:
    """Decide what becomes of a run whose runner went away without a terminal transition.

    Order matters: cancellation wins; an ambiguous effect parks the run; a
    workflow that could not load fails it; a runner that committed no
    progress since its launch parks it `no_progress` (parking is the stop:
    no crash loop); otherwise it goes back to the queue and resumes from its
    last committed node. Returns the run's new status.
    """
    run = run_row(ctx.conn, run_id)
    release_claim(ctx, run_id, by_worker=False)
    _interrupt_attempts(ctx, run_id)
    if run["status"] not in ("starting", "running"):
        return str(run["status"])
    if run["cancel_requested"]:
        # An effect cut off by the cancel has an unknown outcome; record it as such.
        recover_applying_effects(ctx, run_id)
        set_status(ctx, run_id, "cancelled", "run_cancelled", payload={"runner_outcome": outcome})
        return "cancelled"
    effect_id = recover_applying_effects(ctx, run_id)
    if effect_id is not None:
        set_status(ctx, run_id, "parked", "run_parked", park_reason="ambiguous_effect", park_detail=effect_id,
                   payload={"reason": "ambiguous_effect", "effect_id": effect_id})
        return "parked"
    if load_failure is not None:
        set_status(ctx, run_id, "failed", "run_failed", error_code="workflow_load_failed",
                   error_message=load_failure[:8192], payload={"error_code": "workflow_load_failed"})
        return "failed"
    if run["pause_requested"]:
        # The person asked for a pause: honour it, whatever the runner managed.
        ctx.conn.execute("UPDATE run SET pause_requested = 0 WHERE run_id = ?", (run_id,))
        set_status(ctx, run_id, "parked", "run_parked", park_reason="paused",
                   payload={"reason": "paused", "runner_outcome": outcome})
        return "parked"
    if progress_at_claim is not None and run["steps"] <= progress_at_claim:
        detail = f"runner {outcome} before it committed progress" + (f": {diagnostic}" if diagnostic else "")
        set_status(ctx, run_id, "parked", "run_parked", park_reason="no_progress", park_detail=detail[:2000],
                   payload={"reason": "no_progress", "detail": detail[:2000]})
        return "parked"
    set_status(ctx, run_id, "queued", "run_requeued", payload={"runner_outcome": outcome, "diagnostic": diagnostic})
    return "queued"


@command("runner.exit")
def runner_exit(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The supervisor reports that a launch ended (worker exited, was killed or lost).

    Settles the run only while the claim is still this launch's; a claim that
    moved on (another host, a newer generation) is left alone.
    """
    run_id = args["run_id"]
    ctx.conn.execute(
        """UPDATE run_worker SET status = 'exited', outcome = ?, exit_code = ?, diagnostic = ?, ended_at = ?
           WHERE worker_id = ?""",
        (args["outcome"], args.get("exit_code"), args.get("diagnostic"), ctx.now, args["launch_id"]),
    )
    ctx.changes.touch("run_worker", run_id)
    # Shell commands the worker started outlive it when it is killed (they lead
    # their own process groups); the supervisor terminates the ones still registered.
    children = [{"pid": pid, "create_time": create_time} for pid, create_time in ctx.conn.execute(
        "SELECT pid, create_time FROM child_process WHERE run_id = ? AND released_at IS NULL AND kind = 'shell'",
        (run_id,))]
    claim = claim_row(ctx.conn, run_id)
    if (claim is None or claim["generation"] != args["generation"] or claim["claim_token_hash"] != args["token_hash"]
            or not ctx.owns_claim(claim["host_epoch"], claim["runner_id"], claim["runner_lease_epoch"])):
        return {"status": run_row(ctx.conn, run_id)["status"], "settled": False, "children": children}
    # A host that stops cleanly interrupts runs through no fault of theirs:
    # they go back to the queue whatever their progress.
    progress = None if args.get("requeue") else claim["progress_at_claim"]
    if args.get("timed_out"):
        # The watchdog's verdict is the node's outcome: the next launch routes it.
        _record_timeout(ctx, run_id, claim, args["timed_out"])
        progress = None
    elif args["outcome"] == START_TIMEOUT:
        progress = _count_start_failure(ctx, run_id, claim)
    status = settle_interrupted_run(ctx, run_id, outcome=args["outcome"], diagnostic=args.get("diagnostic"),
                                    progress_at_claim=progress,
                                    load_failure=args.get("load_failure"))
    return {"status": status, "settled": True, "children": children}


#: runner.exit outcomes of the host-side watchdog.
TIMED_OUT = "timedOut"
START_TIMEOUT = "startTimeout"
#: Launches in a row whose worker never became ready before the run parks `no_progress`.
MAX_START_FAILURES = 3


def _record_timeout(ctx: WriteContext, run_id: str, claim: dict[str, Any], timed_out: dict[str, Any]) -> None:
    """Record what the watchdog stopped.

    A node with a non-idempotent effect under way was killed inside that effect: its outcome is
    unknown, as after any death of its worker. Its attempt is kept `interrupted` with the timeout
    as its error and its effect is left `applying`, so settling the run (`recover_applying_effects`)
    makes it `ambiguous` and parks the run; `retries` does not apply. Any other node failed with
    `timeout`: its attempt is marked `timed_out` (created for a pure node, which is recorded only
    when it finishes), an idempotent effect is settled failed, and the next launch routes the
    failure like any other."""
    node_id, attempt_id = str(timed_out["node_id"]), str(timed_out["attempt_id"])
    message = f"timed out after {float(timed_out.get('after_s') or 0):g} s (stopped by the host's watchdog)"
    unknown = ctx.conn.execute("SELECT effect_id FROM effect WHERE run_id = ? AND attempt_id = ? "
                               "AND status = 'applying' AND idempotent = ?", (run_id, attempt_id, False)).fetchone()
    if unknown is not None:
        ctx.conn.execute(
            "UPDATE node_attempt SET status = 'interrupted', error_code = 'timeout', error_message = ?, "
            "finished_at = ? WHERE attempt_id = ? AND run_id = ? AND status = 'running'",
            (message, ctx.now, attempt_id, run_id))
        append_event(ctx.conn, run_id, "node_interrupted", ctx.now, node_id=node_id, attempt_id=attempt_id,
                     payload={"error_code": "timeout", "error": message, "effect_id": unknown[0]})
        ctx.changes.touch("node_attempt", run_id)
        return
    changed = ctx.conn.execute(
        "UPDATE node_attempt SET status = 'timed_out', error_code = 'timeout', error_message = ?, finished_at = ? "
        "WHERE attempt_id = ? AND run_id = ? AND status = 'running'", (message, ctx.now, attempt_id, run_id)).rowcount
    if not changed:
        run = run_row(ctx.conn, run_id)
        attempt_no = ctx.conn.execute("SELECT count(*) FROM node_attempt WHERE run_id = ? AND node_id = ?",
                                      (run_id, node_id)).fetchone()[0] + 1
        ctx.conn.execute(
            """INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, error_code,
                   error_message, generation, started_at, finished_at, executed_by)
               VALUES (?, ?, ?, ?, ?, 'timed_out', 'timeout', ?, ?, ?, ?, ?) ON CONFLICT (attempt_id) DO NOTHING""",
            (attempt_id, run_id, node_id, attempt_no, run["steps"], message, claim["generation"], ctx.now, ctx.now,
             ctx.executed_by))
    for (effect_id,) in ctx.conn.execute("SELECT effect_id FROM effect WHERE run_id = ? AND attempt_id = ? "
                                         "AND status = 'applying'", (run_id, attempt_id)).fetchall():
        ctx.conn.execute("UPDATE effect SET status = 'failed', error = ?, settled_at = ? WHERE effect_id = ?",
                         (message, ctx.now, effect_id))
        append_event(ctx.conn, run_id, "effect_settled", ctx.now, node_id=node_id, attempt_id=attempt_id,
                     payload={"effect_id": effect_id, "status": "failed"})
    append_event(ctx.conn, run_id, "node_timed_out", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"after_s": timed_out.get("after_s")})
    ctx.changes.touch("node_attempt", run_id)


def _count_start_failure(ctx: WriteContext, run_id: str, claim: dict[str, Any]) -> int | None:
    """A worker that never became ready is the machine's trouble more often than the run's: the
    run is requeued, until it happens MAX_START_FAILURES times in a row (then it parks)."""
    failures = ctx.conn.execute("UPDATE run SET start_failures = start_failures + 1 WHERE run_id = ? "
                                "RETURNING start_failures", (run_id,)).fetchone()[0]
    return claim["progress_at_claim"] if failures >= MAX_START_FAILURES else None


@command("host.recover")
def recover_host(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """At start-up: take over what earlier host epochs left active.

    Their workers are marked orphaned (the processes were reaped before this
    runs) and their runs are settled as after a runner crash, except that a
    host crash is not the run's fault: a run without progress is re-queued
    rather than parked, so it resumes from its last committed node.

    Claims of runner hosts are not an earlier host's: they belong to their
    runner's lease, and `runners.recover` settles them once that lease is
    gone; this leaves them (and their workers) alone.
    """
    if ctx.runner_id is not None:
        raise Rejected("host.recover is the active host's")
    return {"runs": _recover_earlier_epochs(ctx)}


def _recover_earlier_epochs(ctx: WriteContext) -> dict[str, str]:
    ctx.conn.execute(
        """UPDATE run_worker SET status = 'orphaned', outcome = 'orphaned', ended_at = ?
           WHERE host_epoch < ? AND status IN ('starting', 'live') AND runner_id IS NULL""",
        (ctx.now, ctx.host_epoch))
    runs = [r[0] for r in ctx.conn.execute(
        "SELECT run_id FROM run_claim WHERE host_epoch < ? AND runner_id IS NULL", (ctx.host_epoch,)).fetchall()]
    stray = [r[0] for r in ctx.conn.execute(
        "SELECT run_id FROM run WHERE status IN ('starting', 'running') AND run_id NOT IN "
        "(SELECT run_id FROM run_claim WHERE host_epoch = ? OR runner_id IS NOT NULL)",
        (ctx.host_epoch,)).fetchall()]
    settled: dict[str, str] = {}
    for run_id in dict.fromkeys(runs + stray):
        settled[run_id] = settle_interrupted_run(ctx, run_id, outcome="orphaned", diagnostic="host restarted",
                                                 progress_at_claim=None)
    ctx.changes.touch("run_worker")
    return settled


#: A runner lease that covers its claims now (judged with the transaction's `now`).
_LIVE_RUNNER = """EXISTS (SELECT 1 FROM runner_host h WHERE h.runner_id = {table}.runner_id
    AND h.epoch = {table}.runner_lease_epoch AND h.released_at IS NULL AND h.expires_at > ?)"""


@command("runners.recover")
def recover_runners(ctx: WriteContext, _args: dict[str, Any]) -> dict[str, Any]:
    """The active host takes over what runner hosts whose lease is gone left behind (docs/runners.md).

    A runner's lease is gone when its row expired, was released, or names a later epoch (the runner
    started again). Each of its claims is settled like a host crash's (`host.recover`): workers
    marked orphaned, an `applying` effect made ambiguous (the run parks), otherwise the run goes back
    to the queue and resumes elsewhere from its last committed node. The answer lists the recovered
    runs and the dead runners' unreleased child processes (pid, create time, machine): the host
    signals those on its own machine and releases all of them (`child.release`).
    """
    if ctx.runner_id is not None:
        raise Rejected("runners.recover is the active host's")
    dead = ctx.conn.execute(
        f"""SELECT run_id, launch_id, runner_id, runner_lease_epoch FROM run_claim
            WHERE runner_id IS NOT NULL AND NOT {_LIVE_RUNNER.format(table='run_claim')}""", (ctx.now,)).fetchall()
    settled: dict[str, str] = {}
    runners: set[str] = set()
    for run_id, worker_id, runner_id, lease_epoch in dead:
        runners.add(f"{runner_id}#{lease_epoch}")
        ctx.conn.execute("""UPDATE run_worker SET status = 'orphaned', outcome = 'orphaned', ended_at = ?
                            WHERE worker_id = ? AND status IN ('starting', 'live')""", (ctx.now, worker_id))
        settled[run_id] = settle_interrupted_run(
            ctx, run_id, outcome="orphaned", diagnostic=f"runner host {runner_id} (lease epoch {lease_epoch}) lost "
                                                        f"its lease", progress_at_claim=None)
    children = [{"pid": pid, "create_time": create_time, "run_id": run_id, "kind": kind, "machine_id": machine,
                 "runner_id": runner_id}
                for pid, create_time, run_id, kind, machine, runner_id in ctx.conn.execute(
                    f"""SELECT pid, create_time, run_id, kind, machine_id, runner_id FROM child_process
                        WHERE released_at IS NULL AND runner_id IS NOT NULL
                          AND NOT {_LIVE_RUNNER.format(table='child_process')}""", (ctx.now,)).fetchall()]
    if settled:
        ctx.changes.touch("run_worker")
    return {"runs": settled, "runners": sorted(runners), "children": children}


@command("effect.resolve")
def resolve_effect(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """A person settles an ambiguous effect: `confirm` (it happened; continue with
    the given output) or `retry` (run the node again). The run is re-queued.
    Recorded for idempotency when a client id and key are given."""
    return recorded(ctx, args, lambda: _resolve_effect(ctx, args))


def _resolve_effect(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    action = args.get("action")
    if action not in ("confirm", "retry"):
        raise Rejected("action must be confirm or retry")
    row = ctx.conn.execute("SELECT run_id, node_id, status FROM effect WHERE effect_id = ?",
                           (args["effect_id"],)).fetchone()
    if row is None:
        return resolve_resource_effect(ctx, args)  # not a run's effect: a resource's (or none: NotFound)
    run_id, node_id, status = row
    if status != "ambiguous":
        raise Rejected(f"effect {args['effect_id']} is {status}, not ambiguous")
    if action == "confirm":
        output_sha = put_json_blob(ctx.conn, args.get("output"), ctx.now)
        ctx.conn.execute("UPDATE effect SET status = 'applied', resolution = 'confirmed', output_sha256 = ?, "
                         "settled_at = ? WHERE effect_id = ?", (output_sha, ctx.now, args["effect_id"]))
    else:
        ctx.conn.execute("UPDATE effect SET status = 'failed', resolution = 'retry', settled_at = ? "
                         "WHERE effect_id = ?", (ctx.now, args["effect_id"]))
    by = peer_provenance(args.get("peer"))  # who resolved it, as the door saw them (docs/security.md)
    append_event(ctx.conn, run_id, "effect_resolved", ctx.now, node_id=node_id,
                 payload={"effect_id": args["effect_id"], "action": action, **({"by": by} if by else {})})
    run = run_row(ctx.conn, run_id)
    revision = run["revision"]
    remaining = ctx.conn.execute("SELECT count(*) FROM effect WHERE run_id = ? AND status = 'ambiguous'",
                                 (run_id,)).fetchone()[0]
    if run["status"] == "parked" and run["park_reason"] == "ambiguous_effect" and remaining == 0:
        if run["pause_requested"]:
            ctx.conn.execute("UPDATE run SET pause_requested = 0 WHERE run_id = ?", (run_id,))
            revision = set_status(ctx, run_id, "parked", "run_parked", park_reason="paused",
                                  payload={"reason": "paused", "after": "effect.resolve"})
        else:
            revision = set_status(ctx, run_id, "queued", "run_resumed", payload={"after": "effect.resolve"})
    ctx.changes.touch("effect", run_id)
    return {"run_id": run_id, "effect_id": args["effect_id"], "action": action, "revision": revision}
