"""Typed results of the embedding API (`HostHandle`) and the run events a subscription tells.

Every result is a frozen dataclass built from the plain dict the host's
queries and write commands return (the same values the client protocol
sends): `from_wire(data)` checks the shape and raises `DecodeError`;
`to_dict()` gives that exact dict back. Keys this version does not know are
kept in `extra` and written back by `to_dict()`, so nothing is lost when the
host learns a new field.

Compatibility: `HostHandle` used to return those dicts, and code indexes them
(`host.start_run(...)["receipt"]["run_id"]`). Every result therefore also
reads as its wire dict: `result["key"]`, `result.get("key", default)` and
`"key" in result` delegate to `to_dict()`. New code should use the
attributes.

Values over 64 KiB in run views (input, output, node outputs) are content
markers `{"$content": digest, "bytes": n, "preview": …}`; they are kept as
they are: `HostHandle.read_content(digest)` returns the full value.

The run events `HostHandle.subscribe` tells an application's actor
(`RunStarted`, `NodeFinished`, `RunParked`, `RunFinished`) are in
`piwf_actors.run_notices`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from piwf_actors.errors import DecodeError
from piwf_actors.receipts import (  # re-exported: the receipts of writes live in receipts.py
    AnswerReceipt,
    ControlReceipt,
    EffectReceipt,
    MessageReceipt,
    RunReceipt,
)
from piwf_actors.wire.records import (
    WireReadable,
    as_map,
    bool_field,
    extra_fields,
    int_field,
    need,
    num_field,
    str_field,
)

# --- run views ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunError(WireReadable):
    """Why a run or a node failed: a stable `code` and a one-line `message`.

    Also readable as its wire dict: `error["code"]`.
    """

    code: str | None
    message: str | None
    traceback: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> RunError:
        data = as_map(data, "error")
        return cls(str_field(data, "code", "error", optional=True), str_field(data, "message", "error", optional=True),
                   str_field(data, "traceback", "error", optional=True))

    @classmethod
    def maybe(cls, data: Any) -> RunError | None:
        """None for None, else `from_wire(data)`."""
        return None if data is None else cls.from_wire(data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out


@dataclass(frozen=True, slots=True)
class NodeView(WireReadable):
    """One node of a run as `get_run` shows it: its latest attempt's status, output and error.

    `attempts` is the highest attempt number; `output` may be a content
    marker (see the module docstring). Also readable as its wire dict:
    `node["output"]`.
    """

    node_id: str
    status: str
    attempts: int
    output: Any
    error: RunError | None
    attempt_id: str | None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("node_id", "status", "attempts", "output", "error", "attempt_id")

    @classmethod
    def from_wire(cls, data: Any) -> NodeView:
        what = "node view"
        data = as_map(data, what)
        return cls(str_field(data, "node_id", what), str_field(data, "status", what), int_field(data, "attempts", what),
                   need(data, "output", what), RunError.maybe(data.get("error")),
                   str_field(data, "attempt_id", what, optional=True), extra_fields(data, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "status": self.status, "attempts": self.attempts, "output": self.output,
                "error": None if self.error is None else self.error.to_dict(), "attempt_id": self.attempt_id,
                **self.extra}


@dataclass(frozen=True, slots=True)
class EffectView(WireReadable):
    """A side effect a node reserved: `status` reserved | applying | applied | failed | ambiguous;
    `resolution` says how a person settled an ambiguous one (confirmed, retry) or None.

    Also readable as its wire dict: `effect["status"]`.
    """

    effect_id: str
    node_id: str
    status: str
    resolution: str | None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("effect_id", "node_id", "status", "resolution")

    @classmethod
    def from_wire(cls, data: Any) -> EffectView:
        what = "effect view"
        data = as_map(data, what)
        return cls(str_field(data, "effect_id", what), str_field(data, "node_id", what), str_field(data, "status", what),
                   str_field(data, "resolution", what, optional=True), extra_fields(data, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {"effect_id": self.effect_id, "node_id": self.node_id, "status": self.status,
                "resolution": self.resolution, **self.extra}


@dataclass(frozen=True, slots=True)
class RunView(WireReadable):
    """Everything `get_run` (the protocol's `run.get`) shows of a run, read in one snapshot.

    `status` is queued | starting | running | parked | done | failed |
    cancelled; a parked run says why in `park_reason` (waiting, paused,
    ambiguous_effect, no_progress) and `park_detail` (the request id, the
    effect id, the last exit). `input`, `output` and node outputs over 64 KiB
    are content markers (see the module docstring). Also readable as its wire
    dict: `view["status"]`, `view["nodes"][0]["output"]`.
    """

    run_id: str
    workflow: str
    status: str
    revision: int
    park_reason: str | None
    park_detail: str | None
    input: Any
    output: Any
    error: RunError | None
    parent_run_id: str | None
    session_id: str | None
    current_node: str | None
    steps: int
    created_at: float
    updated_at: float
    finished_at: float | None
    nodes: tuple[NodeView, ...]
    effects: tuple[EffectView, ...]
    project_path: str | None = None
    definition_digest: str | None = None
    pause_requested: bool = False
    cancel_requested: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = (
        "run_id", "workflow", "status", "park_reason", "park_detail", "revision", "input", "output", "error",
        "parent_run_id", "session_id", "project_path", "definition_digest", "current_node", "steps",
        "pause_requested", "cancel_requested", "created_at", "updated_at", "finished_at", "nodes", "effects")

    @property
    def finished(self) -> bool:
        """True once the run is done, failed or cancelled (it never changes again)."""
        return self.status in ("done", "failed", "cancelled")

    def node(self, node_id: str) -> NodeView | None:
        """The node `node_id`, or None if it has not run."""
        return next((node for node in self.nodes if node.node_id == node_id), None)

    # Waiting, children and flow control (kept in `extra`, as the wire sends them).
    @property
    def waits(self) -> list[dict[str, Any]]:
        """Open waits: {wait_id, node_id, kind: sleep|message|children, wake_at | topic, deadline_at,
        clock | children_total, children_open, remaining_s}."""
        return list(self.extra.get("waits") or [])

    @property
    def mailbox(self) -> dict[str, int]:
        """Pending messages per topic."""
        return dict(self.extra.get("mailbox") or {})

    @property
    def children(self) -> dict[str, Any] | None:
        """{total, by_status, runs: [the first 100]} of a run that started child runs, else None."""
        return self.extra.get("children")

    @property
    def queue_reason(self) -> str | None:
        """Why a queued run has not started (a full concurrency slot or fan-out, a paused parent)."""
        return self.extra.get("queue_reason")

    @property
    def priority(self) -> int:
        return int(self.extra.get("priority") or 0)

    @classmethod
    def from_wire(cls, data: Any) -> RunView:
        what = "run view"
        data = as_map(data, what)
        nodes = need(data, "nodes", what)
        effects = need(data, "effects", what)
        if not isinstance(nodes, list | tuple) or not isinstance(effects, list | tuple):
            raise DecodeError(f"{what}: nodes and effects must be lists")
        return cls(
            run_id=str_field(data, "run_id", what), workflow=str_field(data, "workflow", what),
            status=str_field(data, "status", what), revision=int_field(data, "revision", what),
            park_reason=str_field(data, "park_reason", what, optional=True),
            park_detail=str_field(data, "park_detail", what, optional=True),
            input=data.get("input"), output=data.get("output"), error=RunError.maybe(data.get("error")),
            parent_run_id=str_field(data, "parent_run_id", what, optional=True),
            session_id=str_field(data, "session_id", what, optional=True),
            current_node=str_field(data, "current_node", what, optional=True), steps=int_field(data, "steps", what),
            created_at=num_field(data, "created_at", what), updated_at=num_field(data, "updated_at", what),
            finished_at=num_field(data, "finished_at", what, optional=True),
            nodes=tuple(NodeView.from_wire(n) for n in nodes), effects=tuple(EffectView.from_wire(e) for e in effects),
            project_path=str_field(data, "project_path", what, optional=True),
            definition_digest=str_field(data, "definition_digest", what, optional=True),
            pause_requested=bool(bool_field(data, "pause_requested", what, optional=True)),
            cancel_requested=bool(bool_field(data, "cancel_requested", what, optional=True)),
            extra=extra_fields(data, cls._KEYS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "workflow": self.workflow, "status": self.status,
            "park_reason": self.park_reason, "park_detail": self.park_detail, "revision": self.revision,
            "input": self.input, "output": self.output, "error": None if self.error is None else self.error.to_dict(),
            "parent_run_id": self.parent_run_id, "session_id": self.session_id, "project_path": self.project_path,
            "definition_digest": self.definition_digest, "current_node": self.current_node, "steps": self.steps,
            "pause_requested": self.pause_requested, "cancel_requested": self.cancel_requested,
            "created_at": self.created_at, "updated_at": self.updated_at, "finished_at": self.finished_at,
            "nodes": [node.to_dict() for node in self.nodes], "effects": [effect.to_dict() for effect in self.effects],
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class RunSummary(WireReadable):
    """One row of `list_runs` (the protocol's `run.list`): a run without its values and nodes.

    Also readable as its wire dict: `row["status"]`.
    """

    run_id: str
    workflow: str
    status: str
    park_reason: str | None
    revision: int
    parent_run_id: str | None
    session_id: str | None
    current_node: str | None
    steps: int
    error_code: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = (
        "run_id", "workflow", "status", "park_reason", "revision", "parent_run_id", "session_id", "current_node",
        "steps", "error_code", "created_at", "updated_at", "finished_at")

    @classmethod
    def from_wire(cls, data: Any) -> RunSummary:
        what = "run summary"
        data = as_map(data, what)
        return cls(
            run_id=str_field(data, "run_id", what), workflow=str_field(data, "workflow", what),
            status=str_field(data, "status", what), park_reason=str_field(data, "park_reason", what, optional=True),
            revision=int_field(data, "revision", what), parent_run_id=str_field(data, "parent_run_id", what, optional=True),
            session_id=str_field(data, "session_id", what, optional=True),
            current_node=str_field(data, "current_node", what, optional=True), steps=int_field(data, "steps", what),
            error_code=str_field(data, "error_code", what, optional=True), created_at=num_field(data, "created_at", what),
            updated_at=num_field(data, "updated_at", what), finished_at=num_field(data, "finished_at", what, optional=True),
            extra=extra_fields(data, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "workflow": self.workflow, "status": self.status,
                "park_reason": self.park_reason, "revision": self.revision, "parent_run_id": self.parent_run_id,
                "session_id": self.session_id, "current_node": self.current_node, "steps": self.steps,
                "error_code": self.error_code, "created_at": self.created_at, "updated_at": self.updated_at,
                "finished_at": self.finished_at, **self.extra}


@dataclass(frozen=True, slots=True)
class RunEvent(WireReadable):
    """One entry of a run's append-only trace (`run_events`): `seq` grows by one per event.

    `kind` is e.g. run_created, run_started, node_started, node_finished,
    node_failed, interaction_requested, run_parked, run_finished, run_failed,
    run_cancelled. Also readable as its wire dict: `event["kind"]`.
    """

    seq: int
    kind: str
    node_id: str | None
    attempt_id: str | None
    payload: Any
    created_at: float
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("seq", "kind", "node_id", "attempt_id", "payload", "created_at")

    @classmethod
    def from_wire(cls, data: Any) -> RunEvent:
        what = "run event"
        data = as_map(data, what)
        return cls(int_field(data, "seq", what), str_field(data, "kind", what), str_field(data, "node_id", what, optional=True),
                   str_field(data, "attempt_id", what, optional=True), data.get("payload"),
                   num_field(data, "created_at", what), extra_fields(data, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "node_id": self.node_id, "attempt_id": self.attempt_id,
                "payload": self.payload, "created_at": self.created_at, **self.extra}


@dataclass(frozen=True, slots=True)
class PendingRequest(WireReadable):
    """An open interactive request (`pending_interactions`): a decision, checkpoint or agent step
    waiting for an answer.

    `contract` is what the request shows and accepts (title, choices, prompt,
    …); `revision` is what `answer_decision(expected_revision=…)` checks;
    `deadline_at` is when its timeout default applies (None: never, or while
    its run is paused: then `paused_remaining_s` is the time left, which
    counts again from the resume). Also readable as its wire dict:
    `request["request_id"]`.
    """

    request_id: str
    run_id: str
    node_id: str
    kind: str
    audience: str | None
    revision: int
    status: str
    deadline_at: float | None
    contract: Any
    attempt_id: str | None = None
    session_id: str | None = None
    created_at: float | None = None
    paused_remaining_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = (
        "request_id", "run_id", "node_id", "attempt_id", "kind", "session_id", "audience", "revision", "status",
        "deadline_at", "paused_remaining_s", "created_at", "contract")

    @classmethod
    def from_wire(cls, data: Any) -> PendingRequest:
        what = "pending request"
        data = as_map(data, what)
        return cls(
            request_id=str_field(data, "request_id", what), run_id=str_field(data, "run_id", what),
            node_id=str_field(data, "node_id", what), kind=str_field(data, "kind", what),
            audience=str_field(data, "audience", what, optional=True), revision=int_field(data, "revision", what),
            status=str_field(data, "status", what), deadline_at=num_field(data, "deadline_at", what, optional=True),
            contract=data.get("contract"), attempt_id=str_field(data, "attempt_id", what, optional=True),
            session_id=str_field(data, "session_id", what, optional=True),
            created_at=num_field(data, "created_at", what, optional=True),
            paused_remaining_s=num_field(data, "paused_remaining_s", what, optional=True), extra=extra_fields(data, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "run_id": self.run_id, "node_id": self.node_id,
                "attempt_id": self.attempt_id, "kind": self.kind, "session_id": self.session_id,
                "audience": self.audience, "revision": self.revision, "status": self.status,
                "deadline_at": self.deadline_at, "paused_remaining_s": self.paused_remaining_s,
                "created_at": self.created_at, "contract": self.contract,
                **self.extra}


__all__ = [
    "AnswerReceipt", "ControlReceipt", "EffectReceipt", "EffectView", "MessageReceipt", "NodeView", "PendingRequest",
    "RunError", "RunEvent", "RunReceipt", "RunSummary", "RunView",
]
