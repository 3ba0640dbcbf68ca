"""Schedule and resource control on the embedding handle: the socket's `schedule.pause|resume|trigger` and
`resource.reconcile|delete`, made as the socket makes them (a part of `HostHandle`, embedding.py).

Each is the same request the socket's client sends: checked and built by the operation's own catalog
entry (`HostHandle._write`), so the handle, the socket and HTTP make one command for one client id and
idempotency key (tests/http/test_three_doors.py). `schedule.trigger` is the schedule keeper's to build
(it resolves the workflow and calls the schedule's input function): the handle hands it the trigger as
the gateway does and waits for the writer's answer in a short-lived actor of its own. Each returns
the wire value `{outcome, receipt, revision}` (`outcome` is `adopted` for a replay) and raises the
typed refusal (NotFound, Rejected, Conflict, StandbyHost). Called from the application's threads.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pykka

from piwf_actors.errors import HostError, Rejected
from piwf_actors.protocol.catalog import OPERATIONS
from piwf_actors.protocol.catalog.registry import client_args
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.protocol.gateway_messages import TriggerSchedule
from piwf_actors.protocol.payloads import check_payload
from piwf_actors.store.requests import WriteResult

#: How long a trigger waits for the keeper and the writer (the keeper may still be loading its files).
TRIGGER_TIMEOUT_S = 60.0


class _Answer(pykka.ThreadingActor):
    """Receives the one WriteResult the writer sends for a trigger (in its own actor thread)."""

    def __init__(self, result: pykka.ThreadingFuture[WriteResult]) -> None:
        super().__init__()
        self._result = result

    def on_receive(self, message: Any) -> None:
        if isinstance(message, WriteResult):
            self._result.set(message)


class ScheduleResourceControls:
    """Mixed into `HostHandle`, which provides `_write`, `_require_active` and `actor` (declared here
    for the type checker only: the mixin has no behaviour of its own for them)."""

    _write: Callable[..., Any]
    _require_active: Callable[[], None]
    actor: Callable[[str], pykka.ActorRef[Any] | None]

    def pause_schedule(self, name: str, *, client_id: str | None = None,
                       idempotency_key: str | None = None) -> dict[str, Any]:
        """Pause schedule `name`: it fires no more until resumed (a manual trigger still fires)."""
        return dict(self._write("schedule.pause", {"name": name}, client_id=client_id,
                                idempotency_key=idempotency_key))

    def resume_schedule(self, name: str, *, client_id: str | None = None,
                        idempotency_key: str | None = None) -> dict[str, Any]:
        """Resume schedule `name` (its missed fires follow its catch_up policy)."""
        return dict(self._write("schedule.resume", {"name": name}, client_id=client_id,
                                idempotency_key=idempotency_key))

    def trigger_schedule(self, name: str, *, client_id: str | None = None, idempotency_key: str | None = None,
                         timeout: float = TRIGGER_TIMEOUT_S) -> dict[str, Any]:
        """Fire schedule `name` now (a manual fire: one run; a replay with the same key adopts it)."""
        self._require_active()
        request = Request(idempotency_key or uuid.uuid4().hex, client_id, idempotency_key, "schedule.trigger",
                          {"name": name}, None, None, None)
        try:
            check_payload(request, OPERATIONS["schedule.trigger"])
        except BadRequest as bad:
            raise Rejected(str(bad)) from None
        keeper = self.actor("schedules")
        if keeper is None:
            raise HostError("schedules are not running in this host (HostConfig.schedules is False)")
        written: pykka.ThreadingFuture[WriteResult] = pykka.ThreadingFuture()
        answer = _Answer.start(written)
        try:
            keeper.tell(TriggerSchedule(name, f"embedded-{uuid.uuid4().hex}", client_args(request), answer))
            result = written.get(timeout=timeout)
        finally:
            answer.stop()
        return dict(result.unwrap())

    def reconcile_resource(self, manager: str, key: str, *, client_id: str | None = None,
                           idempotency_key: str | None = None) -> dict[str, Any]:
        """Reconcile resource (`manager`, `key`) now."""
        return dict(self._write("resource.reconcile", {"manager": manager, "key": key}, client_id=client_id,
                                idempotency_key=idempotency_key))

    def delete_resource(self, manager: str, key: str, *, client_id: str | None = None,
                        idempotency_key: str | None = None) -> dict[str, Any]:
        """Delete resource (`manager`, `key`): its finalizers run, then it is gone."""
        return dict(self._write("resource.delete", {"manager": manager, "key": key}, client_id=client_id,
                                idempotency_key=idempotency_key))
