"""The state database: state.status and state.verify (read-only), state.backup and state.prune (recorded).

state.status, state.verify and state.backup read the whole database or copy it: they run on the
gateway's executor, never in its thread. state.backup is a recorded command whose effect is a file:
the executor looks for the request's record, makes the copy only if there is none, and sends the
receipt (or the refusal) to be recorded; the writer answers a replay from the record (`adopted`
with the first receipt). A prune without `apply` is a dry run that is not recorded.
"""

from __future__ import annotations

import os
import time
from typing import Any

from piwf_actors.board import Section
from piwf_actors.errors import PiwfError
from piwf_actors.protocol.catalog.registry import BuildEnv, OperationContext, client_args, operation, write_operation
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.store import backup, state_report
from piwf_actors.store.command_records import lookup_recorded, recordable
from piwf_actors.store.requests import WriteCommand


@operation("state.status", payload={"counts": ("bool", False)}, read_only=True)
def state_status(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """`counts: false` leaves out the exact row counts of every table (`tables`), the one part that
    walks the whole database (the console's host page asks so)."""
    def status() -> None:
        receipt = state_report.state_status(ctx.env.database, counts=payload.get("counts", True) is not False)
        # Whether writes stand still for a full disk (the writer's own word, on the board).
        receipt["disk_full"] = (ctx.board.snapshot(Section.WRITER) or {}).get("disk_full")
        ctx.reply("accepted", receipt=receipt)

    ctx.in_executor(status)


@operation("state.verify", read_only=True)
def state_verify(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    ctx.in_executor(lambda: ctx.reply("accepted", receipt=state_report.verify(ctx.env.database, time.time())))


def _destination(request: Request, payload: dict[str, Any]) -> str:
    destination = payload["destination"]
    if not os.path.isabs(destination):
        raise BadRequest("state.backup: destination must be an absolute path", request.request_id)
    return str(destination)


def _backup(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The destination is checked here (a bad one is answered at once); the copy is made off-thread."""
    _destination(ctx.request, payload)
    ctx.write_from_executor(lambda: ctx.build(payload))


@write_operation("state.backup", payload={"destination": ("str", True)}, handler=_backup)
def state_backup(env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    """Copies the database unless the request is on record already (this reads and writes files)."""
    destination = _destination(request, payload)
    args = client_args(request)
    if lookup_recorded(env.database, "state.backup", args) is None:
        try:
            args["receipt"] = backup.backup(env.database, destination)
        except PiwfError as err:
            if not recordable(err.code):
                raise
            args["refusal"] = {"code": err.code, "message": err.one_line()}
    return WriteCommand("state.backup", args)


@write_operation("state.prune", payload={"before": ("num", True), "apply": ("bool", False),
                                         "idempotency_before": ("num", False)}, recorded_if="apply")
def state_prune(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    # A dry run changes nothing, so it is not recorded (recorded_if="apply": client_args leaves the key out).
    args = {**client_args(request), "before": float(payload["before"]), "apply": bool(payload.get("apply", False))}
    if payload.get("idempotency_before") is not None:
        args["idempotency_before"] = float(payload["idempotency_before"])
    return WriteCommand("state.prune", args)
