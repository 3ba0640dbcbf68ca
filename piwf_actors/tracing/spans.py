"""A run's committed events → the spans they finish (pure: no reads, no clock, no opentelemetry).

`RunTrace` is fed one run's events in `seq` order (`feed(event)`) and
returns the spans each event ends, as `SpanRecord`s with the times the
events carry (the writer's clock at commit). What it builds:

- `run <workflow>`: the root of the run's trace, from `run_created` to its
  end (`run_finished`, `run_failed`, `run_cancelled`; `run_copied` for a
  child re-used from a restarted parent's run). Starts, parks, resumes,
  pause and cancel requests are span events on it. A child run links to the
  span of the wait of its parent that started it (`wait children`); a
  restarted run links to the run span it was restarted from.
- `node <node_id>`: one node attempt, child of the run span. An effect,
  wait or interaction node starts at its `node_started` (committed before
  it acts); a pure node (compute, notify) is not announced before it runs,
  so it starts at the run's previous event (the node before it, or the
  start of the launch), which is also when the worker began it, give or
  take the commits in flight. It ends with `node_finished`, `node_failed`
  or `node_interrupted`; one still open when the run ends ends with it
  (`piwf.node.outcome` = `unfinished`: a worker died under it).
- the waits, children of their node attempt's span: `wait decision`,
  `wait checkpoint`, `wait agent` (from `interaction_requested` to the
  answer, `interaction_settled`), `sleep`, `wait message`, `wait children`
  (`wait_started` to `wait_settled`). A wait still open when its node or
  its run ends, ends with it.

The attempt facts the events do not carry (attempt number, error code and
message, who executed it) are filled in by the caller (`with_attempt`);
so is the run's error message (`with_run_error`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from piwf_actors.tracing import ids

#: Run events that become span events of the run span (with their payload's plain fields).
RUN_SPAN_EVENTS = frozenset({"run_started", "run_resumed", "run_parked", "pause_requested", "pause_cancelled",
                             "cancel_requested", "run_restarted", "effect_resolved", "message_received",
                             "submission_rejected", "submission_missing", "effect_ambiguous"})
#: Span events kept on a run span (OTel's default span limit): a run that lives for months gets a
#: message_received or run_resumed per message; the latest are kept, the dropped ones counted
#: (`piwf.run.events_dropped`).
MAX_RUN_SPAN_EVENTS = 128
_RUN_ENDS = {"run_finished": "done", "run_failed": "failed", "run_cancelled": "cancelled", "run_copied": "done"}
_WAIT_NAMES = {"sleep": "sleep", "message": "wait message", "children": "wait children",
               "decision": "wait decision", "checkpoint": "wait checkpoint", "agent": "wait agent"}


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the caller reads of a run once, when it first traces it (the run row)."""

    run_id: str
    workflow: str
    parent_run_id: str | None = None
    parent_wait_id: str | None = None  # set for a child run: the parent's `wait children` that started it


@dataclass(frozen=True, slots=True)
class Event:
    """One committed run event (`run.events`), as the tracer reads it."""

    seq: int
    kind: str
    created_at: float
    node_id: str | None = None
    attempt_id: str | None = None
    payload: Any = None


@dataclass(frozen=True, slots=True)
class SpanLink:
    trace_id: int
    span_id: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A finished span, ready for any exporter. Times are epoch seconds; `error` set means the
    span's status is ERROR with that description."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start: float
    end: float
    attributes: dict[str, Any]
    error: str | None = None
    links: tuple[SpanLink, ...] = ()
    events: tuple[tuple[str, float, dict[str, Any]], ...] = ()
    attempt_id: str | None = None  # a node attempt's span: the attempt whose facts fill it in

    def with_attempt(self, attempt_no: int | None, error_code: str | None, error_message: str | None,
                     executed_by: str | None) -> SpanRecord:
        """This node attempt span with the facts of its attempt row."""
        attributes = dict(self.attributes)
        if attempt_no is not None:
            attributes["piwf.node.attempt"] = attempt_no
        if error_code:
            attributes["error.type"] = error_code
        if executed_by:
            attributes["piwf.executed_by"] = executed_by
        error = self.error
        if error is not None and error_message:
            attributes["piwf.error.message"] = error_message[:1000]
            error = error_message[:1000]
        return replace(self, attributes=attributes, error=error)

    def with_run_error(self, error_message: str | None) -> SpanRecord:
        if self.error is None or not error_message:
            return self
        return replace(self, error=error_message[:1000],
                       attributes={**self.attributes, "piwf.error.message": error_message[:1000]})


@dataclass
class _Open:
    """A span begun and not yet ended."""

    name: str
    span_id: int
    parent_span_id: int
    start: float
    attributes: dict[str, Any]
    attempt_id: str | None = None
    events: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)


def _plain(payload: Any) -> dict[str, Any]:
    """The scalar fields of an event payload, as span attributes (`piwf.` prefixed)."""
    if not isinstance(payload, dict):
        return {}
    return {f"piwf.{key}": value for key, value in payload.items()
            if isinstance(value, (str, bool, int, float)) and key != "error"}


