"""Client command idempotency: (client id, idempotency key) → one recorded outcome.

A mutating client command carries `client_id`, `idempotency_key` and
`client_request_id` (the protocol's request id). The first time, it runs
and its receipt is stored in the same transaction as its effect. A replay with the same fingerprint returns the
stored receipt with outcome `adopted`; the same key — or the same request
id — with another fingerprint is a `conflict`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.canonical import canonical_json, fingerprint, loads
from piwf_actors.errors import Conflict
from piwf_actors.store.commands.registry import WriteContext


@dataclass(frozen=True, slots=True)
class Adopted:
    """What `apply` returns when the request's effect already happened under another key
    (a second restart of one run revision): answered `adopted` with the first receipt."""

    receipt: dict[str, Any]


def request_fingerprint(operation: str, run_id: str | None, expected_revision: int | None, payload: Any) -> str:
    return fingerprint({"operation": operation, "run_id": run_id, "expected_revision": expected_revision,
                        "payload": payload})


def _outcome(result: dict[str, Any] | Adopted) -> tuple[str, dict[str, Any]]:
    return ("adopted", result.receipt) if isinstance(result, Adopted) else ("accepted", result)


def recorded(ctx: WriteContext, args: dict[str, Any], operation: str,
             apply: Callable[[], dict[str, Any] | Adopted]) -> dict[str, Any]:
    """Run `apply` once per (client id, idempotency key); returns {outcome, receipt, revision?}.

    Without a client id and key the command simply runs (embedding callers
    that do not need replay safety). `apply` may return `Adopted(receipt)`
    when its effect happened before under another key.
    """
    client_id, key = args.get("client_id"), args.get("idempotency_key")
    if not client_id or not key:
        outcome, receipt = _outcome(apply())
        return {"outcome": outcome, "receipt": receipt, "revision": receipt.get("revision")}
    print_ = request_fingerprint(operation, args.get("run_id"), args.get("expected_revision"),
                                 args.get("payload_for_fingerprint", args.get("payload")))
    request_id = args.get("client_request_id") or key
    # One read for both ways a request can have been seen: by its key, or by its request id.
    by_key = clash = None
    for idempotency_key, *row in ctx.conn.execute(
            "SELECT idempotency_key, fingerprint, receipt, revision FROM host_command "
            "WHERE client_id = ? AND (idempotency_key = ? OR request_id = ?)", (client_id, key, request_id)):
        if idempotency_key == key:
            by_key = row
        else:
            clash = row
    if by_key is not None:
        if by_key[0] != print_:
            raise Conflict(f"idempotency key {key} was already used for a different request")
        return {"outcome": "adopted", "receipt": loads(by_key[1]), "revision": by_key[2]}
    if clash is not None:
        if clash[0] == print_:  # the same request resent under a new key: still the same request
            return {"outcome": "adopted", "receipt": loads(clash[1]), "revision": clash[2]}
        raise Conflict(f"request id {request_id} was already used for a different request")
    outcome, receipt = _outcome(apply())
    ctx.conn.execute(
        """INSERT INTO host_command (client_id, idempotency_key, request_id, operation, run_id, fingerprint,
               outcome, revision, receipt, host_epoch, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (client_id, key, request_id, operation, receipt.get("run_id", args.get("run_id")), print_, outcome,
         receipt.get("revision"), canonical_json(receipt), ctx.host_epoch, ctx.now))
    return {"outcome": outcome, "receipt": receipt, "revision": receipt.get("revision")}
