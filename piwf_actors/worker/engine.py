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

One node attempt (reserving its effect, asking for its wait or request, running its executor) is
worker/node_runner.py's, shared with the function form's engine (worker/function_engine.py).
"""

from __future__ import annotations

import os
from typing import Any

from piwf_actors.clock import timer_sleep
from piwf_actors.worker.node_runner import MessageRefused, NodeRunner, pipelined
from piwf_actors.worker.supervisor_link import RunStopped, SupervisorLink
from piwf_actors.workflows import Workflow, route


class RunEngine:
    def __init__(self, workflow: Workflow, link: SupervisorLink, *, trace_context: bool = False) -> None:
        self.workflow = workflow
        self.link = link
        # One attempt of a node, as the function form runs its steps too (worker/node_runner.py).
        self.nodes = NodeRunner(workflow, link, trace_context=trace_context)

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
                report = self.nodes.execute(node_id, spec, run_input, outputs, confirmed.pop(node_id, None),
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
                if pipelined(spec, report):
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


__all__ = ["MessageRefused", "RunEngine"]
