"""Client command records (`host_command`): what one (client id, idempotency key) was answered.

A record holds the request's fingerprint and its outcome: `accepted` or `adopted` with a receipt,
or a refusal (`rejected`, `conflict`, `notFound`) with its error code and one-line message. The
writer's `recorded` (store/commands/idempotency.py) reads and writes them inside a command's
transaction; `lookup_recorded` reads them from a snapshot, for work done outside the writer before
its command is sent (a backup file: `state.backup`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piwf_actors.canonical import fingerprint, loads
from piwf_actors.errors import Conflict, outcome_for
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.engines.base import Connection
from piwf_actors.store.reader import StoreReader

#: The outcomes of refusals that are recorded: they follow from the request and the state it met, so
#: a replay must meet the same answer. `unavailable` and `claimLost` are never recorded: nothing was
#: decided, and the sender is meant to send again.
RECORDED_REFUSALS = frozenset({"rejected", "conflict", "notFound"})


@dataclass(frozen=True, slots=True)
class RecordedRefusal:
    """A command's answer that is a refusal kept on record: the writer commits the command's writes
    (the record) and answers its sender with this error, as it would a refusal that wrote nothing."""

    code: str
    message: str

    @property
    def outcome(self) -> str:
        return outcome_for(self.code)

    def receipt(self) -> dict[str, Any]:
        return {"error_code": self.code, "error": self.message}


def recordable(code: str | None) -> bool:
    """Whether a refusal with this error code is recorded under the request's idempotency key."""
    return outcome_for(code) in RECORDED_REFUSALS


def request_fingerprint(operation: str, run_id: str | None, expected_revision: int | None, payload: Any) -> str:
    return fingerprint({"operation": operation, "run_id": run_id, "expected_revision": expected_revision,
                        "payload": payload})


_FIND = ("SELECT idempotency_key, fingerprint, receipt, revision, outcome FROM host_command "
         "WHERE client_id = ? AND (idempotency_key = ? OR request_id = ?)")
#: The record of a client command (idempotency.py holds it back in a write batch: one insert for the batch's).
RECORD = """INSERT INTO host_command (client_id, idempotency_key, request_id, operation, run_id, fingerprint,
               outcome, revision, receipt, host_epoch, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def find_recorded(conn: Connection, client_id: str, key: str, request_id: str,
                  print_: str) -> dict[str, Any] | RecordedRefusal | None:
    """The recorded answer to this request: {outcome: adopted, receipt, revision}, the recorded
    refusal, or None if it was never seen. Raises Conflict when the key — or the request id under
    another key — was used for another request. One read for both ways a request can have been seen."""
    by_key = clash = None
    params = (client_id, key, request_id)
    if isinstance(conn, BatchConnection):
        # The records this batch holds back (idempotency.py) are looked up in memory, the rest read.
        held = {conn.held_row("host_command", ("key", client_id, key)),
                 conn.held_row("host_command", ("request", client_id, request_id))} - {None}
        rows = [*conn.execute_beside(_FIND, params, tables=("host_command",)).fetchall(),
                *((r[1], r[5], r[8], r[7], r[6]) for r in held if r is not None)]
    else:
        rows = conn.execute(_FIND, params).fetchall()
    for idempotency_key, *row in rows:
        if idempotency_key == key:
            by_key = row
        else:
            clash = row
    if by_key is not None:
        if by_key[0] != print_:
            raise Conflict(f"idempotency key {key} was already used for a different request")
        return _answer(by_key)
    if clash is not None:
        if clash[0] == print_:  # the same request resent under a new key: still the same request
            return _answer(clash)
        raise Conflict(f"request id {request_id} was already used for a different request")
    return None


def _answer(row: list[Any]) -> dict[str, Any] | RecordedRefusal:
    _print, receipt_json, revision, outcome = row
    receipt = loads(receipt_json)
    if outcome in RECORDED_REFUSALS:
        return RecordedRefusal(str(receipt.get("error_code") or "rejected"), str(receipt.get("error") or "refused"))
    return {"outcome": "adopted", "receipt": receipt, "revision": revision}


def args_fingerprint(operation: str, args: dict[str, Any]) -> str:
    """The fingerprint of a command's request, from its args (`payload_for_fingerprint` when the
    command carries what the host resolved besides what the client sent)."""
    return request_fingerprint(operation, args.get("run_id"), args.get("expected_revision"),
                               args.get("payload_for_fingerprint", args.get("payload")))


def lookup_recorded(database: DatabaseLocation, operation: str,
                    args: dict[str, Any]) -> dict[str, Any] | RecordedRefusal | None:
    """The recorded answer to a command's request (as `find_recorded`), read through a read-only
    connection of its own (for the host's executor threads, which hold no reader); None for a
    request that is not recorded (no client id and key) or was never seen."""
    client_id, key = args.get("client_id"), args.get("idempotency_key")
    if not client_id or not key:
        return None
    reader = StoreReader(database)
    try:
        with reader.snapshot():
            return find_recorded(reader.conn, client_id, key, args.get("client_request_id") or key,
                                 args_fingerprint(operation, args))
    finally:
        reader.close()
