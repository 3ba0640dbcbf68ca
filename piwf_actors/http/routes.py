"""The HTTP door's one table of routes: what each path means as a client operation.

A route names the catalog operation it makes (`protocol.catalog`), who may
call it (a viewer reads; an operator also acts), and where the operation's
request fields come from: the path (`{run_id}` goes in the envelope, other
path parameters into the payload), the query string (typed), the JSON body
(the payload, with `expected_revision` lifted into the envelope). The router
(`http/app.py`) serves exactly this table and the OpenAPI description
(`http/openapi.py`) is generated from it, so the two cannot drift; the
payload is then checked by the operation's own entry, as for the socket.

Pure data and pure functions: no I/O, no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VIEWER, OPERATOR = "viewer", "operator"
ROLES = (VIEWER, OPERATOR)

#: The client protocol's outcomes as HTTP statuses (docs/http.md). A created run answers 201 instead of 200.
STATUS_OF_OUTCOME = {"accepted": 200, "adopted": 200, "rejected": 422, "conflict": 409, "notFound": 404,
                     "unavailable": 503, "claimLost": 409}


class RouteError(ValueError):
    """A request that does not fit its route (a query parameter of the wrong type): answered 422."""


@dataclass(frozen=True, slots=True)
class Parts:
    """The pieces of one HTTP request a route reads: path parameters, query parameters, the JSON body."""

    path: Mapping[str, str]
    query: Mapping[str, str]
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """What a route makes of a request: the client operation and its request fields."""

    operation: str
    payload: dict[str, Any]
    run_id: str | None = None
    expected_revision: int | None = None


#: A route's own way from the request to its call (when the body is not simply the payload).
Shape = Callable[["Route", Parts], Call]


@dataclass(frozen=True, slots=True)
class Route:
    """One path and method. `query`: query parameter → type (`str`, `int`, `num`, `bool`), each
    becoming the payload field of the same name. `body`: whether a JSON body is read (its fields are
    the payload, but for `expected_revision`). `created`: 201 when accepted (a new run). `stream`: a
    Server-Sent Events stream of this watch topic instead of one answer. `shape`: a route's own
    mapping (the answer route picks decision or checkpoint by the body); `body_schema` documents it."""

    method: str
    path: str
    operation: str
    summary: str
    role: str = VIEWER
    query: Mapping[str, str] = field(default_factory=dict)
    body: bool = False
    created: bool = False
    stream: str | None = None
    shape: Shape | None = None
    body_schema: Mapping[str, Any] | None = None
    #: `{run_id}` of the path is a payload field of the operation (message.send), not the envelope's.
    run_in_payload: bool = False

    @property
    def path_params(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{") and part.endswith("}")]

    def call(self, parts: Parts) -> Call:
        """The operation and request fields of this request (raises RouteError for a bad query value)."""
        if self.shape is not None:
            return self.shape(self, parts)
        payload: dict[str, Any] = {}
        run_id = None
        for name in self.path_params:
            if name == "run_id" and not self.run_in_payload:
                run_id = parts.path[name]
            else:
                payload[name] = parts.path[name]
        for name, kind in self.query.items():
            if name in parts.query:
                payload[name] = _typed(name, parts.query[name], kind)
        body = dict(parts.body)
        revision = body.pop("expected_revision", None)
        if revision is not None and (not isinstance(revision, int) or isinstance(revision, bool)):
            raise RouteError("expected_revision must be an integer")
        for name, value in body.items():
            if name in payload:
                raise RouteError(f"{name} is given by the path; leave it out of the body")
            payload[name] = value
        return Call(self.operation, payload, run_id, revision)


def _typed(name: str, text: str, kind: str) -> Any:
    try:
        if kind == "int":
            return int(text)
        if kind == "num":
            return float(text)
        if kind == "bool":
            if text not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text in ("true", "1")
    except ValueError:
        raise RouteError(f"query parameter {name} must be {'a number' if kind != 'bool' else 'true or false'}") \
            from None
    return text


def _answer(route: Route, parts: Parts) -> Call:
    """A decision's `{choice, input?}` or a checkpoint's `{input}`: the body says which it answers."""
    body = dict(parts.body)
    revision = body.pop("expected_revision", None)
    if revision is not None and (not isinstance(revision, int) or isinstance(revision, bool)):
        raise RouteError("expected_revision must be an integer")
    request_id = parts.path["request_id"]
    common: dict[str, Any] = {key: body.pop(key) for key in ("submission_id", "session_id") if key in body}
    payload: dict[str, Any]
    if "choice" in body:
        response: dict[str, Any] = {"choice": body.pop("choice")}
        if "input" in body:
            response["input"] = body.pop("input")
        operation, payload = "decision.answer", {"request_id": request_id, "response": response, **common}
    else:
        operation, payload = "checkpoint.answer", {"request_id": request_id, "input": body.pop("input", None),
                                                   **common}
    if body:
        raise RouteError(f"unknown field(s): {', '.join(sorted(body))} (a decision takes choice and input, "
                         "a checkpoint input)")
    return Call(operation, payload, None, revision)


def _watch(route: Route, parts: Parts) -> Call:
    payload: dict[str, Any] = {"subscription_id": "sse", "topic": route.stream}
    if "run_id" in parts.path:
        payload["run_id"] = parts.path["run_id"]
    if parts.query.get("session_id"):
        payload["session_id"] = parts.query["session_id"]
    return Call("watch", payload)


_RUN_LIST_QUERY = {"status": "str", "workflow": "str", "parent": "str", "since": "num", "limit": "int",
                   "cursor": "str"}
_ANSWER_SCHEMA = {"type": "object", "properties": {
    "choice": {"type": "string", "description": "a decision's choice"},
    "input": {"description": "a decision's text inputs (an object), or a checkpoint's answer (any JSON)"},
    "expected_revision": {"type": "integer"}, "submission_id": {"type": "string"},
    "session_id": {"type": "string"}}}
_P = "/api/v1"

#: Every route the door serves, in the order the router tries them.
ROUTES: tuple[Route, ...] = (
    Route("GET", f"{_P}/host", "host.status", "The host: role, lease, workers, runs by status"),
    Route("GET", f"{_P}/state", "state.status", "The state database: engine, size, schema, counts "
          "(?counts=false: without the exact row counts, which read every table)", query={"counts": "bool"}),
    Route("GET", f"{_P}/runs", "run.list", "Runs, newest first; filters and a cursor for the next page",
          query=_RUN_LIST_QUERY),
    Route("POST", f"{_P}/runs", "run.start", "Start a run: {workflow, input, project_path?, priority?}",
          OPERATOR, body=True, created=True),
    Route("GET", f"{_P}/runs/{{run_id}}", "run.get", "One run: nodes, outputs, waits, answers"),
    Route("GET", f"{_P}/runs/{{run_id}}/events", "run.events", "A run's events after a seq",
          query={"after": "int", "limit": "int"}),
    Route("GET", f"{_P}/runs/{{run_id}}/graph", "run.graph", "The graph the run was started with"),
    Route("POST", f"{_P}/runs/{{run_id}}/cancel", "run.cancel", "Cancel a run", OPERATOR, body=True),
    Route("POST", f"{_P}/runs/{{run_id}}/pause", "run.pause", "Pause a run", OPERATOR, body=True),
    Route("POST", f"{_P}/runs/{{run_id}}/resume", "run.resume", "Resume a paused run", OPERATOR, body=True),
    Route("POST", f"{_P}/runs/{{run_id}}/restart", "run.restart",
          "Restart a finished run as a new one: {expected_revision, from_node?, same_code?}", OPERATOR, body=True,
          created=True),
    Route("POST", f"{_P}/runs/{{run_id}}/messages", "message.send", "Send a message: {topic, payload}",
          OPERATOR, body=True, run_in_payload=True),
    Route("POST", f"{_P}/events", "event.emit", "Emit an event: {name, data?, key?}", OPERATOR, body=True),
    Route("GET", f"{_P}/events", "event.list", "Events, newest first, with how many runs each started and woke",
          query={"name": "str", "limit": "int", "before_seq": "int"}),
    Route("GET", f"{_P}/events/{{event_id}}", "event.get", "One event: the runs it started and the waits it settled"),
    Route("GET", f"{_P}/interactions", "interaction.list", "Pending decisions, checkpoints and agent steps",
          query={"session_id": "str"}),
    Route("POST", f"{_P}/interactions/{{request_id}}/answer", "decision.answer",
          "Answer a decision {choice, input?} or a checkpoint {input}", OPERATOR, body=True, shape=_answer,
          body_schema=_ANSWER_SCHEMA),
    Route("POST", f"{_P}/interactions/{{request_id}}/submit", "interaction.submit",
          "Submit an agent step's output: {value, session_id?}", OPERATOR, body=True),
    Route("GET", f"{_P}/effects", "effect.list", "Ambiguous effects, newest first, with their runs; a cursor pages on",
          query={"status": "str", "limit": "int", "cursor": "str"}),
    Route("POST", f"{_P}/effects/{{effect_id}}/resolve", "effect.resolve",
          "Settle an ambiguous effect: {action: confirm|retry, output?}", OPERATOR, body=True),
    Route("GET", f"{_P}/schedules", "schedule.list", "Schedules and their next fires"),
    Route("POST", f"{_P}/schedules/{{name}}/pause", "schedule.pause", "Pause a schedule", OPERATOR, body=True),
    Route("POST", f"{_P}/schedules/{{name}}/resume", "schedule.resume", "Resume a schedule", OPERATOR, body=True),
    Route("POST", f"{_P}/schedules/{{name}}/trigger", "schedule.trigger", "Fire a schedule now", OPERATOR,
          body=True),
    Route("GET", f"{_P}/resources", "resource.list", "Declared resources", query={"manager": "str", "limit": "int"}),
    Route("GET", f"{_P}/resources/{{manager}}/{{key}}", "resource.get", "One resource"),
    Route("GET", f"{_P}/resources/{{manager}}/{{key}}/events", "resource.events", "A resource's events",
          query={"after": "int", "limit": "int"}),
    Route("POST", f"{_P}/resources/{{manager}}/{{key}}/reconcile", "resource.reconcile", "Reconcile a resource now",
          OPERATOR, body=True),
    Route("POST", f"{_P}/resources/{{manager}}/{{key}}/delete", "resource.delete", "Delete a resource", OPERATOR,
          body=True),
    Route("GET", f"{_P}/streams/runs", "watch", "Server-Sent Events: the runs list as it changes", stream="runs",
          shape=_watch),
    Route("GET", f"{_P}/streams/runs/{{run_id}}", "watch", "Server-Sent Events: one run as it changes",
          stream="run", shape=_watch),
    Route("GET", f"{_P}/streams/interactions", "watch", "Server-Sent Events: the inbox as it changes",
          stream="interactions", query={"session_id": "str"}, shape=_watch),
    Route("GET", f"{_P}/streams/host", "watch", "Server-Sent Events: the host as it changes", stream="host",
          shape=_watch),
)

#: The description of the table, served by the door itself (not a client operation).
OPENAPI_PATH = f"{_P}/openapi.json"


def status_for(route: Route, outcome: str) -> int:
    """The HTTP status of an answer with `outcome` to a request of `route`."""
    if outcome == "accepted" and route.created:
        return 201
    return STATUS_OF_OUTCOME.get(outcome, 500)
