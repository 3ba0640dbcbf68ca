"""Resource managers: resource.get|list|events (read-only), resource.apply|reconcile|delete (recorded).

Reads are answered from the gateway's connection. `resource.apply` reads and
hashes the manager file on the gateway's executor (never in the gateway's
thread, never in the writer), refuses a digest that is not the client's
(`conflict`: the file changed after the client looked at it), and submits the
command from there. See docs/protocol.md and docs/resource-managers.md.
"""

from __future__ import annotations

import os
from typing import Any

from piwf_actors.errors import Conflict, Rejected
from piwf_actors.protocol.catalog.registry import (
    BuildEnv,
    OperationContext,
    Spec,
    client_args,
    operation,
    write_operation,
)
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.store import resource_queries
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows.resource_manager import MANAGER_NAME, file_digest, manager_path

_RESOURCE: Spec = {"manager": ("str", True), "key": ("str", True)}


def _check_apply(request: Request, payload: dict[str, Any]) -> None:
    project_path = payload["project_path"]
    if not os.path.isabs(project_path) or os.path.normpath(project_path) != project_path:
        raise BadRequest("resource.apply: project_path must be absolute and normalised", request.request_id)
    if not MANAGER_NAME.fullmatch(payload["manager"]):
        raise BadRequest(f"resource.apply: manager must match {MANAGER_NAME.pattern}", request.request_id)


def _apply(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The payload is checked here (a bad one is answered at once); the file is read off-thread."""
    _check_apply(ctx.request, payload)
    ctx.write_from_executor(lambda: ctx.build(payload))


@write_operation("resource.apply", payload={**_RESOURCE, "spec": ("any", True), "initial_status": ("map", False),
                                            "project_path": ("str", True), "digest": ("str", True)}, handler=_apply)
def resource_apply(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    """The `resource.apply` command, once the manager file is found and its digest is the client's
    (this reads the file)."""
    _check_apply(request, payload)
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
        **client_args(request), "manager": payload["manager"], "key": payload["key"], "spec": payload["spec"],
        "initial_status": payload.get("initial_status"), "project_path": payload["project_path"],
        "manager_path": path, "manager_digest": digest})


@operation("resource.get", payload=_RESOURCE, read_only=True)
def resource_get(ctx: OperationContext, payload: dict[str, Any]) -> None:
    view = resource_queries.resource_get(ctx.reader, payload["manager"], payload["key"])
    if view is None:
        ctx.reply("notFound", error=f"resource {payload['manager']}/{payload['key']} not found")
        return
    ctx.reply("accepted", receipt=view, revision=view["resource_version"])


@operation("resource.list", payload={"manager": ("str", False), "limit": ("int", False)}, read_only=True)
def resource_list(ctx: OperationContext, payload: dict[str, Any]) -> None:
    limit = min(payload.get("limit") or 500, 5000)
    resources = resource_queries.resource_list(ctx.reader, payload.get("manager"), limit)
    ctx.reply("accepted", receipt={"resources": resources})


@write_operation("resource.reconcile", payload=_RESOURCE)
@write_operation("resource.delete", payload=_RESOURCE)
def resource_control(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    return WriteCommand(request.operation, {**client_args(request), "manager": payload["manager"],
                                            "key": payload["key"]})


@operation("resource.events", payload={**_RESOURCE, "after": ("int", False), "limit": ("int", False)},
           read_only=True)
def resource_events(ctx: OperationContext, payload: dict[str, Any]) -> None:
    manager, key = payload["manager"], payload["key"]
    if not resource_queries.events_exist(ctx.reader, manager, key):
        ctx.reply("notFound", error=f"resource {manager}/{key} has no events")
        return
    limit = min(payload.get("limit") or 500, 5000)
    after = payload.get("after") or 0
    events = resource_queries.resource_events(ctx.reader, manager, key, after, limit)
    next_after = events[-1]["seq"] if events else after
    ctx.reply("accepted", receipt={"events": events, "next_after": next_after, "more": len(events) == limit})
