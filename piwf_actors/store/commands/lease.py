"""Host lease commands: the only writes that are not fenced by the epoch,
because they are what moves it. Each checks the caller's identity instead.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import HostAlreadyRunning, LeaseLost
from piwf_actors.store.commands.registry import WriteContext, command


@command("lease.acquire", fenced=False)
def acquire(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Take the lease: epoch + 1, store the token's hash, pid and start identity.

    Refused while another holder's lease is unexpired, unless the caller has
    established (`holder_dead`) that the recorded holder process is gone —
    the host checks pid + start identity with psutil while holding the lock
    file, so no live host can be displaced.
    """
    row = ctx.conn.execute(
        "SELECT epoch, host_id, pid, process_start_identity, expires_at FROM host_state WHERE id = 1"
    ).fetchone()
    epoch, host_id, pid, identity, expires_at = row
    live = host_id is not None and expires_at is not None and expires_at > ctx.now
    if live:
        dead = args.get("holder_dead")
        if not (dead and dead.get("pid") == pid and dead.get("process_start_identity") == identity):
            raise HostAlreadyRunning(str(args.get("state_dir", "")), pid)
    new_epoch = epoch + 1
    expires = ctx.now + float(args["lease_s"])
    changed = ctx.conn.execute(
        """UPDATE host_state SET epoch = ?, host_id = ?, token_hash = ?, pid = ?,
               process_start_identity = ?, started_at = ?, heartbeat_at = ?, expires_at = ?,
               released_at = NULL
           WHERE id = 1 AND epoch = ?""",
        (new_epoch, args["host_id"], args["token_hash"], args["pid"],
         args["process_start_identity"], ctx.now, ctx.now, expires, epoch),
    ).rowcount
    if changed != 1:
        raise LeaseLost(new_epoch, "host state changed during acquire")
    ctx.changes.touch("host_state")
    return {"epoch": new_epoch, "expires_at": expires, "previous_holder_pid": pid if host_id else None}


def _identity_clause() -> str:
    return "id = 1 AND epoch = ? AND host_id = ? AND token_hash = ? AND pid = ? AND process_start_identity = ?"


def _identity(args: dict[str, Any]) -> tuple[Any, ...]:
    return (args["epoch"], args["host_id"], args["token_hash"], args["pid"], args["process_start_identity"])


@command("lease.renew", fenced=False)
def renew(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Extend the lease; refused once it has expired or moved to another holder."""
    expires = ctx.now + float(args["lease_s"])
    changed = ctx.conn.execute(
        f"UPDATE host_state SET heartbeat_at = ?, expires_at = ? WHERE {_identity_clause()} AND expires_at > ?",
        (ctx.now, expires, *_identity(args), ctx.now),
    ).rowcount
    if changed != 1:
        raise LeaseLost(int(args["epoch"]), "the lease expired or another host took it")
    ctx.changes.touch("host_state")
    return {"expires_at": expires, "heartbeat_at": ctx.now}


@command("lease.release", fenced=False)
def release(ctx: WriteContext, args: dict[str, Any]) -> bool:
    """Give the lease up on a clean stop; the epoch stays (the next host adds one)."""
    changed = ctx.conn.execute(
        f"""UPDATE host_state SET host_id = NULL, token_hash = NULL, pid = NULL,
               process_start_identity = NULL, expires_at = NULL, released_at = ?
            WHERE {_identity_clause()}""",
        (ctx.now, *_identity(args)),
    ).rowcount
    ctx.changes.touch("host_state")
    return changed == 1


@command("lease.reacquire", fenced=False)
def reacquire(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Take the lease again at epoch + 1 after it ran out while its holder could not write.

    Only the holder named in the row may (same epoch, host id, token hash,
    pid and start identity): if any other host took the lease meanwhile, the
    row names it and this is refused (LeaseLost). In the same transaction the
    holder's run claims move to the new epoch with a fresh expiry
    (`claim_lease_s`), so its workers, which kept their results while the
    disk was full, go on: nobody else can have touched them, since the row
    still names this holder. Whatever the old epoch issued and was not
    written yet is refused as stale and sent again under the new one.
    """
    old_epoch = int(args["epoch"])
    new_epoch = old_epoch + 1
    expires = ctx.now + float(args["lease_s"])
    changed = ctx.conn.execute(
        f"UPDATE host_state SET epoch = ?, heartbeat_at = ?, expires_at = ? WHERE {_identity_clause()}",
        (new_epoch, ctx.now, expires, *_identity(args)),
    ).rowcount
    if changed != 1:
        raise LeaseLost(old_epoch, "another host took the lease while this one could not write")
    # Runner hosts' claims and workers belong to their runner leases, not to this epoch.
    claims = ctx.conn.execute("UPDATE run_claim SET host_epoch = ?, expires_at = ? WHERE host_epoch = ? "
                              "AND runner_id IS NULL",
                              (new_epoch, ctx.now + float(args.get("claim_lease_s", 30.0)), old_epoch)).rowcount
    ctx.conn.execute("UPDATE run_worker SET host_epoch = ? WHERE host_epoch = ? AND status IN ('starting', 'live') "
                     "AND runner_id IS NULL", (new_epoch, old_epoch))
    ctx.changes.touch("host_state")
    ctx.changes.touch("run_claim")
    return {"epoch": new_epoch, "expires_at": expires, "heartbeat_at": ctx.now, "claims": claims}
