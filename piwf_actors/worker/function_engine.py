"""Executes one launch of a durable function workflow (`piwf_actors.durable`) inside the worker.

Every launch calls the function from the top. Each durable call it makes (a step, a wait, a
decision, a child run) gets an id — its name, then `name#2`, `name#3`… within the execution — and is
checked against the run's recorded history (`function_history`: per node id its final finished
attempt, in the order they finished): the n-th call must have the n-th entry's id, and then its
recorded result is returned (a failure raises StepFailed) without running anything. A call with
another id fails the run `nondeterministic`, naming both. Past the end of the history a call is new
work, run exactly as a graph node of its kind (worker/node_runner.py) and reported with `next:
{"continue": true}` — pure steps pipelined, effects reserved first, waits parking the run.

When a call cannot complete in this launch (the run parks on a wait, the host stops it, the replay
does not match, the claim is lost), the engine unwinds the function with `Suspended`, a
BaseException its `except Exception` does not catch (its `finally` blocks run), and ends the launch;
the next launch replays. The function's return value is the node `return` (the run's output), sent
behind the pipelined results (`link.last`); an exception escaping the function fails that node and
the run (`workflow_error`, or the escaping StepFailed's code).

Runs in the worker's launch thread (the main thread: steps' deadlines are SIGALRM).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from piwf_actors.clock import timer_sleep
from piwf_actors.durable.replay import RETURN_ID, RunInfo, StepFailed, Suspended, replaying
from piwf_actors.ids import new_id
from piwf_actors.worker.node_guard import one_line, user_traceback
from piwf_actors.worker.node_runner import MessageRefused, NodeRunner, message_sender, pipelined
from piwf_actors.worker.output_check import OutputInvalid, OutputTooLarge, checked_output
from piwf_actors.worker.supervisor_link import RunStopped, SupervisorLink
from piwf_actors.workflows import Workflow
from piwf_actors.workflows.typed_values import bind_input, to_json

log = logging.getLogger(__name__)


class FunctionEngine:
    """The engine of a workflow whose `function` is set (worker/main.py picks it)."""

    def __init__(self, workflow: Workflow, link: SupervisorLink, *, trace_context: bool = False) -> None:
        assert workflow.function is not None
        self.workflow = workflow
        self.link = link
        self.nodes = NodeRunner(workflow, link, trace_context=trace_context)

    def run(self, launch_state: dict[str, Any] | None = None) -> None:
        """Run the launch until the run finishes, fails, parks, or the host stops it; every result
        sent is committed (or the launch ended with an error) when this returns."""
        try:
            self._run(launch_state)
            self.link.settle()
        except RunStopped:
            return  # the host parked or ended the run at a step boundary

    def _run(self, launch_state: dict[str, Any] | None) -> None:
        ready = {"definition_digest": self.workflow.digest, "pid": os.getpid(), "start_at": None}
        if launch_state is not None:  # as RunEngine: the first step runs while `ready` is committed
            self.link.post("ready", {**ready, "want_state": False}, fenced=False)
            state = launch_state
        else:
            state = self.link.accepted("ready", ready, fenced=False)
        # A fresh run has no history: no request (no extra round trip for a run's first launch).
        history = [] if int(state["steps"]) == 0 else \
            list(self.link.accepted("function_history", {}, fenced=False)["entries"])
        launch = Launch(self, state, history)
        launch.execute()


class Launch:
    """One execution of the function: the `Replay` its durable calls go through (durable/replay.py)."""

    def __init__(self, engine: FunctionEngine, state: dict[str, Any], history: list[dict[str, Any]]) -> None:
        self.engine = engine
        self.link = engine.link
        self.workflow = engine.workflow
        self.run_input = state["input"]
        self.recorded: dict[str, Any] = dict(state["outputs"])
        self.attempts: dict[str, int] = dict(state["attempts"])
        self.finished: dict[str, int] = dict(state.get("finished_attempts") or {})
        self.confirmed: dict[str, Any] = dict(state["confirmed_effects"])
        self.timed_out: dict[str, Any] = dict(state.get("timed_out") or {})
        self.steps = int(state["steps"])
        self.history = history
        self.position = 0  # durable calls made so far in this execution
        self.occurrences: dict[str, int] = {}
        self.messages_at: dict[int, int] = {}  # send_message calls per position
        self.suspended = False
        self.failure: tuple[str, str] | None = None  # the run fails with this once the function unwound
        self.escaped: BaseException | None = None  # a link error or stop met inside a durable call
        self.info = RunInfo(run_id=self.link.run_id, input=self.run_input, workflow=self.workflow.name,
                            launch=self.link.launch_id)

    # --- the function -----------------------------------------------------------------------

    def execute(self) -> None:
        fn = self.workflow.function
        assert fn is not None
        try:
            with replaying(self):
                value = fn(**bind_input(fn, self.run_input))
        except Suspended:
            self._suspended_end()
            return
        except StepFailed as failure:  # a step's failure the function let through: the run fails with its code
            if self.suspended:
                self._suspended_end()
                return
            self._end(outcome="failed", error=failure.message, error_code=failure.code,
                      fail={"code": failure.code, "message": f"step {failure.step!r} failed: {failure.message}"})
            return
        except Exception as exc:  # the function's own error
            if self.suspended:
                self._suspended_end()
                return
            frames = user_traceback(exc)
            log.info("workflow function %s failed:\n%s", self.workflow.name, frames)
            self._end(outcome="failed", error=one_line(exc), error_code="workflow_error", traceback=frames,
                      fail={"code": "workflow_error", "message": one_line(exc)})
            return
        if self.suspended:  # the function swallowed the unwinding (`except BaseException`): still over
            self._suspended_end()
            return
        if self.position < len(self.history):
            self._nondeterministic(RETURN_ID)
            self._suspended_end()
            return
        try:
            output = checked_output(to_json(value), what="the function's return value")
        except (OutputInvalid, OutputTooLarge, TypeError, ValueError) as exc:
            self._end(outcome="failed", error=one_line(exc), error_code="output_invalid",
                      fail={"code": "output_invalid", "message": one_line(exc)})
            return
        self._end(outcome="ok", output=output)

    def _end(self, *, outcome: str, fail: dict[str, Any] | None = None, **fields: Any) -> None:
        """The node `return`: the run's output (finish) or its failure, committed with the results
        before it (`link.last`)."""
        if self.steps >= self.workflow.max_steps:
            self._max_steps()
            return
        self.attempts[RETURN_ID] = self.attempts.get(RETURN_ID, 0) + 1
        report = {"node_id": RETURN_ID, "attempt_id": new_id("att"), "new_attempt": True,
                  "attempt_no": self.attempts[RETURN_ID], "outcome": outcome, **fields,
                  "next": {"fail": fail} if fail is not None else {"finish": True}}
        self.link.last("node_finished", report)

    def _suspended_end(self) -> None:
        if self.escaped is not None:
            raise self.escaped  # RunStopped, ProtocolBroken…: as RunEngine would meet it
        if self.failure is not None:
            code, message = self.failure
            self.link.accepted("run_failed", {"code": code, "message": message})

    def _suspend(self) -> Suspended:
        self.suspended = True
        return Suspended()

    def _max_steps(self) -> None:
        self.link.accepted("run_failed", {
            "code": "max_steps_exceeded",
            "message": f"workflow {self.workflow.name!r} reached max_steps={self.workflow.max_steps}"})

    def _nondeterministic(self, node_id: str) -> None:
        recorded = self.history[self.position]["node_id"]
        what = "the function returned" if node_id == RETURN_ID else f"step {node_id!r} was called"
        self.failure = ("nondeterministic",
                        f"{what} where the recorded history has {recorded!r} (call {self.position + 1}); keep "
                        "reads of the outside world (files, clocks, random numbers, the network) inside steps")

    # --- durable calls (Replay) ---------------------------------------------------------------

    def call(self, name: str, spec: Any, *, answered_by: bool = False) -> Any:
        if self.suspended:
            raise Suspended()
        count = self.occurrences[name] = self.occurrences.get(name, 0) + 1
        node_id = name if count == 1 else f"{name}#{count}"
        if self.position < len(self.history):
            entry = self.history[self.position]
            if entry["node_id"] != node_id:
                self._nondeterministic(node_id)
                raise self._suspend()
            self.position += 1
            if entry["outcome"] != "failed":  # ok, or `copied` by a restart from a later step
                return self.recorded.get(node_id)
            raise StepFailed(str(entry.get("error_code") or "node_error"), str(entry.get("error") or ""), node_id,
                             self.recorded.get(node_id))
        self.position += 1
        try:
            return self._new_work(node_id, spec, answered_by)
        except (Suspended, StepFailed):
            raise
        except Exception as exc:  # the link's (a stop, a lost supervisor): end the launch, unwinding first
            self.escaped = exc
            raise self._suspend() from None

    def _new_work(self, node_id: str, spec: Any, answered_by: bool) -> Any:
        while True:
            if self.steps >= self.workflow.max_steps:
                self.failure = ("max_steps_exceeded",
                                f"workflow {self.workflow.name!r} reached max_steps={self.workflow.max_steps}")
                raise self._suspend()
            stopped = self.timed_out.pop(node_id, None)
            if stopped is not None:  # the host's watchdog stopped this attempt: its failure, not a new run
                report: dict[str, Any] | None = {
                    "node_id": node_id, "attempt_id": stopped["attempt_id"], "outcome": "failed",
                    "error": stopped["error"], "error_code": "timeout"}
            else:
                self.attempts[node_id] = self.attempts.get(node_id, 0) + 1
                report = self.engine.nodes.execute(
                    node_id, spec, self.run_input, {}, self.confirmed.pop(node_id, None), self.attempts[node_id],
                    (self.steps, self.finished.get(node_id, 0)), answered_by=answered_by)
            if report is None:
                raise self._suspend()  # the run parked on a wait or an answer, or the host stopped it
            if report.pop("interrupted", False):
                # An effect cut off by its timeout may have happened: the host parks the run on it.
                self.link.accepted("effect_interrupted", report)
                raise self._suspend()
            if stopped is None:
                self.finished[node_id] = self.finished.get(node_id, 0) + 1
            retry = (report["outcome"] == "failed" and self.attempts.get(node_id, 0) <= spec.retries
                     and not report.get("effect_applied"))
            report["next"] = {"retry": True} if retry else {"continue": True}
            if pipelined(spec, report):
                self.link.post("node_finished", report)
                self.link.poll()  # a pause at an earlier boundary stops the function here
            elif self.link.accepted("node_finished", report).get("directive") == "stop":
                raise self._suspend()
            if retry:
                if spec.retry_backoff_s:
                    timer_sleep(spec.retry_backoff_s)  # timer time: a test's skip ends it (piwf_actors/clock.py)
                continue
            self.steps += 1
            if report["outcome"] == "ok":
                return report.get("output")
            raise StepFailed(str(report.get("error_code") or "node_error"), str(report.get("error") or ""), node_id,
                             report.get("output"))

    def send_message(self, run_id: str, topic: str, payload: Any) -> dict[str, Any]:
        if self.suspended:
            raise Suspended()
        sent = self.messages_at[self.position] = self.messages_at.get(self.position, 0) + 1
        # Keyed by its place in the execution, which a replay reaches again: the host keeps it once.
        send = message_sender(self.link, "send_message", ["send_message", self.position, sent])
        try:
            return send(run_id, topic, payload)
        except MessageRefused:
            raise  # the function's to handle, as a node's ctx.send_message
        except Exception as exc:
            self.escaped = exc
            raise self._suspend() from None
