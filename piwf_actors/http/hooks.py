"""`POST /hooks/NAME`: a signed webhook, turned into the same `run.start` or `message.send` the socket makes.

No bearer token: the signature is the authentication. A delivery is taken in
this order, each step one refusal line (`{"error": …}`) and, from the
signature on, one log line without the secret or the signature's value:

1. the hook exists (404), the raw body is within the door's bound (413);
2. the signature is an HMAC-SHA256 of the raw body under the hook's secret
   (GitHub: `X-Hub-Signature-256: sha256=<hex>`; Stripe: `Stripe-Signature:
   t=<unix time>,v1=<hex>` over `"<t>.<body>"`, `t` within the tolerance),
   compared in constant time (401 when missing or wrong);
3. the body is JSON (400), the delivery id is there (400);
4. the request goes to the gateway under client id `hook-NAME` with the
   delivery id as its idempotency key, and peer `via: http`, `hook:NAME`:
   a redelivery (the same id and body) is `adopted` with the first receipt
   (200), the same id with another body is a `conflict` (409, logged as a
   replay). The idempotency records are the operations' own.

Everything here runs on the door's event-loop thread and runs no workflow
code: the gateway resolves the workflow on its user-code threads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from piwf_actors.http.answers import Answer, error
from piwf_actors.http.hook_config import Hook
from piwf_actors.http.routes import STATUS_OF_OUTCOME
from piwf_actors.protocol.doors import DoorPeer
from piwf_actors.protocol.envelope import MAX_ID_LEN, SCHEMA, one_line

log = logging.getLogger("piwf_actors.actors.http_door")

Ask = Callable[[dict[str, Any], DoorPeer], Awaitable[dict[str, Any]]]


class BodyTooLarge(Exception):
    """The request's body is over the door's bound: answered 413."""


class BodyCutOff(Exception):
    """The client went away (or the server gave up on its framing) before the body ended: answered 400,
    a client's mistake, not a host bug (the answer is seldom read: the connection is closing)."""


async def read_raw(request: Request, limit: int) -> bytes:
    """The request's body, at most `limit` bytes (BodyTooLarge past it: neither a Content-Length over the
    bound nor a longer stream is read to its end; BodyCutOff when it never ends)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise BodyTooLarge(f"the body is over {limit} bytes" if length.isdigit() else "bad Content-Length")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"the body is over {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise BodyCutOff(f"the connection closed after {size} bytes of the body, before its end") from None
    return b"".join(chunks)


def _digest(secret: str, message: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest().encode("ascii")


def _same(expected: bytes, given: str) -> bool:
    """Constant-time comparison of hex digests (a given value that is not ASCII never matches)."""
    return hmac.compare_digest(expected, given.strip().lower().encode("ascii", "replace"))


def signature_refusal(hook: Hook, headers: Mapping[str, str], raw: bytes, now: float) -> str | None:
    """Why the delivery's signature does not hold (one line naming no secret), or None when it does."""
    value = headers.get(hook.signature_header.lower())
    if not value:
        return f"no {hook.signature_header} header: the delivery is not signed"
    secret = hook.secret.reveal()
    if hook.signature == "stripe":
        return _stripe_refusal(hook, value, secret, raw, now)
    if not value.startswith(hook.signature_prefix):
        return f"{hook.signature_header} does not start with {hook.signature_prefix!r}"
    if not _same(_digest(secret, raw), value[len(hook.signature_prefix):]):
        return f"{hook.signature_header} does not match the body"
    return None


def _stripe_refusal(hook: Hook, value: str, secret: str, raw: bytes, now: float) -> str | None:
    """Stripe's form: `t=<timestamp>,v1=<hex>[,v1=<hex>…]`, the HMAC of `"<t>." + body`; any v1 may match
    (Stripe sends one per live secret while a secret is rolled)."""
    timestamp, candidates = None, []
    for part in value.split(","):
        key, _, item = part.strip().partition("=")
        if key == "t":
            timestamp = item
        elif key == "v1":
            candidates.append(item)
    if timestamp is None or not timestamp.isdigit() or not candidates:
        return f"{hook.signature_header} needs t=<unix time> and v1=<hex>"
    if abs(now - int(timestamp)) > hook.tolerance_s:
        return f"{hook.signature_header}'s timestamp is more than {hook.tolerance_s:g} s from the host's clock"
    expected = _digest(secret, timestamp.encode("ascii") + b"." + raw)
    matched = False
    for candidate in candidates:  # every candidate is compared: the time taken says nothing of which matched
        matched |= _same(expected, candidate)
    return None if matched else f"{hook.signature_header} does not match the body"


