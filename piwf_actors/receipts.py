"""Typed receipts of the embedding API's writes (`HostHandle.start_run`, `cancel_run`, `answer_*`,
`resolve_effect`, `send_message`): what a write command answered, checked like the views of
results.py (`from_wire` raises `DecodeError`; `to_dict()` gives the wire dict back; unknown keys
kept in `extra`), and readable as that dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from piwf_actors.wire.records import (
    Outcome,
    WireReadable,
    bool_field,
    extra_fields,
    int_field,
    recorded_dict,
    recorded_parts,
    str_field,
)


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





@dataclass(frozen=True, slots=True)
class MessageReceipt(WireReadable):
    """A message went into a run's mailbox (`send_message`, the protocol's `message.send`): its id,
    its place (`seq`) and whether a waiting node took it already (`status` consumed, `consumed_by`
    the wait). `outcome` is `adopted` for a resend under the same key: the message is sent once."""

    message_id: str
    run_id: str
    topic: str
    seq: int
    status: str
    outcome: Outcome
    consumed_by: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)

    _KEYS: ClassVar[tuple[str, ...]] = ("message_id", "run_id", "topic", "seq", "status", "consumed_by")

    @classmethod
    def from_wire(cls, data: Any) -> MessageReceipt:
        what = "message receipt"
        outcome, receipt, _revision = recorded_parts(data, what)
        return cls(str_field(receipt, "message_id", what), str_field(receipt, "run_id", what),
                   str_field(receipt, "topic", what), int_field(receipt, "seq", what),
                   str_field(receipt, "status", what), outcome,
                   str_field(receipt, "consumed_by", what, optional=True), extra_fields(receipt, cls._KEYS))

    def to_dict(self) -> dict[str, Any]:
        receipt = {"message_id": self.message_id, "run_id": self.run_id, "topic": self.topic, "seq": self.seq,
                   "status": self.status, "consumed_by": self.consumed_by, **self.extra}
        return recorded_dict(self.outcome, receipt, None)
