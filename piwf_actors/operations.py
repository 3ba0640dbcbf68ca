"""Run operations shared by the embedding API and the client gateway.

Each function takes the host's writer handle (or a reader) and plain
arguments, and returns plain data. Workflow specs are resolved here, in the
calling thread: the host reads the workflow file once to compute its
definition digest and keep its source snapshot; the worker executes the
snapshot, never the file as it is later.
"""

from __future__ import annotations

import os
from typing import Any

from piwf_actors.actors.writer import WriterHandle
from piwf_actors.errors import NotFound, PiwfError, Rejected, WorkflowError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.command_records import recordable
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows import json_problem, load_snapshot
from piwf_actors.workflows.resolver import WorkflowResolver


def start_run(writer: WriterHandle, resolver: WorkflowResolver, **kwargs: Any) -> dict[str, Any]:
    """Resolve `workflow` and queue a run; returns {outcome, receipt: {run_id, status}, revision}."""
    command = start_run_command(resolver, **kwargs)
    return writer.call(command.name, command.args)


def start_run_command(resolver: WorkflowResolver, *, workflow: str, input: Any = None,
                      project_path: str | None = None, session_id: str | None = None, run_id: str | None = None,
                      client_id: str | None = None, idempotency_key: str | None = None,
                      request_id: str | None = None) -> WriteCommand:
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
    fingerprint_payload = {"workflow": workflow, "input": input, "project_path": project_path,
                           "session_id": session_id, "run_id": run_id}
    args: dict[str, Any] = {"client_id": client_id, "idempotency_key": idempotency_key,
                            "client_request_id": request_id, "payload": fingerprint_payload}
    try:
        resolved = resolver.resolve(workflow, project_path)
    except PiwfError as err:
        return _refused("run.start", args, err)
    args["spec"] = {
        "workflow": resolved.workflow.name, "workflow_path": resolved.path, "workflow_attr": resolved.attr,
        "definition_digest": resolved.workflow.digest, "source": resolved.source, "input": input,
        "project_path": project_path, "session_id": session_id, "run_id": run_id,
    }
    return WriteCommand("run.start", args)


def _refused(name: str, args: dict[str, Any], err: PiwfError) -> WriteCommand:
    """The command that records `err` as the outcome of a recorded request; `err` itself otherwise."""
    if not (args.get("client_id") and args.get("idempotency_key")) or not recordable(err.code):
        raise err
    return WriteCommand(name, {**args, "refusal": {"code": err.code, "message": err.one_line()}})


def restart_run(writer: WriterHandle, resolver: WorkflowResolver, database: DatabaseLocation, **kwargs: Any) -> dict[str, Any]:
    """Restart a finished run (see `restart_run_command`); returns {outcome, receipt, revision}."""
    command = restart_run_command(resolver, database, **kwargs)
    return writer.call(command.name, command.args)


def restart_run_command(resolver: WorkflowResolver, database: DatabaseLocation, *, run_id: str, expected_revision: int | None,
                        from_node: str | None = None, same_code: bool = False, client_id: str | None = None,
                        idempotency_key: str | None = None, request_id: str | None = None) -> WriteCommand:
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
    finally:
        reader.close()
    if parent is None:
        raise NotFound("run", run_id)
    if same_code:
        if from_node is not None:
            try:
                workflow = load_snapshot(parent["source"] or b"", parent["workflow_path"] or "<snapshot>",
                                         parent["workflow_attr"] or parent["workflow"],
                                         parent["definition_digest"] or "", parent["project_path"])
            except WorkflowError as exc:
                raise Rejected(f"the stored snapshot of run {run_id} no longer loads: {exc.one_line(500)}") from None
            args["node_ids"] = list(workflow.nodes)
    else:
        if not parent["workflow_path"]:
            raise Rejected(f"run {run_id} has no workflow file to resolve again; restart it with same_code")
        spec = f"{parent['workflow_path']}:{parent['workflow_attr'] or parent['workflow']}"
        try:
            resolved = resolver.resolve(spec, parent["project_path"])
        except WorkflowError as exc:
            raise Rejected(f"cannot load the workflow of run {run_id} again ({exc.one_line(400)}); fix it, or "
                           "restart with the stored code (same_code)") from None
        args["spec"] = {"workflow": resolved.workflow.name, "workflow_path": resolved.path,
                        "workflow_attr": resolved.attr, "definition_digest": resolved.workflow.digest,
                        "source": resolved.source}
        args["node_ids"] = list(resolved.workflow.nodes)
    return args
