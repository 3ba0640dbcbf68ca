"""The resource-manager operations of `ClientGateway` (`resource.*`), kept beside it in their own module.

A mixin: the gateway's dispatch table (`protocol.catalog.OPERATIONS`) names these methods, and they use
the gateway's reader, replies and write paths. Reads are answered from the gateway's connection;
`resource.apply` reads and hashes the manager file on the gateway's executor (never in the actor's
thread, never in the writer), refuses a digest that is not the client's (`conflict`: the file changed
after the client looked at it), and submits the command from there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from piwf_actors.errors import Conflict, Rejected
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.store import resource_queries
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows.resource_manager import MANAGER_NAME, file_digest, manager_path

if TYPE_CHECKING:
    from piwf_actors.actors.gateway import ClientGateway

    _Base = ClientGateway
else:
    _Base = object


def apply_command(payload: dict[str, Any], client_args: dict[str, Any]) -> WriteCommand:
    """The `resource.apply` command, once the manager file is found and its digest is the client's."""
    path = manager_path(payload["project_path"], payload["manager"])
    try:
        digest = file_digest(path)
    except OSError as exc:
        raise Rejected(f"no resource manager {payload['manager']!r} in {payload['project_path']}: cannot read "
                       f"{path} ({exc.strerror})") from None
    if digest != payload["digest"]:
        raise Conflict(f"resource manager file {path} changed: its sha256 is {digest[:12]}…, the client saw "
                       f"{str(payload['digest'])[:12]}…; look at it again and apply again")
    return WriteCommand("resource.apply", {
        **client_args, "manager": payload["manager"], "key": payload["key"], "spec": payload["spec"],
        "initial_status": payload.get("initial_status"), "project_path": payload["project_path"],
        "manager_path": path, "manager_digest": digest})


class ResourceOperations(_Base):
    """`resource.apply|get|list|reconcile|delete|events` (see docs/protocol.md and docs/resource-managers.md)."""

    def _resource_apply(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        project_path = payload["project_path"]
        if not os.path.isabs(project_path) or os.path.normpath(project_path) != project_path:
            raise BadRequest("resource.apply: project_path must be absolute and normalised", request.request_id)
        if not MANAGER_NAME.fullmatch(payload["manager"]):
            raise BadRequest(f"resource.apply: manager must match {MANAGER_NAME.pattern}", request.request_id)
        client_args = self._client_args(request)
        self._write_from_executor(conn_id, request, lambda: apply_command(payload, client_args))

    def _resource_get(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._reader is not None
        view = resource_queries.resource_get(self._reader, payload["manager"], payload["key"])
        if view is None:
            self._reply(conn_id, request, "notFound", error=f"resource {payload['manager']}/{payload['key']} not found")
            return
        self._reply(conn_id, request, "accepted", receipt=view, revision=view["resource_version"])

    def _resource_list(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._reader is not None
        limit = min(payload.get("limit") or 500, 5000)
        resources = resource_queries.resource_list(self._reader, payload.get("manager"), limit)
        self._reply(conn_id, request, "accepted", receipt={"resources": resources})

    def _resource_control(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """resource.reconcile and resource.delete."""
        args = {**self._client_args(request), "manager": payload["manager"], "key": payload["key"]}
        self._send_write(conn_id, request, WriteCommand(request.operation, args))

    def _resource_events(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._reader is not None
        manager, key = payload["manager"], payload["key"]
        if not resource_queries.events_exist(self._reader, manager, key):
            self._reply(conn_id, request, "notFound", error=f"resource {manager}/{key} has no events")
            return
        limit = min(payload.get("limit") or 500, 5000)
        after = payload.get("after") or 0
        events = resource_queries.resource_events(self._reader, manager, key, after, limit)
        next_after = events[-1]["seq"] if events else after
        self._reply(conn_id, request, "accepted",
                    receipt={"events": events, "next_after": next_after, "more": len(events) == limit})
