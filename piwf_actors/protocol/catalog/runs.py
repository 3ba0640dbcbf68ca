"""Runs: run.start, run.list, run.get, run.source, run.graph, run.events, run.cancel|pause|resume,
run.restart, effect.resolve, effect.list.

The write commands of run.start and run.restart are built by
`start_run_command` and `restart_run_command` (the schedule keeper builds its
fires' runs with the first). Workflow specs are resolved in the calling
thread: the host reads the workflow file once to compute its definition
digest and keep its source snapshot; the worker executes the snapshot,
never the file as it is later.

`run.start` keeps to two thread hand-offs (socket thread → gateway → writer)
whenever the workflow's resolution is cached, its file unchanged and it has no
concurrency key function; otherwise the command is built on a user-code
thread (workflows/user_code.py: loading the file, calling the key function,
each bounded in time), which submits it itself (docs/protocol.md 3.5). No
workflow code runs on the gateway's thread.
"""

from __future__ import annotations

import os
from typing import Any

from piwf_actors.errors import NotFound, PiwfError, Rejected, WorkflowError, WorkflowLoadTimedOut
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol import views
from piwf_actors.protocol.catalog.registry import (
    BuildEnv,
    OperationContext,
    client_args,
    operation,
    write_operation,
)
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.statuses import RUN_STATUSES
from piwf_actors.store import effect_queries, queries
from piwf_actors.store.command_records import recordable
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows import json_problem
from piwf_actors.workflows.discovery import ResolvedWorkflow
from piwf_actors.workflows.graph_data import GraphDataError, document_from_bytes, graph_blob
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.rate_limits import runs_flow_code
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.shapes import input_refusal
from piwf_actors.workflows.waits import runs_user_code, wait_topics

#: The largest priority either way (an integer; higher starts first).
MAX_PRIORITY = 1_000_000

# --- reads -------------------------------------------------------------------------------------


@operation("run.list", payload={"status": ("str", False), "limit": ("int", False), "workflow": ("str", False),
                                "since": ("num", False), "parent": ("str", False), "cursor": ("str", False)},
           read_only=True)
