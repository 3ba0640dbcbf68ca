"""The client operations: one table, the single source of what each operation takes and does.

Per operation: its payload fields, whether the request envelope must carry
`run_id` (and `expected_revision`), whether it is recorded for idempotency
(a mutation: replays are `adopted`), whether it is read-only, and the name of
the `ClientGateway` method that answers it. The gateway dispatches from this
table and checks payloads against it; tests check docs/protocol.md against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: A payload's fields: name → (type name, required). Type names: see `payloads.check_payload`.
Spec = dict[str, tuple[str, bool]]


@dataclass(frozen=True, slots=True)
class Operation:
    """One client operation.

    `recorded`: it changes durable state and is recorded by (client id, idempotency key) in the
    same transaction. `recorded_if` names a payload flag without which the operation is a dry run
    that changes nothing and is not recorded (state.prune's `apply`). `read_only`: it changes
    nothing at all. An operation that is neither changes the running host but no durable state
    (host.stop, channel.reload).
    """

    name: str
    handler: str
    payload: Spec = field(default_factory=dict)
    needs_run: bool = False
    needs_revision: bool = False
    recorded: bool = False
    recorded_if: str | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.recorded and self.read_only:
            raise ValueError(f"{self.name}: an operation is recorded or read-only, not both")
        if self.recorded_if is not None and not self.recorded:
            raise ValueError(f"{self.name}: recorded_if applies to a recorded operation")

    @property
    def served_by_standby(self) -> bool:
        """Whether a standby host answers it (reads, and host.stop, which stops that standby); a standby
        answers every other operation `unavailable` (docs/standby.md)."""
        return self.read_only or self.name == "host.stop"

    def records(self, payload: dict[str, Any]) -> bool:
        """Whether this request is recorded for idempotency (False for a dry run)."""
        return self.recorded and (self.recorded_if is None or bool(payload.get(self.recorded_if)))


def _table(*operations: Operation) -> dict[str, Operation]:
    return {operation.name: operation for operation in operations}


_RESOURCE: Spec = {"manager": ("str", True), "key": ("str", True)}
_ANSWER_COMMON: Spec = {"request_id": ("str", True), "submission_id": ("str", False), "session_id": ("str", False)}

OPERATIONS: dict[str, Operation] = _table(
    Operation("host.status", "_host_status", read_only=True),
    Operation("host.stop", "_host_stop"),
    Operation("run.start", "_run_start", {
        "workflow": ("str", True), "input": ("any", False), "project_path": ("str", False),
        "session_id": ("str", False), "run_id": ("str", False)}, recorded=True),
    Operation("run.list", "_run_list", {
        "status": ("str", False), "limit": ("int", False), "workflow": ("str", False), "since": ("num", False)},
        read_only=True),
    Operation("run.get", "_run_get", needs_run=True, read_only=True),
    Operation("run.events", "_run_events", {"after": ("int", False), "limit": ("int", False)}, needs_run=True,
              read_only=True),
    Operation("run.cancel", "_run_control", needs_run=True, recorded=True),
    Operation("run.pause", "_run_control", needs_run=True, recorded=True),
    Operation("run.resume", "_run_control", needs_run=True, recorded=True),
    Operation("run.restart", "_run_restart", {"from_node": ("str", False), "same_code": ("bool", False)},
              needs_run=True, needs_revision=True, recorded=True),
    Operation("effect.resolve", "_effect_resolve", {
        "effect_id": ("str", True), "action": ("str", True), "output": ("any", False)}, recorded=True),
    Operation("watch", "_watch", {
        "subscription_id": ("str", True), "topic": ("str", True), "run_id": ("str", False),
        "session_id": ("str", False)}, read_only=True),
    Operation("unwatch", "_unwatch", {"subscription_id": ("str", True)}, read_only=True),
    Operation("state.status", "_state_status", read_only=True),
    Operation("state.verify", "_state_verify", read_only=True),
    Operation("state.backup", "_state_backup", {"destination": ("str", True)}, recorded=True),
    Operation("state.prune", "_state_prune", {
        "before": ("num", True), "apply": ("bool", False), "idempotency_before": ("num", False)},
        recorded=True, recorded_if="apply"),
    Operation("content.read", "_content_read", {
        "digest": ("str", True), "offset": ("int", False), "length": ("int", False)}, read_only=True),
    Operation("ids.match", "_ids_match", {
        "kind": ("str", True), "prefix": ("str", True), "limit": ("int", False)}, read_only=True),
    Operation("channel.status", "_channel_status", read_only=True),
    Operation("channel.reload", "_channel_reload"),
    Operation("channel.recover", "_channel_recover", {
        "profile": ("str", True), "message_id": ("str", True), "action": ("str", True)}, recorded=True),
    Operation("interaction.list", "_interaction_list", {"session_id": ("str", False)}, read_only=True),
    Operation("checkpoint.answer", "_answer", {**_ANSWER_COMMON, "input": ("any", False)}, recorded=True),
    Operation("decision.answer", "_answer", {**_ANSWER_COMMON, "response": ("map", True)}, recorded=True),
    Operation("interaction.submit", "_answer", {**_ANSWER_COMMON, "value": ("any", False)}, recorded=True),
    Operation("interaction.ack", "_answer", {"message_id": ("str", True)}, recorded=True),
    Operation("schedule.list", "_schedule_list", read_only=True),
    Operation("schedule.pause", "_schedule_control", {"name": ("str", True)}, recorded=True),
    Operation("schedule.resume", "_schedule_control", {"name": ("str", True)}, recorded=True),
    Operation("schedule.trigger", "_schedule_trigger", {"name": ("str", True)}, recorded=True),
    Operation("resource.apply", "_resource_apply", {
        **_RESOURCE, "spec": ("any", True), "initial_status": ("map", False), "project_path": ("str", True),
        "digest": ("str", True)}, recorded=True),
    Operation("resource.get", "_resource_get", _RESOURCE, read_only=True),
    Operation("resource.list", "_resource_list", {"manager": ("str", False), "limit": ("int", False)},
              read_only=True),
    Operation("resource.reconcile", "_resource_control", _RESOURCE, recorded=True),
    Operation("resource.delete", "_resource_control", _RESOURCE, recorded=True),
    Operation("resource.events", "_resource_events", {**_RESOURCE, "after": ("int", False), "limit": ("int", False)},
              read_only=True),
)
