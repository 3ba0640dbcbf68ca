"""Executes one reconcile inside the worker process (a launch of kind `reconcile`).

The worker loads the manager file fresh, tells the supervisor's watchdog the
manager's `timeout_s` (`node_begin`), calls `reconcile(ctx)` (or `finalize`
for a resource being deleted) under the same SIGALRM deadline as a node, and
reports the checked result with `finish`. Every request is answered only
after the writer committed it, in order (`SupervisorLink`), so an effect's
`applying` is durable before its function runs, and its `applied` before the
reconcile goes on.

`ctx.effect(key, fn)` is at most once per (resource, key): a later reconcile
gets the recorded result without running `fn`; an effect a killed worker left
`applying` is `ambiguous`, and the reconcile ends with an error (back-off)
until a person resolves it (`piwf effect resolve`). `ctx.workflows.ensure`
asks the host for the owned run first and loads the workflow only to start it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from piwf_actors.errors import WorkflowError
from piwf_actors.resources.policy import BadResult, check_result
from piwf_actors.worker.node_guard import NodeTimeout, deadline, user_traceback
from piwf_actors.worker.supervisor_link import SupervisorLink
from piwf_actors.workflows import json_problem, resolve
from piwf_actors.workflows.resource_manager import load_manager
from piwf_actors.workflows.waits import concurrency_key, wait_topics

log = logging.getLogger(__name__)


class EffectAmbiguous(Exception):
    """An effect of this resource may or may not have happened; a person must resolve it."""

    def __init__(self, key: str, effect_id: str) -> None:
        super().__init__(f"effect {key!r} ({effect_id}) is ambiguous: a reconcile that ran it was killed before "
                         f"its outcome was recorded; resolve it with `piwf effect resolve {effect_id} "
                         "confirm|retry`")
        self.key, self.effect_id = key, effect_id


class ResourceWorkflows:
    """`ctx.workflows`: the runs a resource owns."""

    def __init__(self, link: SupervisorLink, project_path: str | None) -> None:
        self._link = link
        self._project_path = project_path

    def ensure(self, name: str, input: Any = None, key: str = "default") -> dict[str, Any]:
        """The run this resource owns under `key` — started with workflow `name` and `input` if there is
        none yet — as {run_id, status, output, error}. Its run id derives from (manager, resource key,
        key): the same run every time, also after a crash; when it ends, the resource is reconciled."""
        if not isinstance(key, str) or not key:
            raise ValueError("workflows.ensure needs a non-empty str key")
        problem = json_problem(input)
        if problem is not None:
            raise ValueError(f"workflows.ensure input: {problem}")
        found = self._link.accepted("workflow_ensure", {"key": key, "input": input, "name": name}, fenced=False)
        if found.get("missing"):
            resolved = resolve(name, self._project_path)
            spec: dict[str, Any]
            spec = {"workflow": resolved.workflow.name, "workflow_path": resolved.path, "workflow_attr": resolved.attr,
                    "definition_digest": resolved.workflow.digest, "source": resolved.source,
                    "graph": resolved.graph(),  # stored with the run: drawing it runs no code
                    "wait_topics": wait_topics(resolved.workflow)}
            limited = concurrency_key(resolved.workflow, input)  # its limit holds for a resource's runs too
            if limited is not None:
                spec.update(concurrency_key=limited[0], concurrency_max=limited[1])
            found = self._link.accepted("workflow_ensure", {"key": key, "input": input, "name": name, "spec": spec},
                                        fenced=False)
        return {field: found.get(field) for field in ("run_id", "status", "output", "error")}


class ReconcileContext:
    """What `reconcile(ctx)` and `finalize(ctx)` receive."""

    def __init__(self, link: SupervisorLink, launch: dict[str, Any]) -> None:
        resource = launch["state"]
        self.manager: str = launch["manager"]
        self.key: str = launch["key"]
        self.uid: str = launch["uid"]
        self.spec: Any = resource["spec"]
        self.status: dict[str, Any] = dict(resource["status"] or {})
        self.finalizers: list[str] = list(resource["finalizers"] or [])
        self.generation: int = resource["generation"]
        self.deleting: bool = bool(resource["deleting"])
        self.workflows = ResourceWorkflows(link, launch.get("project_path"))
        self._link = link
        #: The first ambiguous effect met: the reconcile ends with an error whatever it returns.
        self.ambiguous: EffectAmbiguous | None = None

    def effect(self, key: str, fn: Any) -> Any:
        """Run `fn()` at most once for this resource and `key`; its result (a JSON value) is recorded and
        returned, now and to every later reconcile that asks for the same key."""
        if not isinstance(key, str) or not key:
            raise ValueError("ctx.effect needs a non-empty str key")
        reserved = self._link.accepted("effect_reserve", {"key": key}, fenced=False)
        if reserved["state"] == "applied":
            return reserved["result"]
        if reserved["state"] == "ambiguous":
            self.ambiguous = self.ambiguous or EffectAmbiguous(key, reserved["effect_id"])
            raise self.ambiguous
        try:
            value = fn()
            problem = json_problem(value)
            if problem is not None:
                raise ValueError(f"the result of effect {key!r}: {problem}")
        except BaseException as exc:
            # A function that raised failed (the next reconcile runs it again); one cut off by the
            # timeout may have done its work: the effect becomes ambiguous, for a person to resolve.
            self._link.accepted("effect_settle", {"effect_id": reserved["effect_id"], "ok": False,
                                                  "interrupted": isinstance(exc, NodeTimeout),
                                                  "error": _one_line(exc)}, fenced=False)
            raise
        self._link.accepted("effect_settle", {"effect_id": reserved["effect_id"], "ok": True, "result": value},
                            fenced=False)
        return value


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:1000]


def run_reconcile(link: SupervisorLink, launch: dict[str, Any]) -> None:
    """The whole reconcile: ready, load, call, finish. Whatever the manager does, `finish` is sent."""
    started = time.monotonic()
    link.accepted("ready", {}, fenced=False)
    ctx = ReconcileContext(link, launch)
    outcome, digest = _call(link, launch, ctx)
    if ctx.ambiguous is not None and outcome["result"] != "error":
        outcome = {"result": "error", "status_patch": {}, "error": str(ctx.ambiguous)}
    link.accepted("finish", {**outcome, "generation": ctx.generation, "manager_digest": digest,
                             "duration_ms": round((time.monotonic() - started) * 1000)}, fenced=False)


def _call(link: SupervisorLink, launch: dict[str, Any], ctx: ReconcileContext) -> tuple[dict[str, Any], str | None]:
    try:
        manager, digest = load_manager(launch["manager_path"], launch["manager"], launch.get("project_path"))
    except WorkflowError as exc:
        return {"result": "error", "status_patch": {}, "error": exc.one_line(2000)}, None
    # The host's watchdog stops the worker from outside if the deadline below cannot.
    link.notify({"kind": "node_begin", "node_id": "reconcile", "attempt_id": launch["reconcile_id"],
                 "timeout_s": manager.timeout_s})
    fn = manager.finalize if ctx.deleting and manager.finalize is not None else manager.reconcile
    try:
        with deadline(manager.timeout_s):
            value = fn(ctx)
        return check_result(value), digest
    except NodeTimeout:
        return {"result": "error", "status_patch": {}, "error": f"timed out after {manager.timeout_s:g} s"}, digest
    except BadResult as exc:
        return {"result": "error", "status_patch": {}, "error": str(exc)}, digest
    except EffectAmbiguous as exc:
        return {"result": "error", "status_patch": {}, "error": str(exc)}, digest
    except Exception as exc:  # the manager's own failure: recorded, backed off, never fatal to the worker
        log.info("reconcile of %s/%s failed:\n%s", ctx.manager, ctx.key, user_traceback(exc))
        return {"result": "error", "status_patch": {}, "error": _one_line(exc)}, digest
