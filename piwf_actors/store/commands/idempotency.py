"""Client command idempotency: (client id, idempotency key) → one recorded outcome.

A mutating client command carries `client_id`, `idempotency_key` and
`client_request_id` (the protocol's request id). The first time, it runs and
its outcome is stored in the same transaction as its effect — a receipt, or
a refusal (`rejected`, `conflict`, `notFound`: see
`command_records.RECORDED_REFUSALS`). A replay with the same fingerprint
returns the stored outcome: `adopted` with the receipt, or the same refusal;
the same key — or the same request id — with another fingerprint is a
`conflict`. So a client that resends after a lost answer meets the answer it
lost, whatever happened since. Refusals that decide nothing (`unavailable`:
a stopping host, a full disk; `claimLost`) are never recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import PiwfError
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.command_records import (
    RECORD,
    RecordedRefusal,
    args_fingerprint,
    find_recorded,
    recordable,
)
from piwf_actors.store.commands.registry import NeedsSavepoints, WriteContext
from piwf_actors.store.requests import error_from_code

#: What a recorded command answers: {outcome, receipt, revision}, or the refusal the writer answers with.
Recorded = dict[str, Any] | RecordedRefusal


@dataclass(frozen=True, slots=True)
class Adopted:
    """What `apply` returns when the request's effect already happened under another key
    (a second restart of one run revision): answered `adopted` with the first receipt."""

    receipt: dict[str, Any]


def _outcome(result: dict[str, Any] | Adopted) -> tuple[str, dict[str, Any]]:
    return ("adopted", result.receipt) if isinstance(result, Adopted) else ("accepted", result)


def refusal_in(args: dict[str, Any]) -> None:
    """Raise the refusal the host decided before the command reached the writer (`args.refusal`:
    {code, message}, e.g. a workflow that did not resolve), so that it is recorded like any other."""
    refusal = args.get("refusal")
    if refusal:
        raise error_from_code(str(refusal.get("code") or "rejected"), str(refusal.get("message") or "refused"))


def recorded(ctx: WriteContext, args: dict[str, Any],
             apply: Callable[[], dict[str, Any] | Adopted]) -> Recorded:
    """Run `apply` once per (client id, idempotency key); returns {outcome, receipt, revision}, or the
    `RecordedRefusal` the writer answers with (after committing its record).

    The record is kept under the running command's name (`ctx.command`, which the batch sets from
    the registry): the same name `command_records.lookup_recorded` is asked with from outside the
    writer. Without a client id and key the command simply runs (embedding callers that do not need
    replay safety) and a refusal is raised as it is. `apply` may return `Adopted(receipt)` when its
    effect happened before under another key.
    """
    client_id, key = args.get("client_id"), args.get("idempotency_key")
    if not client_id or not key:
        outcome, receipt = _outcome(apply())
        return {"outcome": outcome, "receipt": receipt, "revision": receipt.get("revision")}
    operation = ctx.command
    if not operation:
        # Only a context built outside the batch lacks it; recording under "" would make every
        # such record collide with every other.
        raise ValueError("recorded() runs inside a registered command (ctx.command is not set)")
    print_ = args_fingerprint(operation, args)
    request_id = args.get("client_request_id") or key
    seen = find_recorded(ctx.conn, client_id, key, request_id, print_)
    if seen is not None:
        return seen
    try:
        result = _undone_on_refusal(ctx, apply)
    except PiwfError as err:
        if not recordable(err.code):
            raise
        refusal = RecordedRefusal(err.code, err.one_line())
        _record(ctx, args, operation, client_id, key, request_id, print_, refusal.outcome, refusal.receipt(), None)
        return refusal
    outcome, receipt = _outcome(result)
    _record(ctx, args, operation, client_id, key, request_id, print_, outcome, receipt, receipt.get("revision"))
    return {"outcome": outcome, "receipt": receipt, "revision": receipt.get("revision")}


def _undone_on_refusal(ctx: WriteContext, apply: Callable[[], dict[str, Any] | Adopted]) -> dict[str, Any] | Adopted:
    """`apply()`, with whatever it wrote undone if it refuses (the record of the refusal stays)."""
    if ctx.savepoints:
        ctx.conn.execute("SAVEPOINT recorded")
        try:
            result = apply()
        except PiwfError:
            ctx.conn.execute("ROLLBACK TO recorded")
            ctx.conn.execute("RELEASE recorded")
            raise
        ctx.conn.execute("RELEASE recorded")
        return result
    before = ctx.conn.total_changes
    try:
        return apply()
    except PiwfError as err:
        if ctx.conn.total_changes != before:
            # It wrote before refusing: the batch runs again with savepoints, where this is undone.
            raise NeedsSavepoints() from err
        raise


def _record(ctx: WriteContext, args: dict[str, Any], operation: str, client_id: str, key: str, request_id: str,
            print_: str, outcome: str, receipt: dict[str, Any], revision: Any) -> None:
    row = (client_id, key, request_id, operation, receipt.get("run_id", args.get("run_id")), print_, outcome,
           revision, canonical_json(receipt), ctx.host_epoch, ctx.now)
    if isinstance(ctx.conn, BatchConnection):
        # Inserted with the batch's other records; a resend in the batch finds it (find_recorded).
        ctx.conn.hold_insert("host_command", RECORD, row, keys=(("key", client_id, key), ("request", client_id, request_id)))
    else:
        ctx.conn.execute(RECORD, row)
