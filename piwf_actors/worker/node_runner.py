"""One node attempt, as both engines run it: the graph's (worker/engine.py) and the function form's
(worker/function_engine.py), so a durable function's step behaves exactly as the node of that kind.

`NodeRunner.execute` runs one attempt of a node and returns its `node_finished` payload without
`next` (or None when the run parked or the host stopped it): a side-effecting node first reserves its
effect (`effect_reserve`), a waiting node asks for its durable wait (`wait_request`), an interactive
one for its request (`interaction_request`), the others are run here by their kind's executor
(worker/executors/). A report with `interrupted` is an effect cut off by its own timeout: the engine
tells the host (`effect_interrupted`), which parks the run `ambiguous_effect`.

Everything here runs in the worker's launch thread.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from piwf_actors.ids import new_id
from piwf_actors.json_values import json_value_problem
from piwf_actors.tracing.ids import node_traceparent
from piwf_actors.worker.executors import executor_for
from piwf_actors.worker.executors.base import Ask, NodeCall, Run, Wait
from piwf_actors.worker.node_guard import NodeTimeout, one_line, user_traceback
from piwf_actors.worker.output_check import (
    MAX_PRESENTED_BYTES,
    OutputInvalid,
    OutputTooLarge,
    checked_children,
    checked_output,
)
from piwf_actors.worker.supervisor_link import SupervisorLink
from piwf_actors.worker.termination import machine_identity
from piwf_actors.workflows import NodeContext, Workflow, node_context
from piwf_actors.workflows.rate_limits import node_rate_key

log = logging.getLogger("piwf_actors.worker.engine")


class MessageRefused(Exception):
    """The host refused a node's `ctx.send_message` (the run has ended, a bad topic), or the worker did:
    its payload is not a value a run can hold (json_values.py)."""


def pipelined(spec: Any, report: dict[str, Any]) -> bool:
    """A pure node's result that need not be waited for: nothing outside the worker depends on it
    before the next wait (its effects and interactions have none, and its end is not the run's).
    Which kinds are pure is their executor's `pipelined` (worker/executors/)."""
    executor = executor_for(spec)
    return (isinstance(executor, Run) and executor.pipelined and report.get("effect_id") is None
            and report.get("request_id") is None)


def message_sender(link: SupervisorLink, node_id: str, key: list[Any]) -> Callable[[str, str, Any], dict[str, Any]]:
    """A `send_message` whose n-th message is keyed `key + [n]`: a key the same attempt (or the same
    call of a function, replayed) makes again names the same message, which the host keeps once."""
    sent = itertools.count()

    def send(run_id: str, topic: str, payload: Any = None) -> dict[str, Any]:
        problem = json_value_problem(payload, "the message's payload")
        if problem is not None:  # refused here, as the client door refuses it (json_values.py)
            raise MessageRefused(problem)
        answer = link.request("message_send", {
            "node_id": node_id, "run_id": run_id, "topic": topic, "payload": payload,
            "key": [*key, next(sent)]}, fenced=False)
        if answer.get("outcome") != "accepted":
            raise MessageRefused(str(answer.get("error") or answer.get("outcome")))
        value: dict[str, Any] = answer["value"]
        return value

    return send


class NodeRunner:
    """Runs node attempts of one launch for an engine (see the module docstring)."""

    def __init__(self, workflow: Workflow, link: SupervisorLink, *, trace_context: bool = False) -> None:
        self.workflow = workflow
        self.link = link
        self._trace_context = trace_context  # the host traces: nodes get their span's traceparent (docs/tracing.md)
        self._children: list[tuple[int, float]] = []

    def context(self, node_id: str, spec: Any, run_input: Any, outputs: dict[str, Any], attempt_id: str,
                messenger: Any = None, traceparent: str | None = None) -> NodeContext:
        """The context of a node: scoped by its include in a graph (`node_context`); a function's
        steps are built per call and are not in the (empty) graph, so theirs is the top level's."""
        if node_id in self.workflow.nodes or self.workflow.function is None:
            return node_context(self.workflow, node_id, run_input, outputs, run_id=self.link.run_id,
                                attempt_id=attempt_id, messenger=messenger, traceparent=traceparent)
        return NodeContext(input=run_input, outputs=outputs, run_id=self.link.run_id, node_id=node_id,
                           attempt_id=attempt_id, messenger=messenger, traceparent=traceparent)

    def execute(self, node_id: str, spec: Any, run_input: Any, outputs: dict[str, Any],
                confirmed: dict[str, Any] | None, attempt_no: int,
                visit: tuple[int, int] = (0, 0), *, answered_by: bool = False) -> dict[str, Any] | None:
        """Run one node; returns the node_finished payload (without `next`), or None to stop.
        `answered_by`: an interaction's output carries who answered (the function form's `decide`)."""
        report: dict[str, Any] = {"node_id": node_id}
        if confirmed is not None:
            # A person confirmed that this node's ambiguous effect happened.
            report.update(outcome="ok", output=confirmed["output"], effect_id=confirmed["effect_id"],
                          confirmed=True)
            return report
        attempt_id = new_id("att")
        executor = executor_for(spec)  # its kind's, from the worker's table (worker/executors/)
        if isinstance(executor, Ask):
            return self._interact(node_id, spec, executor, run_input, outputs, attempt_id, answered_by)
        if isinstance(executor, Wait):
            return self._wait(node_id, spec, executor, run_input, outputs, attempt_id)
        if spec.rate is not None:
            taken = self._take_rate(node_id, spec, run_input, outputs, attempt_id)
            if taken is not True:
                # parked until the limiter has room (None), or the key function failed (its report)
                return taken if isinstance(taken, dict) else None
        if spec.has_side_effect:
            reserved = self.link.accepted("effect_reserve", {"node_id": node_id, "idempotent": spec.idempotent,
                                                                "attempt_id": attempt_id, "attempt_no": attempt_no})
            if reserved.get("directive") == "stop":
                return None
            attempt_id = reserved["attempt_id"]
            report.update(attempt_id=attempt_id, effect_id=reserved["effect_id"])
        else:
            report.update(attempt_id=attempt_id, new_attempt=True, attempt_no=attempt_no)
        if spec.timeout_s:
            # The supervisor's watchdog stops this node from outside if the worker cannot.
            self.link.notify({"kind": "node_begin", "node_id": node_id, "attempt_id": attempt_id,
                                 "timeout_s": spec.timeout_s})
        try:
            ctx = self.context(node_id, spec, run_input, outputs, attempt_id,
                               message_sender(self.link, node_id, [node_id, *visit]),
                               node_traceparent(self.link.run_id, attempt_id) if self._trace_context else None)
            if isinstance(executor, Run):
                report.update(executor.call(NodeCall(node_id, attempt_id, spec, ctx, self.link.notify,
                                                     self._register_child, self._release_children)))
                return report
            report.update(outcome="failed", error=f"unknown node kind {spec.kind!r}", error_code="unsupported_node")
            return report
        except NodeTimeout as exc:
            # Cut off, not finished: a side effect's outcome is unknown unless it is idempotent.
            report.update(outcome="failed", error=str(exc), error_code="timeout",
                          interrupted=spec.has_side_effect and not spec.idempotent)
        except (OutputTooLarge, OutputInvalid) as exc:  # a compute node's output (worker/output_check.py)
            report.update(outcome="failed", error=str(exc), error_code=exc.code)
        except Exception as exc:  # the node's own failure: recorded, routed, never fatal to the worker
            frames = user_traceback(exc)
            log.info("node %s failed:\n%s", node_id, frames)
            report.update(outcome="failed", error=one_line(exc), error_code="node_error", traceback=frames)
        return report

    # --- rate limits -----------------------------------------------------------------

    def _take_rate(self, node_id: str, spec: Any, run_input: Any, outputs: dict[str, Any],
                   attempt_id: str) -> bool | dict[str, Any] | None:
        """Take a start of the node's named limiter (store/commands/rate_tokens.py) under this attempt's
        id: True when taken; None when the run parked until a start frees (the launch ends, the next
        one runs this node again); a failed report when the limiter's key function failed."""
        limiter = spec.rate
        try:
            key = node_rate_key(limiter, self.context(node_id, spec, run_input, outputs, attempt_id).input)
        except Exception as exc:  # the key function's own failure: the node fails, routed as any
            return {"node_id": node_id, "attempt_id": attempt_id, "new_attempt": True, "outcome": "failed",
                    "error": one_line(exc), "error_code": "bad_request"}
        answer = self.link.accepted("rate_take", {"node_id": node_id, "token_id": attempt_id, "rate_key": key,
                                                  "rate_max": int(limiter.max), "rate_per_s": float(limiter.per_s)})
        return True if answer.get("granted") else None

    # --- waiting nodes ---------------------------------------------------------------

    def _wait(self, node_id: str, spec: Any, executor: Wait, run_input: Any, outputs: dict[str, Any],
              attempt_id: str) -> dict[str, Any] | None:
        """Ask the host for this node's durable wait; None when the run parks to wait for it."""
        ask: dict[str, Any] = {"node_id": node_id, "attempt_id": attempt_id}
        if executor.probe:
            # A fan-out's request is computed once: the launch after the wake-up finds the wait.
            answer = self.link.accepted("wait_request", {**ask, "kind": "children", "probe": True})
            if answer["status"] != "absent":
                return self._waited(node_id, answer)
        ctx = self.context(node_id, spec, run_input, outputs, attempt_id)
        try:
            request = executor.request(self.workflow, spec, ctx)
            checked_children(request)
        except Exception as exc:  # its callback raised, or returned what cannot be waited for
            return {"node_id": node_id, "attempt_id": attempt_id, "new_attempt": True, "outcome": "failed",
                    "error": one_line(exc), "error_code": "bad_request"}
        return self._waited(node_id, self.link.accepted("wait_request", {**ask, **request}))

    @staticmethod
    def _waited(node_id: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        if answer["status"] != "settled":
            return None  # parked: waiting for the time, a message or the children
        result = answer["result"]
        report = {"node_id": node_id, "attempt_id": answer["attempt_id"], "outcome": result["outcome"],
                  "output": result.get("output"), "wait_id": answer["wait_id"]}
        if result.get("error"):
            report.update(error=result["error"], error_code=result.get("error_code") or "node_error")
        return report

    def _interact(self, node_id: str, spec: Any, executor: Ask, run_input: Any, outputs: dict[str, Any],
                  attempt_id: str, answered_by: bool = False) -> dict[str, Any] | None:
        """Ask the host for this node's interactive request; None when the run parks to wait."""
        ctx = self.context(node_id, spec, run_input, outputs, attempt_id)
        try:
            contract, after_s, default = executor.contract(node_id, spec, ctx)
            checked_output(contract, MAX_PRESENTED_BYTES, "the request to present")
        except Exception as exc:  # a presentation that cannot be shown fails the node
            return {"node_id": node_id, "attempt_id": attempt_id, "new_attempt": True, "outcome": "failed",
                    "error": one_line(exc), "error_code": "bad_request"}
        answer = self.link.accepted("interaction_request", {
            "node_id": node_id, "attempt_id": attempt_id, "kind": contract["kind"], "contract": contract,
            "after_s": after_s, "default_response": default})
        status = answer["status"]
        if status == "validating":
            # Only a kind whose answers are submissions (agent) is answered `validating`.
            assert executor.check_submission is not None, f"a {spec.kind} node got a submission"
            submission = answer["submission"]
            problem = executor.check_submission(spec, ctx, submission["value"])
            verdict = self.link.accepted("submission_verdict", {
                "request_id": answer["request_id"], "submission_id": submission["submission_id"],
                "accepted": problem is None, "error": problem, "max_submissions": spec.max_submissions})
            if verdict["status"] == "exhausted":
                self.link.accepted("run_failed", {
                    "code": "missing_submission",
                    "message": f"agent step {node_id!r}: {verdict['rejected_count']} submission(s) rejected; "
                               f"last: {problem}"})
                return None
            if verdict["status"] != "settled":
                return None
            return {"node_id": node_id, "attempt_id": answer["attempt_id"], "outcome": "ok",
                    "output": submission["value"], "request_id": answer["request_id"]}
        if status != "settled":
            return None  # parked: waiting for an answer
        output = answer["answer"]
        if answered_by and isinstance(output, dict):
            output = {**output, "answered_by": answer.get("provenance")}
        return {"node_id": node_id, "attempt_id": answer["attempt_id"], "outcome": "ok", "output": output,
                "request_id": answer["request_id"]}

    def _register_child(self, pid: int, create_time: float | None) -> None:
        """Registered before the command can do anything lasting, for orphan reaping."""
        self._children.append((pid, create_time or 0.0))
        self.link.accepted("register_child", {"pid": pid, "create_time": create_time or 0.0, "kind": "shell",
                                              "machine_id": machine_identity()}, fenced=False)

    def _release_children(self) -> None:
        while self._children:
            pid, create_time = self._children.pop()
            self.link.accepted("release_child", {"pid": pid, "create_time": create_time}, fenced=False)