class RunTrace:
    """The spans of one run, built from its events in order (see the module docstring)."""

    def __init__(self, facts: RunFacts) -> None:
        self.facts = facts
        self.trace_id = ids.trace_id(facts.run_id)
        self.run_span_id = ids.run_span_id(facts.run_id)
        self.finished = False
        self._created_at: float | None = None
        self._last_at: float | None = None  # the previous event's time: where a pure node began
        self._run_events: deque[tuple[str, float, dict[str, Any]]] = deque(maxlen=MAX_RUN_SPAN_EVENTS)
        self._run_events_dropped = 0
        self._attempts: dict[str, _Open] = {}
        self._waits: dict[str, _Open] = {}
        self._kinds: dict[str, str] = {}  # attempt id → node kind, as its events tell it
        self._effects: dict[str, str] = {}  # attempt id → effect id

    def held(self) -> int:
        """Entries kept in memory for the run's attempts and waits (bounded by the open ones)."""
        return len(self._attempts) + len(self._waits) + len(self._kinds) + len(self._effects)

    def feed(self, event: Event) -> list[SpanRecord]:
        """The spans `event` ends (nothing once the run span has ended)."""
        if self.finished:
            return []
        if self._created_at is None:
            self._created_at = event.created_at  # run_created, the first event of every run
        ended = self._step(event)
        self._last_at = event.created_at
        return ended

    def _step(self, event: Event) -> list[SpanRecord]:
        kind, at, payload = event.kind, event.created_at, event.payload if isinstance(event.payload, dict) else {}
        attempt_id = event.attempt_id
        if kind in RUN_SPAN_EVENTS:
            if len(self._run_events) == MAX_RUN_SPAN_EVENTS:
                self._run_events_dropped += 1  # the oldest goes
            self._run_events.append((kind, at, _plain(payload)))
        if kind == "node_started" and attempt_id:
            self._open_attempt(event, at)
        elif kind == "effect_reserved" and attempt_id:
            self._kinds[attempt_id] = "effect"
            self._effects[attempt_id] = str(payload.get("effect_id") or "")
            self._open_attempt(event, at)
        elif kind == "effect_settled" and attempt_id in self._attempts and payload.get("effect_id"):
            self._effects[attempt_id] = str(payload["effect_id"])
        elif kind == "node_timed_out" and attempt_id in self._attempts:
            self._attempts[attempt_id].events.append(("timed_out", at, _plain(payload)))
        elif kind == "interaction_requested" and attempt_id:
            wait_kind = str(payload.get("kind") or "decision")
            self._kinds[attempt_id] = wait_kind
            self._open_wait(event, str(payload.get("request_id") or attempt_id), wait_kind,
                            {"piwf.request.id": payload.get("request_id")}, at)
        elif kind == "wait_started" and attempt_id:
            wait_kind = str(payload.get("kind") or "sleep")
            self._kinds[attempt_id] = wait_kind
            extra = {"piwf.wait.id": payload.get("wait_id"), "piwf.message.topic": payload.get("topic"),
                     "piwf.wait.wake_at": payload.get("wake_at")}
            self._open_wait(event, str(payload.get("wait_id") or attempt_id), wait_kind, extra, at)
        elif kind == "interaction_settled" and payload.get("request_id"):
            return self._end_wait(str(payload["request_id"]), at, {"piwf.wait.outcome": "answered"})
        elif kind == "wait_settled" and payload.get("wait_id"):
            return self._end_wait(str(payload["wait_id"]), at, {"piwf.wait.outcome": payload.get("outcome"),
                                                                "piwf.wait.by": payload.get("by")})
        elif kind in ("node_finished", "node_failed", "node_interrupted"):
            return self._end_attempt(event, at, payload)
        elif kind in _RUN_ENDS:
            return self._end_run(kind, at, payload)
        return []

    # --- node attempts ---------------------------------------------------------------------------

    def _open_attempt(self, event: Event, at: float) -> None:
        assert event.attempt_id is not None
        if event.attempt_id in self._attempts:
            return  # effect_reserved after its own node_started: the same attempt
        self._attempts[event.attempt_id] = self._new_attempt(event.attempt_id, event.node_id or "", at)

    def _new_attempt(self, attempt_id: str, node_id: str, start: float) -> _Open:
        """The span of one node attempt, opened at `start`: a child of the run's span."""
        return _Open(f"node {node_id}", ids.attempt_span_id(attempt_id), self.run_span_id, start,
                     {"piwf.run.id": self.facts.run_id, "piwf.node.id": node_id, "piwf.node.attempt_id": attempt_id},
                     attempt_id=attempt_id)

    def _end_attempt(self, event: Event, at: float, payload: dict[str, Any]) -> list[SpanRecord]:
        attempt_id = event.attempt_id
        if not attempt_id:
            return []
        opened = self._attempts.pop(attempt_id, None)
        if opened is None:  # a pure node: it began when the run's previous event was committed
            opened = self._new_attempt(attempt_id, event.node_id or "", self._last_at if self._last_at is not None else at)
        if event.kind == "node_finished":
            outcome, error = "ok", None
        elif event.kind == "node_interrupted":
            outcome, error = "interrupted", str(payload.get("error") or "interrupted")
            if payload.get("effect_id"):
                self._effects[attempt_id] = str(payload["effect_id"])
        else:
            outcome, error = str(payload.get("outcome") or "failed"), str(payload.get("error") or "failed")
        ended = [record for key, wait in list(self._waits.items()) if wait.attempt_id == attempt_id
                 for record in self._end_wait(key, at, {"piwf.wait.outcome": "ended_with_node"})]
        ended.append(self._attempt_record(opened, at, outcome, error))
        return ended

    def _attempt_record(self, opened: _Open, end: float, outcome: str, error: str | None) -> SpanRecord:
        """The attempt's span, ended: what was kept of the attempt is dropped (a run's later attempts are
        other attempts; a run of a million nodes holds only its open ones)."""
        attempt_id = opened.attempt_id or ""
        attributes = {**opened.attributes, "piwf.node.kind": self._kinds.pop(attempt_id, "compute"),
                      "piwf.node.outcome": outcome}
        effect_id = self._effects.pop(attempt_id, None)
        if effect_id:
            attributes["piwf.effect.id"] = effect_id
        return SpanRecord(opened.name, self.trace_id, opened.span_id, opened.parent_span_id, opened.start, end,
                          attributes, error=error, events=tuple(opened.events), attempt_id=attempt_id)

    # --- waits -------------------------------------------------------------------------------------

    def _open_wait(self, event: Event, key: str, wait_kind: str, extra: dict[str, Any], at: float) -> None:
        if key in self._waits:
            return
        attempt_id = event.attempt_id or ""
        if attempt_id not in self._attempts:
            self._open_attempt(event, at)  # a wait always has its attempt; be safe if its start was missed
        attributes = {"piwf.run.id": self.facts.run_id, "piwf.node.id": event.node_id or "",
                      "piwf.wait.kind": wait_kind, **{k: v for k, v in extra.items() if v is not None}}
        self._waits[key] = _Open(_WAIT_NAMES.get(wait_kind, f"wait {wait_kind}"), ids.wait_span_id(key),
                                 ids.attempt_span_id(attempt_id), at, attributes, attempt_id=attempt_id)

    def _end_wait(self, key: str, at: float, extra: dict[str, Any]) -> list[SpanRecord]:
        opened = self._waits.pop(key, None)
        if opened is None:
            return []
        attributes = {**opened.attributes, **{k: v for k, v in extra.items() if v is not None}}
        error = "failed" if extra.get("piwf.wait.outcome") == "failed" else None
        return [SpanRecord(opened.name, self.trace_id, opened.span_id, opened.parent_span_id, opened.start, at,
                           attributes, error=error)]

    # --- the run -------------------------------------------------------------------------------------

    def _end_run(self, kind: str, at: float, payload: dict[str, Any]) -> list[SpanRecord]:
        self.finished = True
        ended: list[SpanRecord] = []
        for key in list(self._waits):
            ended += self._end_wait(key, at, {"piwf.wait.outcome": "ended_with_run"})
        for attempt_id in list(self._attempts):
            opened = self._attempts.pop(attempt_id)
            ended.append(self._attempt_record(opened, at, "unfinished", None))
        status = _RUN_ENDS[kind]
        facts = self.facts
        attributes: dict[str, Any] = {"piwf.run.id": facts.run_id, "piwf.workflow": facts.workflow,
                                      "piwf.run.status": status}
        links: tuple[SpanLink, ...] = ()
        if facts.parent_run_id:
            attributes["piwf.run.parent_id"] = facts.parent_run_id
            if facts.parent_wait_id:
                links = (SpanLink(ids.trace_id(facts.parent_run_id), ids.wait_span_id(facts.parent_wait_id),
                                  {"piwf.link": "parent"}),)
            else:
                links = (SpanLink(ids.trace_id(facts.parent_run_id), ids.run_span_id(facts.parent_run_id),
                                  {"piwf.link": "restarted_from"}),)
        if self._run_events_dropped:
            attributes["piwf.run.events_dropped"] = self._run_events_dropped
        if kind == "run_copied" and payload.get("copied_from"):
            attributes["piwf.run.copied_from"] = str(payload["copied_from"])
        error = None
        if status == "failed":
            code = str(payload.get("error_code") or "run_failed")
            attributes["error.type"] = code
            error = code
        start = self._created_at if self._created_at is not None else at
        ended.append(SpanRecord(f"run {facts.workflow}", self.trace_id, self.run_span_id, None, start, at,
                                attributes, error=error, links=links, events=tuple(self._run_events)))
        return ended
