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
from piwf_actors.errors import NotFound, Rejected, WorkflowError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
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
    """The `run.start` command for a workflow spec (resolving it reads the workflow file)."""
    problem = json_problem(input)
    if problem is not None:
        raise Rejected(f"run input: {problem.replace('output is', 'it is')}")
    if project_path is not None:
        project_path = os.path.abspath(project_path)
    resolved = resolver.resolve(workflow, project_path)
    spec = {
        "workflow": resolved.workflow.name, "workflow_path": resolved.path, "workflow_attr": resolved.attr,
        "definition_digest": resolved.workflow.digest, "source": resolved.source, "input": input,
        "project_path": project_path, "session_id": session_id, "run_id": run_id,
    }
    fingerprint_payload = {"workflow": workflow, "input": input, "project_path": project_path,
                           "session_id": session_id, "run_id": run_id}
    return WriteCommand("run.start", {"spec": spec, "client_id": client_id, "idempotency_key": idempotency_key,
                                      "client_request_id": request_id, "payload": fingerprint_payload})


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
    reader = StoreReader(database)
    try:
        parent = queries.run_source(reader, run_id)
    finally:
        reader.close()
    if parent is None:
        raise NotFound("run", run_id)
    args: dict[str, Any] = {"run_id": run_id, "expected_revision": expected_revision, "client_id": client_id,
                            "idempotency_key": idempotency_key, "client_request_id": request_id,
                            "payload": {"from_node": from_node, "same_code": same_code}}
    if from_node is not None:
        args["from_node"] = from_node
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
    return WriteCommand("run.restart", args)
