"""Runner lease commands (docs/runners.md): what a runner host holds instead of the host lease.

One `runner_host` row per runner id. `runner_lease.acquire` starts a new epoch of it (refused while
another process's lease on that id is live), `renew` extends it every third of its length, `release`
gives it up on a clean stop. Like the host lease's commands they are not fenced (they are what the
fence reads) and check the caller's identity themselves: runner id, epoch and token hash. Every other
write a runner host sends is fenced by this row in `store/batch.py` (same epoch, not released,
unexpired by the transaction's clock — the database server's on PostgreSQL).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import RunnerAlreadyRunning, RunnerLeaseLost
from piwf_actors.store.commands.registry import WriteContext, command


@command("runner_lease.acquire", fenced=False)
def acquire(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Take the lease of `runner_id` at epoch + 1 (1 for a new id). Refused while the row's lease is
    live: another process runs as this runner (it can only be taken once that lease ran out)."""
    runner_id = str(args["runner_id"])
    row = ctx.conn.execute("SELECT epoch, pid, expires_at, released_at FROM runner_host WHERE runner_id = ?",
                           (runner_id,)).fetchone()
    if row is not None and row[3] is None and row[2] > ctx.now:
        raise RunnerAlreadyRunning(runner_id, row[1])
    epoch = 1 if row is None else int(row[0]) + 1
    expires = ctx.now + float(args["lease_s"])
    values = (epoch, args["token_hash"], args["pid"], args.get("process_start_identity"), args.get("machine_id"),
              args.get("state_dir"), int(args["max_workers"]), ctx.now, ctx.now, expires)
    if row is None:
        ctx.conn.execute(
            """INSERT INTO runner_host (epoch, token_hash, pid, process_start_identity, machine_id, state_dir,
                   max_workers, started_at, heartbeat_at, expires_at, released_at, runner_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)""", (*values, runner_id))
    else:
        changed = ctx.conn.execute(
            """UPDATE runner_host SET epoch = ?, token_hash = ?, pid = ?, process_start_identity = ?, machine_id = ?,
                   state_dir = ?, max_workers = ?, started_at = ?, heartbeat_at = ?, expires_at = ?, released_at = NULL
               WHERE runner_id = ? AND epoch = ?""", (*values, runner_id, row[0])).rowcount
        if changed != 1:
            raise RunnerLeaseLost(runner_id, epoch, "the runner's row changed during acquire")
    ctx.changes.touch("runner_host")
    return {"epoch": epoch, "expires_at": expires, "heartbeat_at": ctx.now}


_IDENTITY = "runner_id = ? AND epoch = ? AND token_hash = ? AND released_at IS NULL"


def _identity(args: dict[str, Any]) -> tuple[Any, ...]:
    return (args["runner_id"], args["epoch"], args["token_hash"])


@command("runner_lease.renew", fenced=False)
def renew(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Extend the lease; refused once it has expired, was released, or moved to another epoch."""
    expires = ctx.now + float(args["lease_s"])
    changed = ctx.conn.execute(
        f"UPDATE runner_host SET heartbeat_at = ?, expires_at = ? WHERE {_IDENTITY} AND expires_at > ?",
        (ctx.now, expires, *_identity(args), ctx.now)).rowcount
    if changed != 1:
        raise RunnerLeaseLost(str(args["runner_id"]), int(args["epoch"]),
                              "the lease expired or another process took this runner id")
    ctx.changes.touch("runner_host")
    return {"expires_at": expires, "heartbeat_at": ctx.now}


@command("runner_lease.release", fenced=False)
def release(ctx: WriteContext, args: dict[str, Any]) -> bool:
    """Give the lease up on a clean stop (its claims were handed back first); the epoch stays."""
    changed = ctx.conn.execute(f"UPDATE runner_host SET released_at = ?, expires_at = ? WHERE {_IDENTITY}",
                               (ctx.now, ctx.now, *_identity(args))).rowcount
    ctx.changes.touch("runner_host")
    return changed == 1
