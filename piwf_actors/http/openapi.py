"""The OpenAPI 3.1 description of the HTTP door, generated from the routes table.

Each route's body and query fields are read from the operation's entry in
the catalog (`protocol.catalog.OPERATIONS`), the same entry that checks
the payload: a field added to an operation appears here with no other
change. Besides the table, the door serves this description and the signed
webhooks (`http/hooks.py`, `hook_config.HOOK_PATH`), both described here too, so every
path the router serves but the console's pages is in it (tests/http/test_openapi.py).
Pure: a function of the table.
"""

from __future__ import annotations

from typing import Any

from piwf_actors import __version__
from piwf_actors.http.hook_config import HOOK_PATH, SCHEME_DEFAULTS
from piwf_actors.http.routes import OPENAPI_PATH, ROUTES, STATUS_OF_OUTCOME, Route
from piwf_actors.protocol.catalog import OPERATIONS

_JSON_TYPES: dict[str, dict[str, Any]] = {"str": {"type": "string"}, "int": {"type": "integer", "minimum": 0}, "signed": {"type": "integer"},
               "num": {"type": "number"}, "bool": {"type": "boolean"}, "map": {"type": "object"}, "any": {}}
_QUERY_TYPES = {"str": {"type": "string"}, "int": {"type": "integer"}, "num": {"type": "number"},
                "bool": {"type": "boolean"}}

_ANSWER = {"type": "object", "required": ["outcome"], "properties": {
    "outcome": {"enum": ["accepted", "adopted", "rejected", "conflict", "notFound", "unavailable", "claimLost"]},
    "receipt": {"description": "what the operation answers (docs/protocol.md)"},
    "revision": {"type": "integer"},
    "error": {"type": "string", "description": "one line, at most 1,000 characters"}}}
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}


def _body_schema(route: Route) -> dict[str, Any]:
    if route.body_schema is not None:
        return dict(route.body_schema)
    spec = OPERATIONS[route.operation].payload
    taken = set(route.path_params) | set(route.query)
    properties = {name: dict(_JSON_TYPES[kind]) for name, (kind, _required) in spec.items() if name not in taken}
    required = [name for name, (_kind, needed) in spec.items() if needed and name not in taken]
    operation = OPERATIONS[route.operation]
    if operation.needs_run or operation.needs_revision or operation.name.startswith(("decision.", "run.")):
        properties["expected_revision"] = {"type": "integer", "minimum": 0}
        if operation.needs_revision:
            required.append("expected_revision")
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _operation(route: Route) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in route.path_params]
    parameters += [{"name": name, "in": "query", "required": False, "schema": dict(_QUERY_TYPES[kind])}
                   for name, kind in route.query.items()]
    if route.body:
        parameters.append({"name": "Idempotency-Key", "in": "header", "required": False,
                           "schema": {"type": "string", "maxLength": 200},
                           "description": "the same key (and client id) makes a retry adopt the first answer"})
    entry: dict[str, Any] = {
        "operationId": f"{route.method.lower()}_{route.path.removeprefix('/api/v1/').replace('/', '_')}"
                       .replace("{", "").replace("}", ""),
        "summary": route.summary, "x-piwf-operation": route.operation, "x-piwf-role": route.role,
        "parameters": parameters, "security": [{"bearer": []}]}
    if route.body:
        entry["requestBody"] = {"required": False, "content": {"application/json": {"schema": _body_schema(route)}}}
    if route.stream is not None:
        entry["responses"] = {"200": {"description": f"Server-Sent Events of the {route.stream} view",
                                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}}
    else:
        statuses = sorted({201 if route.created else 200, *STATUS_OF_OUTCOME.values()})
        entry["responses"] = {str(status): {"description": _DESCRIPTIONS.get(status, "the outcome"),
                                            "content": {"application/json": {"schema": _ANSWER}}}
                              for status in statuses}
    entry["responses"].update({str(status): {"description": text, "content": {"application/json": {
        "schema": _ERROR}}} for status, text in _DOOR_ERRORS.items()})
    return entry


_DESCRIPTIONS = {200: "accepted or adopted", 201: "accepted: a new run", 404: "notFound", 409: "conflict",
                 422: "rejected", 503: "unavailable (a standby answers every write so)"}
_DOOR_ERRORS = {400: "a body that is not a JSON object", 401: "no token, or an unknown or revoked one",
                403: "a viewer's token on an operator's route", 413: "a body over the limit",
                431: "headers over the limit"}


def _hook() -> dict[str, Any]:
    """`POST /hooks/{name}`: no bearer token; the signature headers of each convention (a hook may rename
    them in hooks.toml); the body is any JSON; the answer is the run.start or message.send outcome."""
    headers = sorted({settings[key] for settings in SCHEME_DEFAULTS.values()
                      for key in ("signature_header", "delivery_header") if settings[key] is not None})
    parameters: list[dict[str, Any]] = [{"name": "name", "in": "path", "required": True,
                                         "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"},
                                         "description": "a hook declared in the state directory's hooks.toml"}]
    parameters += [{"name": header, "in": "header", "required": False, "schema": {"type": "string"},
                    "description": "the signature or delivery id, as the hook's convention names it"}
                   for header in headers]
    outcome = {"content": {"application/json": {"schema": _ANSWER}}}
    responses: dict[str, Any] = {
        "200": {"description": "adopted: a redelivery of a delivery id taken before", **outcome},
        "201": {"description": "accepted: a run started (a message hook answers 200)", **outcome},
        "409": {"description": "conflict: the delivery id came before with another body (a replay)", **outcome},
        "422": {"description": "rejected (the body names no run to send the message to, a bad input)", **outcome},
        "404": {"description": "no such hook, or the message's run is unknown",
                "content": {"application/json": {"schema": {"oneOf": [_ANSWER, _ERROR]}}}},
        "503": {"description": "unavailable (a standby answers every delivery so)", **outcome}}
    responses.update({str(status): {"description": text, "content": {"application/json": {"schema": _ERROR}}}
                      for status, text in _HOOK_ERRORS.items()})
    return {"operationId": "post_hook", "summary": "A signed webhook: start a run with the body as its input, or "
                                                   "send it as a message to the run a field names",
            "description": "HMAC-SHA256 of the raw body under the hook's shared secret (docs/http.md, Webhooks); "
                           "the delivery id is the idempotency key.",
            "x-piwf-operation": ["run.start", "message.send"], "security": [], "parameters": parameters,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {}}}},
            "responses": responses}


_HOOK_ERRORS = {400: "the body is not JSON, or has no delivery id", 401: "a missing or wrong signature (logged "
                "without the secret)", 413: "a body over the limit", 431: "headers over the limit"}


def openapi_document() -> dict[str, Any]:
    """The whole description: every route of `ROUTES`, and the description's own path."""
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    paths[OPENAPI_PATH] = {"get": {"operationId": "get_openapi", "summary": "This description",
                                   "security": [{"bearer": []}],
                                   "responses": {"200": {"description": "OpenAPI 3.1",
                                                         "content": {"application/json": {}}}}}}
    paths[HOOK_PATH] = {"post": _hook()}
    return {"openapi": "3.1.0",
            "info": {"title": "piwf_actors host", "version": __version__,
                     "description": "The client protocol over HTTP (docs/http.md)."},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "paths": paths}