def delivery_id(hook: Hook, headers: Mapping[str, str], body: Any) -> str | None:
    """The delivery's id (its idempotency key), from the header or the body's field the hook names."""
    found: Any = None
    if hook.delivery_header is not None:
        found = headers.get(hook.delivery_header.lower())
    elif hook.delivery_field is not None and isinstance(body, dict):
        found = body.get(hook.delivery_field)
    if isinstance(found, int) and not isinstance(found, bool):
        found = str(found)
    if not isinstance(found, str) or not found.strip() or len(found) > MAX_ID_LEN or not found.isprintable():
        return None
    return found


def _field(body: Any, path: str) -> Any:
    """The value at a dotted path of the body (`pull_request.head.ref`), or None."""
    for part in path.split("."):
        if not isinstance(body, dict):
            return None
        body = body.get(part)
    return body


def hook_call(hook: Hook, body: Any) -> tuple[str, dict[str, Any]] | str:
    """(operation, payload) of a delivery, or the one-line reason it has none."""
    if hook.workflow is not None:
        payload = {"workflow": hook.workflow, "input": body}
        if hook.project_path is not None:
            payload["project_path"] = hook.project_path
        return "run.start", payload
    assert hook.run_field is not None and hook.topic is not None
    run_id = _field(body, hook.run_field)
    if not isinstance(run_id, str) or not run_id:
        return f"the body has no {hook.run_field} (a run id) to send the message to"
    return "message.send", {"run_id": run_id, "topic": hook.topic, "payload": body}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number this host stores")


class HookEndpoint:
    """The `POST /hooks/{name}` handler over the door's hooks; `ask` hands a request frame to the gateway."""

    def __init__(self, hooks: Mapping[str, Hook], ask: Ask, max_body_bytes: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._hooks = dict(hooks)
        self._ask = ask
        self._limit = max_body_bytes
        self._clock = clock

    async def handle(self, request: Request) -> Response:
        """One delivery (a bound method: Starlette calls it with the request)."""
        try:
            return await self._deliver(request)
        except Exception:  # a door bug costs its one delivery, answered in one line; the log has it
            log.exception("POST %s failed on a host bug", request.url.path)
            return error(500, "the hook failed on a host bug (see the host's log)")

    async def _deliver(self, request: Request) -> Response:
        name = request.path_params["name"]
        hook = self._hooks.get(name)
        if hook is None:
            return error(404, f"no hook {name!r} (declare it in the state directory's hooks.toml)"[:300])
        remote = request.client.host if request.client else "unknown"
        try:
            raw = await read_raw(request, self._limit)
        except BodyTooLarge as big:
            return error(413, str(big))
        except BodyCutOff as cut:
            return error(400, str(cut))
        refusal = signature_refusal(hook, request.headers, raw, self._clock())
        if refusal is not None:
            log.warning("hook %s: refused a delivery from %s: %s", name, remote, refusal)
            return error(401, refusal)
        try:
            body = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            return error(400, f"the body is not JSON: {type(exc).__name__}: {exc}"[:300])
        delivery = delivery_id(hook, request.headers, body)
        if delivery is None:
            where = (f"header {hook.delivery_header}" if hook.delivery_header is not None
                     else f"field {hook.delivery_field} of the body")
            return error(400, f"no delivery id ({where}: printable, at most {MAX_ID_LEN} characters)")
        call = hook_call(hook, body)
        if isinstance(call, str):
            return Answer({"outcome": "rejected", "error": call}, 422)
        operation, payload = call
        frame = {"schema": SCHEMA, "type": "request", "request_id": delivery, "client_id": hook.client_id,
                 "idempotency_key": delivery, "operation": operation, "payload": payload}
        answer = await self._ask(frame, DoorPeer("http", f"hook:{name}", remote))
        outcome = answer["outcome"]
        if outcome == "conflict":
            log.warning("hook %s: refused delivery %r from %s: a replay (that delivery id came before with "
                        "another body)", name, delivery, remote)
        elif outcome in ("accepted", "adopted"):
            log.info("hook %s: delivery %r %s (%s)", name, delivery, outcome, operation)
        else:
            log.info("hook %s: delivery %r %s: %s", name, delivery, outcome, one_line(answer.get("error", ""))[:300])
        content = {key: answer[key] for key in ("outcome", "receipt", "revision", "error") if key in answer}
        return Answer(content, _status(operation, outcome))


def _status(operation: str, outcome: str) -> int:
    if outcome == "accepted" and operation == "run.start":
        return 201
    return STATUS_OF_OUTCOME.get(outcome, 500)
