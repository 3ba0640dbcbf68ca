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
from piwf_actors.wire_records import (
    Outcome,
    WireReadable,
    as_map,
    bool_field,
    extra_fields,
    int_field,
    need,
    num_field,
    recorded_dict,
    recorded_parts,
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


# --- receipts of writes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunReceipt(WireReadable):
    """A run was queued (`start_run`, `restart_run`): its id, status and revision.

    `outcome` is `adopted` when the same request (client id + idempotency key,
    or the same restart) was applied before: the first receipt is returned
    and nothing new happened. A restart also names its `parent_run_id`, says
    whether the code it runs differs from the parent's (`digest_changed`) and
    where it starts (`from_node`). Also readable as its wire dict:
    `receipt["receipt"]["run_id"]`, `receipt["outcome"]`.
    """

    run_id: str
    status: str
    revision: int
    outcome: Outcome
    parent_run_id: str | None = None
    digest_changed: bool | None = None
    from_node: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("run_id", "status", "revision", "parent_run_id", "digest_changed",
                                        "from_node")

    @classmethod
    def from_wire(cls, data: Any) -> RunReceipt:
        what = "run receipt"
        outcome, receipt, _revision = recorded_parts(data, what)
        return cls(str_field(receipt, "run_id", what), str_field(receipt, "status", what), int_field(receipt, "revision", what),
                   outcome, str_field(receipt, "parent_run_id", what, optional=True),
                   bool_field(receipt, "digest_changed", what, optional=True),
                   str_field(receipt, "from_node", what, optional=True), extra_fields(receipt, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        receipt: dict[str, Any] = {"run_id": self.run_id, "status": self.status, "revision": self.revision}
        for key, value in (("parent_run_id", self.parent_run_id), ("digest_changed", self.digest_changed),
                           ("from_node", self.from_node)):
            if value is not None:
                receipt[key] = value
        return recorded_dict(self.outcome, {**receipt, **self.extra}, self.revision)


@dataclass(frozen=True, slots=True)
class ControlReceipt(WireReadable):
    """A run was cancelled, paused or resumed: its status now and its new revision.

    `status` may be a transition still under way: `cancelling` or `pausing`
    (the worker stops at its next node boundary). Also readable as its wire
    dict: `receipt["receipt"]["status"]`.
    """

    run_id: str
    status: str
    revision: int
    outcome: Outcome
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("run_id", "status", "revision")

    @classmethod
    def from_wire(cls, data: Any) -> ControlReceipt:
        what = "control receipt"
        outcome, receipt, _revision = recorded_parts(data, what)
        return cls(str_field(receipt, "run_id", what), str_field(receipt, "status", what), int_field(receipt, "revision", what),
                   outcome, extra_fields(receipt, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        receipt = {"run_id": self.run_id, "status": self.status, "revision": self.revision, **self.extra}
        return recorded_dict(self.outcome, receipt, self.revision)


@dataclass(frozen=True, slots=True)
class AnswerReceipt(WireReadable):
    """A decision or checkpoint was answered: the submission recorded for it and the request's new
    revision; the run goes back to the queue. `choice` is the decision's choice (None for a
    checkpoint). Also readable as its wire dict: `receipt["receipt"]["submission_id"]`.
    """

    request_id: str
    submission_id: str
    run_id: str
    revision: int
    outcome: Outcome
    choice: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("request_id", "submission_id", "run_id", "choice", "revision")

    @classmethod
    def from_wire(cls, data: Any) -> AnswerReceipt:
        what = "answer receipt"
        outcome, receipt, _revision = recorded_parts(data, what)
        return cls(str_field(receipt, "request_id", what), str_field(receipt, "submission_id", what),
                   str_field(receipt, "run_id", what), int_field(receipt, "revision", what), outcome,
                   str_field(receipt, "choice", what, optional=True), extra_fields(receipt, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        receipt: dict[str, Any] = {"request_id": self.request_id, "submission_id": self.submission_id,
                                   "run_id": self.run_id}
        if self.choice is not None:
            receipt["choice"] = self.choice
        receipt["revision"] = self.revision
        return recorded_dict(self.outcome, {**receipt, **self.extra}, self.revision)


@dataclass(frozen=True, slots=True)
class EffectReceipt(WireReadable):
    """An ambiguous effect was resolved (`confirm`: it happened; `retry`: run the node again);
    `revision` is its run's revision after it. Also readable as its wire dict:
    `receipt["receipt"]["action"]`.
    """

    effect_id: str
    run_id: str
    action: str
    revision: int
    outcome: Outcome
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("run_id", "effect_id", "action", "revision")

    @classmethod
    def from_wire(cls, data: Any) -> EffectReceipt:
        what = "effect receipt"
        outcome, receipt, _revision = recorded_parts(data, what)
        return cls(str_field(receipt, "effect_id", what), str_field(receipt, "run_id", what), str_field(receipt, "action", what),
                   int_field(receipt, "revision", what), outcome, extra_fields(receipt, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        receipt = {"run_id": self.run_id, "effect_id": self.effect_id, "action": self.action,
                   "revision": self.revision, **self.extra}
        return recorded_dict(self.outcome, receipt, self.revision)


__all__ = [
    "AnswerReceipt", "ControlReceipt", "EffectReceipt", "EffectView", "NodeView", "Outcome", "PendingRequest",
    "RunError", "RunEvent", "RunReceipt", "RunSummary", "RunView",
]