def run_list(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """From memory when the gateway's run window holds the answer (see LiveViews.run_list); a
    run's children (`parent`) and a page after the first (`cursor`) from the database. A full page
    carries `next_cursor`: the place of its last run, for the next page."""
    status = payload.get("status")
    if status is not None and status not in RUN_STATUSES:
        raise BadRequest(f"run.list: unknown status {status!r}", ctx.request.request_id)
    limit = min(payload.get("limit") or 100, 1000)
    before = _cursor(ctx.request, payload.get("cursor"))
    if payload.get("parent") or before is not None:
        runs = queries.run_list(ctx.reader, status, limit, workflow=payload.get("workflow"),
                                since=payload.get("since"), parent=payload.get("parent"), before=before)
    else:
        runs = ctx.views.run_list(status, limit, payload.get("workflow"), payload.get("since"))
    receipt: dict[str, Any] = {"runs": runs}
    if runs and len(runs) == limit:
        receipt["next_cursor"] = f"{runs[-1]['created_at']!r}/{runs[-1]['run_id']}"
    ctx.reply("accepted", receipt=receipt)


def _cursor(request: Request, cursor: str | None) -> tuple[float, str] | None:
    """`run.list`'s cursor (`created_at/run_id` of a page's last run) as the query takes it."""
    if not cursor:
        return None
    created, _, run_id = cursor.partition("/")
    try:
        created_at = float(created)
    except ValueError:
        created_at = float("nan")
    if created_at != created_at or not run_id:
        raise BadRequest("run.list: cursor is not one run.list gave", request.request_id)
    return created_at, run_id


@operation("run.get", needs_run=True, read_only=True)
def run_get(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    run_id = ctx.request.run_id
    assert run_id is not None
    view = queries.run_view(ctx.reader, run_id, ctx.timer_now())
    if view is None:
        ctx.reply("notFound", error=f"run {run_id} not found")
        return
    ctx.reply("accepted", receipt=view, revision=view["revision"])


def source_receipt(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    """`run.source`'s receipt: where the run's workflow came from and its stored source snapshot — the
    bytes inline up to CONTENT_INLINE_BYTES, else only `source_sha256` to read with content.read."""
    found = queries.run_source(reader, run_id)
    if found is None:
        return None
    source = found.pop("source")  # its digest is the one stored with the run (blobs are keyed by it)
    receipt = {"run_id": run_id, **found, "source_bytes": 0 if source is None else len(source)}
    if source is not None and len(source) <= queries.CONTENT_INLINE_BYTES:
        receipt["source"] = source
    return receipt


@operation("run.source", needs_run=True, read_only=True)
def run_source(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    """The run's workflow snapshot as stored (bytes): the host runs none of it here. Drawing a run reads
    `run.graph` instead, which needs no code loaded anywhere."""
    assert ctx.request.run_id is not None
    _reply_about_run(ctx, source_receipt(ctx.reader, ctx.request.run_id))


def _reply_about_run(ctx: OperationContext, receipt: dict[str, Any] | None) -> None:
    """Answer a read of the request's run: its receipt, or `notFound` (None: no such run)."""
    if receipt is None:
        ctx.reply("notFound", error=f"run {ctx.request.run_id} not found")
        return
    ctx.reply("accepted", receipt=receipt)


def graph_receipt(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    """`run.graph`'s receipt: the graph the host stored when the run started (workflows/graph_data.py) —
    the document inline up to CONTENT_INLINE_BYTES, else only `graph_sha256` to read with content.read;
    `graph_sha256` None for a run stored without one (before schema v16). None: no such run."""
    found = queries.run_graph(reader, run_id)
    if found is None:
        return None
    key, data = found
    receipt: dict[str, Any] = {"run_id": run_id, "graph_sha256": key if data is not None else None,
                               "graph_bytes": 0 if data is None else len(data)}
    if data is not None and len(data) <= queries.CONTENT_INLINE_BYTES:
        try:
            receipt["graph"] = document_from_bytes(data)
        except GraphDataError:
            pass  # a client that reads it by its key is told the same by its own check
    return receipt


@operation("run.graph", needs_run=True, read_only=True)
def run_graph(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    """The run's definition as data, to draw it (`piwf graph RUN`, piwf-top): stored bytes only, no code."""
    assert ctx.request.run_id is not None
    _reply_about_run(ctx, graph_receipt(ctx.reader, ctx.request.run_id))


@operation("run.events", payload={"after": ("int", False), "limit": ("int", False)}, needs_run=True, read_only=True)
def run_events(ctx: OperationContext, payload: dict[str, Any]) -> None:
    run_id = ctx.request.run_id
    assert run_id is not None
    status = queries.run_status(ctx.reader, run_id)
    if status is None:
        ctx.reply("notFound", error=f"run {run_id} not found")
        return
    limit = min(payload.get("limit") or 500, 5000)
    events = queries.run_events(ctx.reader, run_id, payload.get("after") or 0, limit)
    events, cut = views.fit(events)
    next_after = events[-1]["seq"] if events else (payload.get("after") or 0)
    ctx.reply("accepted", revision=status[1],
              receipt={"events": events, "next_after": next_after, "more": cut or len(events) == limit})


# --- run.start -----------------------------------------------------------------------------------


class NotCached(Exception):
    """Building the command would run workflow code (the workflow is not resolved yet, its file changed,
    it has a concurrency key function, a snapshot must be loaded): that is a user-code thread's job."""


class CachedOnly(WorkflowResolver):
    """A shared resolver's cached resolutions, and nothing else: whatever would run workflow code
    raises `NotCached` instead of running it in the calling thread (a door's)."""

    def __init__(self, shared: WorkflowResolver) -> None:
        super().__init__(user_code=shared.user_code)
        self._shared = shared

    def resolve(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        found = self._shared.cached(spec, project_path)
        if found is None:
            raise NotCached(spec)
        return found

    def concurrency_key(self, workflow: Workflow, run_input: Any) -> tuple[str, int] | None:
        if runs_user_code(workflow):
            raise NotCached(workflow.name)
        return super().concurrency_key(workflow, run_input)

    def flow_spec(self, workflow: Workflow, run_input: Any, *, rate_only: bool = False) -> dict[str, Any]:
        if runs_flow_code(workflow):
            raise NotCached(workflow.name)
        return super().flow_spec(workflow, run_input, rate_only=rate_only)

    def load_snapshot(self, source: bytes, path: str, attr: str, expected_digest: str,
                      project_path: str | None) -> Workflow:
        raise NotCached(path)


def cached_env(env: BuildEnv) -> BuildEnv:
    """`env` whose resolver answers from the cache only (`NotCached` otherwise)."""
    return BuildEnv(CachedOnly(env.resolver), env.database)


def _start(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """Two hand-offs when no workflow code must run: the command is built here and goes to the writer;
    otherwise a user-code thread builds it and submits it (see the module docstring)."""
    try:
        command = ctx.build(payload, ctx.services.cached_env)
    except NotCached:
        ctx.write_from_user_code(lambda: ctx.build(payload))
        return
    ctx.write(command)


@write_operation("run.start", payload={"workflow": ("str", True), "input": ("any", False),
                                       "project_path": ("str", False), "session_id": ("str", False),
                                       "run_id": ("str", False), "priority": ("signed", False)}, handler=_start)
def run_start(env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    return start_run_command(env.resolver, workflow=payload["workflow"], input=payload.get("input"),
                             project_path=payload.get("project_path"), session_id=payload.get("session_id"),
                             run_id=payload.get("run_id"), client_id=request.client_id,
                             idempotency_key=request.idempotency_key, request_id=request.request_id,
                             priority=payload.get("priority"))


def start_run_command(resolver: WorkflowResolver, *, workflow: str, input: Any = None,
                      project_path: str | None = None, session_id: str | None = None, run_id: str | None = None,
                      client_id: str | None = None, idempotency_key: str | None = None,
                      request_id: str | None = None, priority: int | None = None) -> WriteCommand:
    """The `run.start` command for a workflow spec (resolving it reads the workflow file).

    A workflow the host cannot resolve still becomes the command when the request is recorded (a
    client id and key): it carries the refusal, so the writer records it under the key — a replay
    meets the same refusal even once the file exists, and the replay of an accepted start is
    `adopted` even if its file no longer loads. Without a key the refusal is raised at once, as is
    an input that is not JSON (it could not even be fingerprinted; a replay is refused alike).
    """
    problem = json_problem(input)
    if problem is not None:
        raise Rejected(f"run input: {problem.replace('output is', 'it is')}")
    if project_path is not None:
        project_path = os.path.abspath(project_path)
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or abs(priority) > MAX_PRIORITY):
        raise Rejected(f"priority must be an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, got {priority!r}")
    fingerprint_payload = {"workflow": workflow, "input": input, "project_path": project_path,
                           "session_id": session_id, "run_id": run_id}
    if priority:  # absent when 0: a replay of a start recorded before priorities still matches
        fingerprint_payload["priority"] = priority
    args: dict[str, Any] = {"client_id": client_id, "idempotency_key": idempotency_key,
                            "client_request_id": request_id, "payload": fingerprint_payload}
    try:
        resolved = resolver.resolve(workflow, project_path)
    except PiwfError as err:
        return _refused("run.start", args, err)
    try:
        # Here, where the host holds the definition: a run that would fail on its input is never queued.
        _check_input(resolved, input)
        limited = _limit(resolver, resolved, input)
        flow = _flow(resolver, resolved, input)
    except Rejected as err:
        return _refused("run.start", args, err)
    args["spec"] = {
        "workflow": resolved.workflow.name, "workflow_path": resolved.path, "workflow_attr": resolved.attr,
        "definition_digest": resolved.workflow.digest, "source": resolved.source, "input": input,
        "project_path": project_path, "session_id": session_id, "run_id": run_id, "priority": priority or 0,
        "concurrency_key": None if limited is None else limited[0],
        "concurrency_max": None if limited is None else limited[1],
        "graph": resolved.graph(),  # drawing the run loads nothing (workflows/graph_data.py)
        "wait_topics": wait_topics(resolved.workflow),  # for message.send to tell a topic nobody waits on
        **flow,  # rate limit and debounce (workflows/rate_limits.py)
    }
    return WriteCommand("run.start", args)


def _check_input(resolved: ResolvedWorkflow, run_input: Any) -> None:
    """Refuse an input without the workflow's declared shape (`define_workflow(input=…)`): one line
    naming each problem's path, then the shape expected (workflows/shapes.py)."""
    refusal = input_refusal(resolved.workflow.input_shape, run_input)
    if refusal is not None:
        raise Rejected(refusal)


def _limit(resolver: WorkflowResolver, resolved: ResolvedWorkflow, run_input: Any) -> tuple[str, int] | None:
    """The (concurrency key, max) a run of `resolved` with `run_input` counts against, or None. The
    workflow's own key function runs on the resolver's user-code thread, bounded in time: whatever it
    raises (SystemExit too) refuses the run with one line naming it; so does a key that is not a
    JSON-like value (BadLimitKey) or that takes too long (UserCodeTimeout)."""
    try:
        return resolver.concurrency_key(resolved.workflow, run_input)
    except (NotCached, PiwfError):
        raise
    except (Exception, SystemExit) as exc:
        raise Rejected(f"workflow {resolved.workflow.name!r}: its concurrency key raised "
                       f"{type(exc).__name__}: {exc}"[:1000]) from None


def _flow(resolver: WorkflowResolver, resolved: ResolvedWorkflow, run_input: Any,
          rate_only: bool = False) -> dict[str, Any]:
    """The rate limit and debounce columns of a start (workflows/rate_limits.py), its key functions
    bounded like the concurrency key's: whatever they raise refuses the run with one line."""
    try:
        return resolver.flow_spec(resolved.workflow, run_input, rate_only=rate_only)
    except (NotCached, PiwfError):
        raise
    except (Exception, SystemExit) as exc:
        raise Rejected(f"workflow {resolved.workflow.name!r}: its rate or debounce key raised "
                       f"{type(exc).__name__}: {exc}"[:1000]) from None


def _refused(name: str, args: dict[str, Any], err: PiwfError) -> WriteCommand:
    """The command that records `err` as the outcome of a recorded request; `err` itself otherwise (also
    for a transient one: workflow code that ran out of time may be quick on a replay)."""
    if (not (args.get("client_id") and args.get("idempotency_key")) or not recordable(err.code)
            or getattr(err, "transient", False)):
        raise err
    return WriteCommand(name, {**args, "refusal": {"code": err.code, "message": err.one_line()}})


# --- control -------------------------------------------------------------------------------------


@write_operation("run.cancel", needs_run=True)
@write_operation("run.pause", needs_run=True)
@write_operation("run.resume", needs_run=True)
def run_control(_env: BuildEnv, request: Request, _payload: dict[str, Any]) -> WriteCommand:
    return WriteCommand(request.operation, client_args(request))


@write_operation("effect.resolve", payload={"effect_id": ("str", True), "action": ("str", True),
                                            "output": ("any", False)})
def effect_resolve(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    if payload["action"] not in ("confirm", "retry"):
        raise BadRequest("effect.resolve: action must be confirm or retry", request.request_id)
    return WriteCommand("effect.resolve", {**client_args(request), "effect_id": payload["effect_id"],
                                           "action": payload["action"], "output": payload.get("output"),
                                           "peer": request.peer})  # who resolved it (not fingerprinted)


@operation("effect.list", payload={"status": ("str", False), "limit": ("int", False), "cursor": ("str", False)},
           read_only=True)
def effect_list(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The effects waiting for a person (`status`: ambiguous, the default), newest first, each with its
    run and attempt, in one indexed read; a full page carries `next_cursor` (docs/protocol.md)."""
    status = payload.get("status") or "ambiguous"
    if status not in effect_queries.LISTED_STATUSES:
        raise BadRequest(f"effect.list: status must be one of {', '.join(effect_queries.LISTED_STATUSES)}",
                         ctx.request.request_id)
    limit = max(1, min(payload.get("limit") or 100, 500))
    before = None
    if payload.get("cursor"):
        reserved, _, effect_id = payload["cursor"].partition("/")
        try:
            before = (float(reserved), effect_id)
        except ValueError:
            before = None
        if before is None or before[0] != before[0] or not effect_id:
            raise BadRequest("effect.list: cursor is not one effect.list gave", ctx.request.request_id)
    effects = effect_queries.listed_effects(ctx.reader, status, limit, before)
    receipt: dict[str, Any] = {"effects": effects}
    if len(effects) == limit:
        receipt["next_cursor"] = f"{effects[-1]['reserved_at']!r}/{effects[-1]['effect_id']}"
    ctx.reply("accepted", receipt=receipt)


# --- run.restart ---------------------------------------------------------------------------------


@write_operation("run.restart", payload={"from_node": ("str", False), "same_code": ("bool", False)},
                 needs_run=True, needs_revision=True, off_thread=True)
def run_restart(env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    """Reads the parent and resolves its workflow again (which runs its file): on a user-code thread."""
    assert request.run_id is not None
    return restart_run_command(env.resolver, env.database, run_id=request.run_id,
                               expected_revision=request.expected_revision, from_node=payload.get("from_node"),
                               same_code=bool(payload.get("same_code", False)), client_id=request.client_id,
                               idempotency_key=request.idempotency_key, request_id=request.request_id)


def restart_run_command(resolver: WorkflowResolver, database: DatabaseLocation, *, run_id: str,
                        expected_revision: int | None, from_node: str | None = None, same_code: bool = False,
                        client_id: str | None = None, idempotency_key: str | None = None,
                        request_id: str | None = None) -> WriteCommand:
    """The `run.restart` command for a finished run.

    By default the workflow is resolved again from the run's file and attribute, so the new run
    runs the current code (the receipt's `digest_changed` says whether it differs); `same_code`
    runs the parent's stored snapshot. `from_node` must be a node of the definition that will
    run; its node ids travel with the command so the writer can check it. Resolving executes
    the workflow file, here, in the calling thread (never the writer's).
    """
    args: dict[str, Any] = {"run_id": run_id, "expected_revision": expected_revision, "client_id": client_id,
                            "idempotency_key": idempotency_key, "client_request_id": request_id,
                            "payload": {"from_node": from_node, "same_code": same_code}}
    if from_node is not None:
        args["from_node"] = from_node
    try:
        return WriteCommand("run.restart", _resolve_restart(resolver, database, args, same_code))
    except PiwfError as err:
        return _refused("run.restart", args, err)  # recorded like a refusal of the writer's (see start)


def _resolve_restart(resolver: WorkflowResolver, database: DatabaseLocation, base: dict[str, Any],
                     same_code: bool) -> dict[str, Any]:
    """The restart's args: `base` with the parent's node ids and, unless `same_code`, its workflow
    resolved again (which runs the file). Raises the refusal when the parent or its code cannot be read."""
    args = dict(base)
    run_id, from_node = args["run_id"], args.get("from_node")
    reader = StoreReader(database)
    try:
        parent = queries.run_source(reader, run_id)
        if parent is not None:
            graph = queries.run_graph(reader, run_id)  # None: the run went meanwhile (pruned)
            parent["graph_sha256"] = graph[0] if graph is not None else None
    finally:
        reader.close()
    if parent is None:
        raise NotFound("run", run_id)
    if same_code:
        # The new run shares the parent's graph (the writer copies its key); a parent stored before
        # run graphs has none, so its snapshot is loaded here for one when it loads.
        if from_node is not None or parent["graph_sha256"] is None:
            try:
                workflow = resolver.load_snapshot(parent["source"] or b"", parent["workflow_path"] or "<snapshot>",
                                                  parent["workflow_attr"] or parent["workflow"],
                                                  parent["definition_digest"] or "", parent["project_path"])
            except WorkflowLoadTimedOut:
                raise  # transient: not recorded
            except WorkflowError as exc:
                if from_node is None:
                    return args  # no graph for it then: drawn from the nodes it reaches, like its parent
                raise Rejected(f"the stored snapshot of run {run_id} no longer loads: {exc.one_line(500)}") from None
            args["node_ids"] = list(workflow.nodes)
            args["function"] = workflow.function is not None  # its nodes are the steps the run recorded
            args["graph"] = graph_blob(workflow)
    else:
        if not parent["workflow_path"]:
            raise Rejected(f"run {run_id} has no workflow file to resolve again; restart it with same_code")
        spec = f"{parent['workflow_path']}:{parent['workflow_attr'] or parent['workflow']}"
        try:
            resolved = resolver.resolve(spec, parent["project_path"])
        except WorkflowLoadTimedOut:
            raise  # transient: not recorded
        except WorkflowError as exc:
            raise Rejected(f"cannot load the workflow of run {run_id} again ({exc.one_line(400)}); fix it, or "
                           "restart with the stored code (same_code)") from None
        args["spec"] = {"workflow": resolved.workflow.name, "workflow_path": resolved.path,
                        "workflow_attr": resolved.attr, "definition_digest": resolved.workflow.digest,
                        "source": resolved.source, "graph": resolved.graph(),
                        "wait_topics": wait_topics(resolved.workflow),
                        **_restart_limit(resolver, resolved, database, run_id)}
        args["node_ids"] = list(resolved.workflow.nodes)
        args["function"] = resolved.workflow.function is not None
    return args


def _restart_limit(resolver: WorkflowResolver, resolved: ResolvedWorkflow, database: DatabaseLocation,
                   run_id: str) -> dict[str, Any]:
    """The concurrency key a restart running `resolved` counts against: the new code's limit applied
    to the run's input (a limit removed is gone; one added applies). The input must also have the new
    code's input shape: a restart that would fail on it is refused."""
    workflow = resolved.workflow
    if workflow.concurrency is None and workflow.input_shape is None and workflow.rate is None:
        return {"concurrency_key": None, "concurrency_max": None, **_NO_RATE}
    reader = StoreReader(database)
    try:
        run_input = queries.run_input(reader, run_id)
    finally:
        reader.close()
    refusal = input_refusal(workflow.input_shape, run_input)
    if refusal is not None:
        raise Rejected(f"the input of run {run_id} does not fit the current code of {workflow.name!r}: {refusal}; "
                       "restart it with the stored code (same_code)")
    rate = {**_NO_RATE, **_rate(resolver, resolved, run_input)}  # the new code's rate limit
    if workflow.concurrency is None:
        return {"concurrency_key": None, "concurrency_max": None, **rate}
    limited = _limit(resolver, resolved, run_input)
    assert limited is not None
    return {"concurrency_key": limited[0], "concurrency_max": limited[1], **rate}


_NO_RATE = {"rate_key": None, "rate_max": None, "rate_per_s": None}


def _rate(resolver: WorkflowResolver, resolved: ResolvedWorkflow, run_input: Any) -> dict[str, Any]:
    """The rate columns of `_flow` alone: a restart is a start, never debounced."""
    return _flow(resolver, resolved, run_input, rate_only=True)
