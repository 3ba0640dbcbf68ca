"""Registration of child processes (workers, shell commands) for orphan reaping.

A child is identified by (pid, create_time) so a later host never signals a
process that merely reused the pid, and by the machine it runs on, so a host
never signals a pid that belongs to another machine.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store.commands.registry import WriteContext, command


def register(ctx: WriteContext, pid: int, create_time: float, kind: str, run_id: str | None,
             machine_id: str | None = None) -> None:
    """Record a child this host started (also used by the worker's register_child), with the
    machine it runs on (`runner.termination.machine_identity`) and, for a runner host's child, the
    runner lease it belongs to (a new active host leaves those to `runners.recover`)."""
    ctx.conn.execute(
        """INSERT INTO child_process
           (pid, create_time, kind, run_id, host_epoch, registered_at, released_at, machine_id, runner_id,
            runner_lease_epoch)
           VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)
           ON CONFLICT (pid, create_time) DO UPDATE SET kind = excluded.kind, run_id = excluded.run_id,
               host_epoch = excluded.host_epoch, registered_at = excluded.registered_at, released_at = NULL,
               machine_id = excluded.machine_id, runner_id = excluded.runner_id,
               runner_lease_epoch = excluded.runner_lease_epoch""",
        (pid, create_time, kind, run_id, ctx.host_epoch, ctx.now, machine_id, ctx.runner_id, ctx.runner_lease_epoch),
    )
    ctx.changes.touch("child_process", run_id)


def release(ctx: WriteContext, pid: int, create_time: float, run_id: str | None) -> bool:
    """The child is known to be gone (waited for, or reaped)."""
    changed = ctx.conn.execute(
        "UPDATE child_process SET released_at = ? WHERE pid = ? AND create_time = ? AND released_at IS NULL",
        (ctx.now, pid, create_time),
    ).rowcount
    ctx.changes.touch("child_process", run_id)
    return changed == 1


@command("child.register")
def register_child(ctx: WriteContext, args: dict[str, Any]) -> bool:
    register(ctx, args["pid"], args["create_time"], args["kind"], args.get("run_id"), args.get("machine_id"))
    return True


@command("child.release")
def release_child(ctx: WriteContext, args: dict[str, Any]) -> bool:
    return release(ctx, args["pid"], args["create_time"], args.get("run_id"))
