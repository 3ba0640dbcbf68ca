"""Payload checks per operation: required and optional fields with their types.

A field spec is (type name, required). Unknown fields are refused so a
typo never silently means "not given".
"""

from __future__ import annotations

import re
from typing import Any

from piwf_actors.protocol.envelope import BadRequest, Request, is_int, non_finite_path

Spec = dict[str, tuple[str, bool]]

#: A run id a client chooses must be one the envelope can carry back.
RUN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

#: Operations that change durable state: recorded by (client id, idempotency key).
MUTATING = frozenset({
    "run.start", "run.cancel", "run.pause", "run.resume", "run.restart", "effect.resolve", "state.prune",
    "checkpoint.answer", "decision.answer", "interaction.submit", "interaction.ack", "channel.recover",
})

PAYLOADS: dict[str, Spec] = {
    "host.status": {},
    "host.stop": {},
    "run.start": {"workflow": ("str", True), "input": ("any", False), "project_path": ("str", False),
                  "session_id": ("str", False), "run_id": ("str", False)},
    "run.list": {"status": ("str", False), "limit": ("int", False), "workflow": ("str", False),
                 "since": ("num", False)},
    "run.get": {},
    "run.events": {"after": ("int", False), "limit": ("int", False)},
    "run.cancel": {},
    "run.pause": {},
    "run.resume": {},
    "run.restart": {"from_node": ("str", False), "same_code": ("bool", False)},
    "effect.resolve": {"effect_id": ("str", True), "action": ("str", True), "output": ("any", False)},
    "watch": {"subscription_id": ("str", True), "topic": ("str", True), "run_id": ("str", False),
              "session_id": ("str", False)},
    "unwatch": {"subscription_id": ("str", True)},
    "state.status": {},
    "state.verify": {},
    "state.backup": {"destination": ("str", True)},
    "state.prune": {"before": ("num", True), "apply": ("bool", False), "idempotency_before": ("num", False)},
    "content.read": {"digest": ("str", True), "offset": ("int", False), "length": ("int", False)},
    "ids.match": {"kind": ("str", True), "prefix": ("str", True), "limit": ("int", False)},
    "channel.status": {},
    "channel.reload": {},
    "channel.recover": {"profile": ("str", True), "message_id": ("str", True), "action": ("str", True)},
    "interaction.list": {"session_id": ("str", False)},
    "checkpoint.answer": {"request_id": ("str", True), "submission_id": ("str", False), "input": ("any", False),
                          "session_id": ("str", False)},
    "decision.answer": {"request_id": ("str", True), "submission_id": ("str", False), "response": ("map", True),
                        "session_id": ("str", False)},
    "interaction.submit": {"request_id": ("str", True), "submission_id": ("str", False),
                           "session_id": ("str", False), "value": ("any", False)},
    "interaction.ack": {"message_id": ("str", True)},
}

#: Operations that need `run_id` in the envelope.
NEEDS_RUN = frozenset({"run.get", "run.events", "run.cancel", "run.pause", "run.resume", "run.restart"})

_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": is_int,
    "num": lambda v: (is_int(v) or isinstance(v, float)),
    "bool": lambda v: isinstance(v, bool),
    "any": lambda v: True,
    "map": lambda v: isinstance(v, dict),
}


def check_payload(request: Request, spec: Spec) -> dict[str, Any]:
    payload = request.payload
    extra = sorted(set(payload) - set(spec))
    if extra:
        raise BadRequest(f"{request.operation}: unknown payload field(s): {', '.join(extra)}", request.request_id)
    for name, (kind, required) in spec.items():
        if name not in payload or payload[name] is None:
            if required:
                raise BadRequest(f"{request.operation}: payload.{name} is required", request.request_id)
            continue
        if not _CHECKS[kind](payload[name]):
            raise BadRequest(f"{request.operation}: payload.{name} must be of type {kind}", request.request_id)
        if kind == "int" and not (0 <= payload[name] <= 2**53):
            raise BadRequest(f"{request.operation}: payload.{name} is out of range", request.request_id)
    run_id = payload.get("run_id")
    if isinstance(run_id, str) and not RUN_ID.fullmatch(run_id):
        raise BadRequest(f"{request.operation}: payload.run_id must be 1-200 characters of letters, digits "
                         "and _.:-", request.request_id)
    bad_float = non_finite_path(payload)
    if bad_float is not None:
        raise BadRequest(f"{request.operation}: {bad_float} is NaN or infinite, which cannot be stored",
                         request.request_id)
    if request.operation in NEEDS_RUN and request.run_id is None:
        raise BadRequest(f"{request.operation} needs run_id in the request envelope", request.request_id)
    if request.operation == "run.restart" and request.expected_revision is None:
        raise BadRequest("run.restart needs expected_revision in the request envelope", request.request_id)
    return payload
