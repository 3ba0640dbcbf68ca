"""Executes one launch of a run inside the worker process.

The engine owns no durable state: it asks the supervisor for the run's
committed state (`ready`), then for each node runs it and reports the
result together with the routing decision (`node_finished`), which the host
commits atomically before the engine moves on. A side-effecting node first
reserves its effect (`effect_reserve`) so that a crash mid-effect is
detectable. Pure nodes (compute, notify) are not announced before they
run: re-running them after a crash is harmless by contract.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import traceback
from collections.abc import Iterator
from typing import Any

from piwf_actors.messages import pack
from piwf_actors.runner.channel import SupervisorChannel
from piwf_actors.runner.shell import run_shell
from piwf_actors.store.ids import new_id
from piwf_actors.workflows import Workflow, evaluate, node_context, route
from piwf_actors.workflows.model import ActionSpec, ComputeSpec, NotifySpec, ShellSpec

log = logging.getLogger(__name__)


class NodeTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(timeout_s: float | None) -> Iterator[None]:
    """Raise NodeTimeout in the main thread when `timeout_s` passes (SIGALRM)."""
    if not timeout_s:
        yield
        return

    def fire(_signum: int, _frame: object) -> None:
        raise NodeTimeout(f"timed out after {timeout_s:g} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:1000]


def _checked_output(value: Any) -> Any:
    """Outputs must be plain wire values (they are stored and sent to clients)."""
    pack(value)
    return value


class RunEngine:
    def __init__(self, workflow: Workflow, channel: SupervisorChannel) -> None:
        self.workflow = workflow
        self.channel = channel
        self._children: list[tuple[int, float]] = []

    def run(self) -> None:
        state = self.channel.accepted("ready", {"definition_digest": self.workflow.digest, "pid": os.getpid()},
                                      fenced=False)
        run_input = state["input"]
        outputs: dict[str, Any] = dict(state["outputs"])
        attempts: dict[str, int] = dict(state["attempts"])
        confirmed: dict[str, Any] = dict(state["confirmed_effects"])
        steps = int(state["steps"])
        node_id = state["current_node"] or self.workflow.start_at
        while True:
            if steps >= self.workflow.max_steps:
                self.channel.accepted("run_failed", {
                    "code": "max_steps_exceeded",
                    "message": f"workflow {self.workflow.name!r} reached max_steps={self.workflow.max_steps}"})
                return
            spec = self.workflow.nodes.get(node_id)
            if spec is None:
                self.channel.accepted("run_failed", {"code": "unknown_node",
                                                     "message": f"node {node_id!r} is not in the workflow"})
                return
            attempts[node_id] = attempts.get(node_id, 0) + 1
            report = self._execute(node_id, spec, run_input, outputs, confirmed.pop(node_id, None))
            if report is None:
                return  # the host parked or ended the run at this boundary
            outcome, output, error = report["outcome"], report.get("output"), report.get("error")
            retry = outcome == "failed" and attempts[node_id] <= spec.retries
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
            answer = self.channel.accepted("node_finished", report)
            if answer.get("directive") == "stop" or "node" not in report["next"] and not retry:
                return
            if retry:
                if spec.retry_backoff_s:
                    time.sleep(spec.retry_backoff_s)
                continue
            if outcome == "ok":
                outputs[node_id] = output
            steps += 1
            node_id = report["next"]["node"]

    def _execute(self, node_id: str, spec: Any, run_input: Any, outputs: dict[str, Any],
                 confirmed: dict[str, Any] | None) -> dict[str, Any] | None:
        """Run one node; returns the node_finished payload (without `next`), or None to stop."""
        report: dict[str, Any] = {"node_id": node_id}
        if confirmed is not None:
            # A person confirmed that this node's ambiguous effect happened.
            report.update(outcome="ok", output=confirmed["output"], effect_id=confirmed["effect_id"],
                          confirmed=True)
            return report
        attempt_id = new_id("att")
        if spec.has_side_effect:
            reserved = self.channel.accepted("effect_reserve", {"node_id": node_id, "idempotent": spec.idempotent,
                                                                "attempt_id": attempt_id})
            if reserved.get("directive") == "stop":
                return None
            attempt_id = reserved["attempt_id"]
            report.update(attempt_id=attempt_id, effect_id=reserved["effect_id"])
        else:
            report["attempt_id"] = attempt_id
            report["new_attempt"] = True
        try:
            ctx = node_context(self.workflow, node_id, run_input, outputs, run_id=self.channel.run_id,
                               attempt_id=attempt_id)
            if isinstance(spec, ShellSpec):
                result = run_shell(spec, ctx, on_spawn=self._register_child)
                self._release_children()
                report.update(outcome=result.outcome, output=result.output)
                if result.error:
                    report["error"] = result.error
                return report
            if isinstance(spec, (ComputeSpec, ActionSpec)):
                with deadline(spec.timeout_s):
                    output = spec.run(ctx)
                report.update(outcome="ok", output=_checked_output(output))
                return report
            if isinstance(spec, NotifySpec):
                message = evaluate(spec.message, ctx)
                report.update(outcome="ok", output={"message": message}, notification=_checked_output(message))
                return report
            report.update(outcome="failed", error=f"{spec.kind} nodes are not supported by this host yet",
                          error_code="unsupported_node")
            return report
        except NodeTimeout as exc:
            report.update(outcome="failed", error=str(exc), error_code="timeout")
        except Exception as exc:  # the node's own failure: recorded, routed, never fatal to the worker
            log.debug("node %s failed:\n%s", node_id, traceback.format_exc())
            report.update(outcome="failed", error=_one_line(exc), error_code="node_error")
        return report

    def _register_child(self, pid: int, create_time: float | None) -> None:
        """Registered before the command can do anything lasting, for orphan reaping."""
        self._children.append((pid, create_time or 0.0))
        self.channel.accepted("register_child", {"pid": pid, "create_time": create_time or 0.0, "kind": "shell"},
                              fenced=False)

    def _release_children(self) -> None:
        while self._children:
            pid, create_time = self._children.pop()
            self.channel.accepted("release_child", {"pid": pid, "create_time": create_time}, fenced=False)
