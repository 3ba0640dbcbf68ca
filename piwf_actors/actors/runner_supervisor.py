"""`RunnerSupervisor`: one per active run; owns that run's worker process for one launch.

It sends the worker the launch envelope, forwards each worker request to
the writer as a `worker.message` command and answers the worker only after
the writer committed (or refused) it. When the worker ends the launch, dies,
or must be stopped (cancel, claim lost, host stopping) it reports the exit
to the writer (`runner.exit`, which settles an interrupted run) and then
tells the scheduler it is finished, handing back the worker if it can serve
another launch. A supervisor's crash is contained: the scheduler notices
(one-for-one) and the run is settled like a crashed runner; a launch it
cannot even start is reported as an exit too, so no run stays `starting`.

Frames stay bounded (`messages/content.py`): large launch values go as
content references the worker reads with `content.read` (answered here,
from the blob table or from values this supervisor cut out of a frame), and
content the worker sends ahead of a request is put back before the request
goes to the writer.

The watchdog, outside the worker: a node the worker announced with its
`timeout_s` (`node_begin`) that is still running `grace_s` after it is
stopped from here (its process tree is killed; the run goes back to the
queue and the next launch routes the node's `timeout` failure), and a
worker that never sends its first request within `ready_timeout_s` is
replaced (the run is requeued). The scheduler's tick drives both checks.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.content_exchange import ContentExchange
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.errors import DecodeError, outcome_for
from piwf_actors.runner.process import WorkerProcess
from piwf_actors.runner.termination import is_same_process, terminate_tree
from piwf_actors.store.requests import WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: Requests after which no node is running any more (the watchdog stands down).
_NODE_ENDS = frozenset({"node_finished", "interaction_request", "run_failed"})


@dataclass(frozen=True, slots=True)
class Launch:
    """What the scheduler claimed for this supervisor."""

    run_id: str
    generation: int
    runner_epoch: str
    token_hash: str
    revision: int
    envelope: dict[str, Any]  # workflow, path, attr, digest, project path, source bytes
    attached: bool = False  # the worker's pid was recorded with the claim


@dataclass(frozen=True, slots=True)
class WorkerFrame:
    frame: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkerGone:
    detail: str


@dataclass(frozen=True, slots=True)
class WatchdogTick:
    """From the scheduler's tick: check the running node's deadline and the start-up deadline."""


@dataclass(frozen=True, slots=True)
class StopRunner:
    """Kill the worker tree now: `reason` is cancelled, claimLost, timedOut or host_stopping."""

    reason: str


@dataclass(frozen=True, slots=True)
class RunnerFinished:
    """Told to the scheduler when a supervisor is done; `worker` is reusable or None."""

    run_id: str
    worker: WorkerProcess | None
    status: str | None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RunnerSupervisor(CoreActor):
    actor_name = "runner"

    def __init__(self, writer: WriterHandle, scheduler: pykka.ActorRef[Any], worker: WorkerProcess,
                 launch: Launch, *, grace_s: float = 3.0, db_path: Path | None = None,
                 watchdog_grace_s: float = 5.0, ready_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 output: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Runs in the scheduler's thread: stores arguments only."""
        super().__init__(scheduler)
        self._writer = writer
        self._scheduler = scheduler
        self._worker = worker
        self._launch = launch
        self._grace_s = grace_s
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = ready_timeout_s
        self._clock = clock
        self._ready_deadline: float | None = None
        self._watch: tuple[str, str, float, float] | None = None  # node, attempt, timeout_s, deadline
        self._content = ContentExchange(db_path)
        self._output = output  # where a node's live output goes (the host board's "node_output" stream)
        self._sent_epoch: dict[str, int | None] = {}  # host epoch each pending worker message went with
        self._reader: threading.Thread | None = None
        self._stop_reason: str | None = None
        self._exit_reported = False
        self._finished = False
        self._load_failure: str | None = None
        self._reusable = False
        self._claim_released = False

    # --- lifecycle -------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the supervisor's thread: hands the launch to the worker and starts reading.

        Whatever goes wrong here is reported as the launch's exit (`launchFailed`):
        an exception escaping `on_start` would stop this actor without a word and
        leave the run `starting` with its claim renewed for ever.
        """
        launch = self._launch
        try:
            if not launch.attached:
                self._writer.submit(WriteCommand("runner.attach", {
                    "run_id": launch.run_id, "runner_epoch": launch.runner_epoch, "pid": self._worker.pid,
                    "create_time": self._worker.create_time}))
            self._worker.launches += 1
            self._ready_deadline = self._clock() + self._ready_timeout_s
            frame = self._launch_frame()
            self._reader = threading.Thread(target=self._read_frames, name=f"runner-{launch.run_id}", daemon=True)
            self._reader.start()
            try:
                self._send(frame, under=("state",))
            except OSError as exc:
                self.actor_ref.tell(WorkerGone(f"could not send the launch: {exc}"))
        except Exception as exc:  # the launch could not start: settle it, free the slot
            log.exception("run %s: the launch could not start", launch.run_id)
            code = self._kill_worker("launchFailed")
            self._exit("launchFailed", reusable=False, exit_code=code,
                       diagnostic=f"the launch could not start: {type(exc).__name__}: {exc}")

    def _launch_frame(self) -> dict[str, Any]:
        """The launch envelope; large stored values (the state's, the source) as content references."""
        launch = self._launch
        envelope = dict(launch.envelope)
        stored: list[dict[str, Any]] = []
        source_ref = envelope.pop("source_ref", None)
        if source_ref is not None:
            stored.append({"path": ["source"], "digest": source_ref["digest"], "bytes": source_ref["bytes"],
                           "encoding": "raw"})
        state = envelope.get("state")
        if isinstance(state, dict) and state.get("content_refs"):
            state = dict(state)
            stored += [{**item, "path": ["state", *item["path"]]} for item in state.pop("content_refs")]
            envelope["state"] = state
        frame = {"kind": "launch", "run_id": launch.run_id, "generation": launch.generation,
                 "runner_epoch": launch.runner_epoch, "revision": launch.revision, **envelope}
        return self._content.point_at(frame, stored)

    def _send(self, frame: dict[str, Any], under: tuple[str, ...]) -> None:
        """Send a frame to the worker, cutting large values under `under` out as readable content."""
        self._worker.sock.sendall(self._content.encode(frame, under))

    def _read_frames(self) -> None:
        """The reader thread: turns the worker's frames into messages to this actor."""
        ref = self.actor_ref
        while True:
            try:
                frame = self._worker.recv()
            except (OSError, DecodeError) as exc:
                safe_tell(ref, WorkerGone(f"worker connection failed: {exc}"))
                return
            if frame is None:
                safe_tell(ref, WorkerGone("worker closed its connection"))
                return
            if frame.get("kind") == "node_output":
                # Live output of a running shell node: straight to the watchers, no actor hop.
                if self._output is not None:
                    self._output({**frame, "run_id": self._launch.run_id})
                continue
            if frame.get("kind") == "node_begin":
                # Once per node, so not worth an actor message: the watchdog reads it on
                # its next tick. The actor clears it only on the request that ends the
                # node, which the worker sends (and this thread reads) before the next begin.
                self._arm_watchdog(frame)
                continue
            if not safe_tell(ref, WorkerFrame(frame)):
                return
            if frame.get("kind") == "run_over":
                # The launch is over; the next supervisor of this worker reads from here on.
                return

    def release_resources(self) -> None:
        self._content.close()
        if not self._finished:
            # Stopped from outside (host stopping) or crashed: the worker must not outlive us.
            self._kill_worker("host_stopping" if self._stop_reason is None else self._stop_reason)
            self._report_exit_blocking("host_stopping", requeue=True)
            self._finished = True
            safe_tell(self._scheduler, RunnerFinished(self._launch.run_id, None, None))

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {WorkerFrame: self._frame, WriteResult: self._written, WorkerGone: self._gone,
                StopRunner: self._stop_runner, WatchdogTick: self._watchdog}

    # --- worker protocol ---------------------------------------------------------

    def _frame(self, message: WorkerFrame) -> None:
        if self._exit_reported:
            return
        frame = message.frame
        kind = frame.get("kind")
        if kind == "request":
            self._ready_deadline = None  # the worker is up and talking
            op = frame.get("op")
            if op in _NODE_ENDS:
                self._watch = None
            if op == "content.read":
                self._content_read(frame)
                return
            try:
                frame = self._content.complete(frame)
            except DecodeError as exc:
                self._answer(frame.get("message_id"), {"outcome": "rejected", "error": exc.one_line()})
                return
            self._forward(frame)
        elif kind == "content":
            try:
                self._content.receive(frame)
            except DecodeError as exc:
                self._protocol_error(f"bad content frame: {exc.one_line()}")
        elif kind == "run_over":
            if self._claim_released and not self._exit_reported:
                # The last transition ended the launch in the same commit (done,
                # failed, parked): nothing is left to settle, so no extra commit.
                self._exit_reported = True
                self._finished = True
                worker = self._worker if self._worker.alive() else None
                safe_tell(self._scheduler, RunnerFinished(self._launch.run_id, worker, None))
                self.actor_ref.stop(block=False)
                return
            self._exit("exited", reusable=True)
        elif kind != "hello":
            log.warning("run %s: unexpected worker frame %r", self._launch.run_id, kind)

    def _forward(self, frame: dict[str, Any]) -> None:
        launch = self._launch
        if (frame.get("run_id") != launch.run_id or frame.get("generation") != launch.generation
                or frame.get("runner_epoch") != launch.runner_epoch):
            self._answer(frame.get("message_id"), {"outcome": "claimLost", "error": "message for another launch"})
            return
        if frame.get("op") == "run_failed" and (frame.get("payload") or {}).get("code") == "workflow_load_failed":
            self._load_failure = str(frame["payload"].get("message", ""))
        args = {"run_id": launch.run_id, "generation": launch.generation, "runner_epoch": launch.runner_epoch,
                "token_hash": launch.token_hash, "message_id": frame.get("message_id"), "op": frame.get("op"),
                "expected_revision": frame.get("expected_revision"), "payload": frame.get("payload")}
        correlation = f"msg:{frame.get('message_id')}"
        self._sent_epoch[correlation] = self._writer.host_epoch
        self._writer.submit(WriteCommand("worker.message", args, correlation_id=correlation), self.actor_ref)

    def _written(self, result: WriteResult) -> None:
        correlation = result.correlation_id or ""
        if correlation == "exit":
            self._exited_recorded(result)
            return
        if not correlation.startswith("msg:"):
            return
        message_id = correlation[4:]
        sent_epoch = self._sent_epoch.pop(correlation, None)
        expires_at = self._writer.lease_expires_at
        if result.ok and expires_at is not None and time.time() >= expires_at:
            # Committed under the lease, but the lease ran out before the answer went
            # out (the host was paused): the worker must not go on now. It sends the
            # message again and gets the recorded answer once the lease is held again.
            answer = {"outcome": "unavailable", "error": "the host's lease expired; try again"}
        elif result.ok:
            answer = dict(result.value)
            answer.setdefault("outcome", "accepted")
            if answer.get("released"):
                self._claim_released = True
        elif result.error_code == "stale_epoch" and sent_epoch == self._writer.host_epoch:
            # The host's epoch is over and did not move on: this host lost its lease, and the
            # run's claim with it. (Had the host taken the lease again at a higher epoch, its
            # claims moved with it and the worker just sends the message again: `unavailable`.)
            answer = {"outcome": "claimLost", "error": result.error}
        else:
            answer = {"outcome": outcome_for(result.error_code), "error": result.error}
        self._answer(message_id, answer)
        if answer["outcome"] == "claimLost":
            self._stop_runner(StopRunner("claimLost"))

    def _answer(self, message_id: Any, answer: dict[str, Any]) -> None:
        value = answer.get("value")
        if isinstance(value, dict) and value.get("content_refs"):
            # A `ready` answer carries the launch state; its large values stay in the store.
            value = dict(value)
            stored = value.pop("content_refs")
            answer = self._content.point_at({**answer, "value": value}, stored, "value")
        try:
            self._send({"kind": "response", "message_id": message_id, **answer}, under=("value",))
        except OSError:
            pass  # the reader thread reports the broken connection

    def _content_read(self, frame: dict[str, Any]) -> None:
        """`content.read {digest, offset}`: answered here, never a write."""
        self._answer(frame.get("message_id"), self._content.read(frame.get("payload") or {}))

    def _protocol_error(self, detail: str) -> None:
        log.warning("run %s: worker %d broke the protocol: %s", self._launch.run_id, self._worker.pid, detail)
        code = self._kill_worker("crashed")
        self._exit("crashed", reusable=False, exit_code=code, diagnostic=detail)

    # --- the watchdog -------------------------------------------------------------

    def _arm_watchdog(self, frame: dict[str, Any]) -> None:
        """`node_begin {node_id, attempt_id, timeout_s}`: the node must be over by timeout_s + grace.
        Runs in the reader thread (one attribute assignment, read by the actor's thread)."""
        timeout_s = frame.get("timeout_s")
        if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0:
            self._watch = (str(frame.get("node_id")), str(frame.get("attempt_id")), float(timeout_s),
                           self._clock() + float(timeout_s) + self._watchdog_grace_s)

    def _watchdog(self, _message: WatchdogTick) -> None:
        if self._exit_reported:
            return
        now = self._clock()
        if self._watch is not None and now >= self._watch[3]:
            node_id, attempt_id, timeout_s, _ = self._watch
            self._watch = None
            log.warning("run %s: node %s ran past its timeout of %g s (+%g s grace); stopping worker %d",
                        self._launch.run_id, node_id, timeout_s, self._watchdog_grace_s, self._worker.pid)
            code = self._kill_worker("timedOut")
            self._exit("timedOut", reusable=False, exit_code=code,
                       diagnostic=f"node {node_id} exceeded its timeout of {timeout_s:g} s",
                       timed_out={"node_id": node_id, "attempt_id": attempt_id, "after_s": timeout_s})
        elif self._ready_deadline is not None and now >= self._ready_deadline:
            self._ready_deadline = None
            log.warning("run %s: worker %d did not become ready within %g s; replacing it", self._launch.run_id,
                        self._worker.pid, self._ready_timeout_s)
            code = self._kill_worker("startTimeout")
            self._exit("startTimeout", reusable=False, exit_code=code,
                       diagnostic=f"the worker did not become ready within {self._ready_timeout_s:g} s")

    # --- endings -----------------------------------------------------------------

    def _stop_runner(self, message: StopRunner) -> None:
        if self._exit_reported:
            return
        self._stop_reason = message.reason
        log.info("run %s: stopping worker %d (%s)", self._launch.run_id, self._worker.pid, message.reason)
        code = self._kill_worker(message.reason)
        self._exit(message.reason, reusable=False, exit_code=code)

    def _gone(self, message: WorkerGone) -> None:
        if self._exit_reported:
            return
        code = self._kill_worker("crashed")
        outcome = self._stop_reason or ("claimLost" if code == 3 else "crashed")
        self._exit(outcome, reusable=False, exit_code=code, diagnostic=f"{message.detail}; {describe_exit(code)}")

    def _kill_worker(self, reason: str) -> int | None:
        log.debug("run %s: terminating worker %d (%s)", self._launch.run_id, self._worker.pid, reason)
        if self._worker.alive():
            code = self._worker.kill(self._grace_s)
        else:
            code = self._worker.process.wait()
        self._worker.sock.close()
        return code

    def _exit(self, outcome: str, *, reusable: bool, exit_code: int | None = None,
              diagnostic: str | None = None, timed_out: dict[str, Any] | None = None) -> None:
        if self._exit_reported:
            return
        self._exit_reported = True
        self._watch = self._ready_deadline = None
        self._reusable = reusable and self._worker.alive()
        if diagnostic:
            log.warning("run %s: worker %d %s (%s)", self._launch.run_id, self._worker.pid, outcome, diagnostic)
        args = self._exit_args(outcome, exit_code, diagnostic)
        if timed_out is not None:
            args["timed_out"] = timed_out
        self._writer.submit(WriteCommand("runner.exit", args, correlation_id="exit"), self.actor_ref)

    def _exit_args(self, outcome: str, exit_code: int | None, diagnostic: str | None,
                   requeue: bool = False) -> dict[str, Any]:
        launch = self._launch
        return {"run_id": launch.run_id, "generation": launch.generation, "runner_epoch": launch.runner_epoch,
                "token_hash": launch.token_hash, "outcome": outcome, "exit_code": exit_code,
                "diagnostic": diagnostic and diagnostic[:2000], "load_failure": self._load_failure,
                "requeue": requeue}

    def _report_exit_blocking(self, outcome: str, requeue: bool) -> None:
        if self._exit_reported:
            return
        self._exit_reported = True
        try:
            result = self._writer.execute("runner.exit", self._exit_args(outcome, None, "host stopping", requeue),
                                          timeout=10)
            if result.ok:
                self._reap_children(result.value.get("children") or [])
        except Exception as exc:  # the next host's recovery settles the run
            log.warning("run %s: could not report runner exit: %s", self._launch.run_id, exc)

    def _reap_children(self, children: list[dict[str, Any]]) -> None:
        for child in children:
            if is_same_process(child["pid"], child["create_time"]):
                log.info("run %s: terminating leftover command pid %d", self._launch.run_id, child["pid"])
                terminate_tree(child["pid"], child["create_time"], grace_s=self._grace_s)
            self._writer.submit(WriteCommand("child.release", {**child, "run_id": self._launch.run_id}))

    def _exited_recorded(self, result: WriteResult) -> None:
        status = result.value.get("status") if result.ok and isinstance(result.value, dict) else None
        if result.ok and isinstance(result.value, dict):
            self._reap_children(result.value.get("children") or [])
        worker = self._worker if self._reusable else None
        self._finished = True
        safe_tell(self._scheduler, RunnerFinished(self._launch.run_id, worker, status))
        self.actor_ref.stop(block=False)
