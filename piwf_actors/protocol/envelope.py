"""Client protocol v1 envelopes (see docs/protocol.md).

A request is validated here, field by field, before anything acts on it;
every problem becomes one `BadRequest` with a one-line message, answered
with outcome `rejected` on a connection that stays open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piwf_actors import __version__
from piwf_actors.wire import pack

SCHEMA = "piwf.client.v1"
VERSION = __version__  # the implementation's version, told in `hello`
OUTCOMES = ("accepted", "adopted", "rejected", "conflict", "notFound", "unavailable", "claimLost")
MAX_ID_LEN = 200
MAX_ERROR_LEN = 1000

_ENVELOPE_KEYS = {"schema", "type", "request_id", "client_id", "idempotency_key", "operation", "run_id",
                  "expected_revision", "payload"}
_REQUIRED = ("schema", "type", "request_id", "client_id", "idempotency_key", "operation", "payload")


class BadRequest(Exception):
    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Request:
    """A client's request as `parse_request` found it (or as the embedding API builds it for its own
    calls, where `client_id` and `idempotency_key` are None when the caller gave none: not recorded)."""

    request_id: str
    client_id: str | None
    idempotency_key: str | None
    operation: str
    payload: dict[str, Any]
    run_id: str | None = None
    expected_revision: int | None = None
    #: The sending process as the kernel names it ({pid, uid} at connect), set by the gateway, not
    #: by the client: recorded with answers and submissions (docs/security.md). The embedding API's
    #: calls name their own process ({via: embedded, pid, uid}).
    peer: dict[str, Any] | None = None


def _id(value: Any, name: str, request_id: str | None) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LEN:
        raise BadRequest(f"{name} must be a non-empty string of at most {MAX_ID_LEN} characters", request_id)
    if "\x00" in value:  # PostgreSQL text cannot hold NUL: refused here, not as a failed query
        raise BadRequest(f"{name} may not contain a NUL character", request_id)
    return value


def is_int(value: Any) -> bool:
    """An integer that is not a bool (msgpack's bool would pass isinstance(int))."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_request(frame: dict[str, Any]) -> Request:
    raw_id = frame.get("request_id")
    request_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= MAX_ID_LEN else None
    if frame.get("schema") != SCHEMA:
        raise BadRequest(f"schema must be {SCHEMA!r}", request_id)
    if frame.get("type") != "request":
        raise BadRequest("type must be 'request'", request_id)
    missing = [key for key in _REQUIRED if key not in frame]
    if missing:
        raise BadRequest(f"missing field(s): {', '.join(missing)}", request_id)
    extra = sorted(set(frame) - _ENVELOPE_KEYS)
    if extra:
        raise BadRequest(f"unknown field(s): {', '.join(extra)}", request_id)
    request_id = _id(frame["request_id"], "request_id", request_id)
    client_id = _id(frame["client_id"], "client_id", request_id)
    key = _id(frame["idempotency_key"], "idempotency_key", request_id)
    operation = _id(frame["operation"], "operation", request_id)
    payload = frame["payload"]
    if not isinstance(payload, dict):
        raise BadRequest("payload must be a map", request_id)
    run_id = frame.get("run_id")
    if run_id is not None:
        run_id = _id(run_id, "run_id", request_id)
    revision = frame.get("expected_revision")
    if revision is not None and (not is_int(revision) or revision < 0 or revision > 2**53):
        raise BadRequest("expected_revision must be a non-negative integer", request_id)
    return Request(request_id, client_id, key, operation, payload, run_id, revision)


def non_finite_path(value: Any, path: str = "payload", depth: int = 0) -> str | None:
    """Where `value` holds NaN or ±Infinity (valid msgpack floats that JSON, and so the store, cannot hold)."""
    if isinstance(value, float):
        return None if value == value and value not in (float("inf"), float("-inf")) else path
    if depth > 40:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_path(item, f"{path}.{key}", depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = non_finite_path(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
    return None


def one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_LEN else line[: MAX_ERROR_LEN - 1] + "…"


def response(request_id: str | None, outcome: str, *, receipt: Any = None, revision: int | None = None,
             error: str | None = None) -> dict[str, Any]:
    assert outcome in OUTCOMES, outcome
    frame: dict[str, Any] = {"schema": SCHEMA, "type": "response", "request_id": request_id, "outcome": outcome}
    if revision is not None:
        frame["revision"] = revision
    if receipt is not None:
        frame["receipt"] = receipt
    if error is not None:
        frame["error"] = one_line(error)
    return frame


def hello(connection_id: str, host_epoch: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "type": "hello", "connection_id": connection_id, "version": VERSION,
            "host_epoch": host_epoch}


def event(subscription_id: str, topic: str, revision: int, payload: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "type": "event", "subscription_id": subscription_id, "topic": topic,
            "revision": revision, "payload": payload}


_EVENT_HEAD = b"".join((b"\x86", pack("schema"), pack(SCHEMA), pack("type"), pack("event"), pack("subscription_id")))
_TOPIC, _REVISION, _PAYLOAD = pack("topic"), pack("revision"), pack("payload")


def event_head(subscription_id: str, topic: str) -> bytes:
    """The packed start of every event of one subscription, up to its revision."""
    return b"".join((_EVENT_HEAD, pack(subscription_id), _TOPIC, pack(topic), _REVISION))


def event_body(head: bytes, revision: int, payload: bytes) -> bytes:
    """`event(...)` packed, from the subscription's `event_head` and a payload packed already: a view
    is packed once however many watches get it. The same bytes as packing the whole map."""
    return b"".join((head, pack(revision), _PAYLOAD, payload))
