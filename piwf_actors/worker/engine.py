"""Executes one launch of a run inside the worker process.

The engine owns no durable state: it starts from the run's committed state
(shipped with the launch, or asked for with `ready`), then for each node
runs it and reports the result together with the routing decision
(`node_finished`), which the host commits atomically. A side-effecting node
first reserves its effect (`effect_reserve`) so that a crash mid-effect is
detectable. Pure nodes (compute, notify) are not announced before they
run, and their results are pipelined: the engine goes on to the next node
while the host commits them in order. Before anything that must not run on
an uncommitted past — an effect, an interaction — the engine waits until
every result sent so far is committed (`link.settle`, done by every waiting
request); the end of the run is sent right behind them and committed with
them (`link.last`). After a crash the uncommitted pure nodes simply run
again. The argument is written down in docs/durability.md.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

from piwf_actors.clock import timer_sleep
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
from piwf_actors.worker.supervisor_link import RunStopped, SupervisorLink
from piwf_actors.worker.termination import machine_identity
from piwf_actors.workflows import Workflow, node_context, route

log = logging.getLogger(__name__)


class MessageRefused(Exception):
    """The host refused a node's `ctx.send_message` (the run has ended, a bad topic), or the worker did:
    its payload is not a value a run can hold (json_values.py)."""


def _pipelined(spec: Any, report: dict[str, Any]) -> bool:
    """A pure node's result that need not be waited for: nothing outside the worker depends on it
    before the next wait (its effects and interactions have none, and its end is not the run's).
    Which kinds are pure is their executor's `pipelined` (worker/executors/)."""
    executor = executor_for(spec)
    return (isinstance(executor, Run) and executor.pipelined and report.get("effect_id") is None
            and report.get("request_id") is None)


class RunEngine:
    def __init__(self, workflow: Workflow, link: SupervisorLink, *, trace_context: bool = False) -> None:
        self.workflow = workflow
        self.link = link
        self._trace_context = trace_context  # the host traces: nodes get their span's traceparent (docs/tracing.md)
        self._children: list[tuple[int, float]] = []

    def run(self, launch_state: dict[str, Any] | None = None) -> None:
        """Run the launch until the run finishes, fails, parks, or the host stops it; every
        result sent is committed (or the launch ended with an error) when this returns."""
        try:
            self._run(launch_state)
            self.link.settle()
        except RunStopped:
            return  # the host parked or ended the run at a node boundary

    def _run(self, launch_state: dict[str, Any] | None) -> None:
        ready = {"definition_digest": self.workflow.digest, "pid": os.getpid(), "start_at": self.workflow.start_at}
        if launch_state is not None:
            # The claim shipped the state: start the first node while `ready` is
            # committed. It is answered in order, before anything the node reports,
            # and no side effect (it needs effect_reserve, which waits) gets ahead of it.
            self.link.post("ready", {**ready, "want_state": False}, fenced=False)
            state = launch_state
        else:
            state = self.link.accepted("ready", ready, fenced=False)
        run_input = state["input"]
        outputs: dict[str, Any] = dict(state["outputs"])
        attempts: dict[str, int] = dict(state["attempts"])
        # Attempts that ended (not cut off by a crash): with the step, what names a node's messages.
        finished: dict[str, int] = dict(state.get("finished_attempts") or {})
        confirmed: dict[str, Any] = dict(state["confirmed_effects"])
        # Nodes the host's watchdog stopped: their failure is reported and routed, not run again.
        timed_out: dict[str, Any] = dict(state.get("timed_out") or {})
        steps = int(state["steps"])
        node_id = state["current_node"] or self.workflow.start_at
        while True:
            if steps >= self.workflow.max_steps:
                self.link.accepted("run_failed", {
                    "code": "max_steps_exceeded",
                    "message": f"workflow {self.workflow.name!r} reached max_steps={self.workflow.max_steps}"})
                return
            spec = self.workflow.nodes.get(node_id)
            if spec is None:
                self.link.accepted("run_failed", {"code": "unknown_node",
                                                     "message": f"node {node_id!r} is not in the workflow"})
                return
            stopped = timed_out.pop(node_id, None)
            if stopped is not None:  # this attempt is counted already
                report: dict[str, Any] | None = {
                    "node_id": node_id, "attempt_id": stopped["attempt_id"], "outcome": "failed",
                    "error": stopped["error"], "error_code": "timeout"}
            else:
                attempts[node_id] = attempts.get(node_id, 0) + 1
                report = self._execute(node_id, spec, run_input, outputs, confirmed.pop(node_id, None),
                                       attempts[node_id], (steps, finished.get(node_id, 0)))
            if report is None:
                return  # the host parked or ended the run at this boundary
            if report.pop("interrupted", False):
                # An effect cut off by its timeout may have happened: the host parks the run on it
                # (`ambiguous_effect`) and only a person's retry runs the node again.
                self.link.accepted("effect_interrupted", report)
                return
            outcome, output, error = report["outcome"], report.get("output"), report.get("error")
            # An action that failed after it acted (`effect_applied`) is not run again: that would repeat it.
            retry = outcome == "failed" and attempts[node_id] <= spec.retries and not report.get("effect_applied")
            if stopped is None:  # (an attempt the watchdog stopped is counted in the state already)
                finished[node_id] = finished.get(node_id, 0) + 1
            if retry:
                report["next"] = {"retry": True}
            else:
                decision = route(self.workflow, node_id, outcome, output)
                if decision.error is not None:
                    code, message = decision.error
                    if code == "node_failed" and error:
                        message = f"{message}: {error}"
                    report["next"] = {"fail": {"code": code, "message": message}}
                elif decision.next_node is None:
                    report["next"] = {"finish": True}
                else:
                    report["next"] = {"node": decision.next_node}
            if retry or "node" in report["next"]:
                if _pipelined(spec, report):
                    self.link.post("node_finished", report)
                    self.link.poll()  # a pause at an earlier boundary stops the chain here
                elif self.link.accepted("node_finished", report).get("directive") == "stop":
                    return
            else:  # the end of the run: in one commit with the results before it, then every answer
                self.link.last("node_finished", report)
                return
            if retry:
                if spec.retry_backoff_s:
                    timer_sleep(spec.retry_backoff_s)  # timer time: a test's skip ends it (piwf_actors/clock.py)
                continue
            if outcome == "ok" or output is not None:
                outputs[node_id] = output
            steps += 1
            node_id = report["next"]["node"]

    def _execute(self, node_id: str, spec: Any, run_input: Any, outputs: dict[str, Any],
                 confirmed: dict[str, Any] | None, attempt_no: int,
                 visit: tuple[int, int] = (0, 0)) -> dict[str, Any] | None:
        """Run one node; returns the node_finished payload (without `next`), or None to stop."""
        report: dict[str, Any] = {"node_id": node_id}
        if confirmed is not None:
            # A person confirmed that this node's ambiguous effect happened.
            report.update(outcome="ok", output=confirmed["output"], effect_id=confirmed["effect_id"],
                          confirmed=True)
            return report
        attempt_id = new_id("att")
        executor = executor_for(spec)  # its kind's, from the worker's table (worker/executors/)
        if isinstance(executor, Ask):
            return self._interact(node_id, spec, executor, run_input, outputs, attempt_id)
        if isinstance(executor, Wait):
            return self._wait(node_id, spec, executor, run_input, outputs, attempt_id)
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
            ctx = node_context(self.workflow, node_id, run_input, outputs, run_id=self.link.run_id,
                               attempt_id=attempt_id, messenger=self._messenger(node_id, visit),
                               traceparent=node_traceparent(self.link.run_id, attempt_id)
                               if self._trace_context else None)
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

    # --- waiting nodes ---------------------------------------------------------------

    def _messenger(self, node_id: str, visit: tuple[int, int]) -> Any:
        """`ctx.send_message` of one attempt: the n-th message it sends is keyed (node, step, attempts
        of the node that ended before, n), which an attempt run again after a crash (a crash ends no
        attempt) shares with the first: the host keeps the message once."""
        sent = itertools.count()

        def send(run_id: str, topic: str, payload: Any = None) -> dict[str, Any]:
            problem = json_value_problem(payload, "the message's payload")
            if problem is not None:  # refused here, as the client door refuses it (json_values.py)
                raise MessageRefused(problem)
            answer = self.link.request("message_send", {
                "node_id": node_id, "run_id": run_id, "topic": topic, "payload": payload,
                "key": [node_id, *visit, next(sent)]}, fenced=False)
            if answer.get("outcome") != "accepted":
                raise MessageRefused(str(answer.get("error") or answer.get("outcome")))
            value: dict[str, Any] = answer["value"]
            return value

        return send

    def _wait(self, node_id: str, spec: Any, executor: Wait, run_input: Any, outputs: dict[str, Any],
              attempt_id: str) -> dict[str, Any] | None:
        """Ask the host for this node's durable wait; None when the run parks to wait for it."""
        ask: dict[str, Any] = {"node_id": node_id, "attempt_id": attempt_id}
        if executor.probe:
            # A fan-out's request is computed once: the launch after the wake-up finds the wait.
            answer = self.link.accepted("wait_request", {**ask, "kind": "children", "probe": True})
            if answer["status"] != "absent":
                return self._waited(node_id, answer)
        ctx = node_context(self.workflow, node_id, run_input, outputs, run_id=self.link.run_id,
                           attempt_id=attempt_id)
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
                  attempt_id: str) -> dict[str, Any] | None:
        """Ask the host for this node's interactive request; None when the run parks to wait."""
        ctx = node_context(self.workflow, node_id, run_input, outputs, run_id=self.link.run_id,
                           attempt_id=attempt_id)
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
        return {"node_id": node_id, "attempt_id": answer["attempt_id"], "outcome": "ok", "output": answer["answer"],
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
