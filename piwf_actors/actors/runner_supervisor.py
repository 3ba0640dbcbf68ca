"""`RunnerSupervisor`: one per active run; owns that run's worker process for one launch.

It sends the worker the launch envelope, forwards each worker request to
the writer as a `worker.message` command and answers the worker only after
the writer committed (or refused) it. When the worker ends the launch, dies,
or must be stopped (cancel, claim lost, host stopping) it reports the exit
to the writer (`runner.exit`, which settles an interrupted run) and then
tells the scheduler it is finished, handing back the worker if it can serve
another launch. A supervisor's crash is contained: the scheduler notices
(one-for-one) and the run is settled like a crashed runner.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.errors import DecodeError
from piwf_actors.runner.process import WorkerProcess
from piwf_actors.runner.termination import is_same_process, terminate_tree
from piwf_actors.store.requests import WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: Map writer error codes to worker-protocol outcomes.
_OUTCOMES = {"claim_lost": "claimLost", "conflict": "conflict", "not_found": "notFound",
             "stale_epoch": "claimLost", "disk_full": "unavailable", "read_only": "unavailable",
             "writer_stopped": "unavailable"}


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
                 launch: Launch, *, grace_s: float = 3.0) -> None:
        """Runs in the scheduler's thread: stores arguments only."""
        super().__init__(scheduler)
        self._writer = writer
        self._scheduler = scheduler
        self._worker = worker
        self._launch = launch
        self._grace_s = grace_s
        self._reader: threading.Thread | None = None
        self._stop_reason: str | None = None
        self._exit_reported = False
        self._finished = False
        self._load_failure: str | None = None
        self._reusable = False
        self._claim_released = False

    # --- lifecycle -------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the supervisor's thread: hands the launch to the worker and starts reading."""
        launch = self._launch
        if not launch.attached:
            self._writer.submit(WriteCommand("runner.attach", {
                "run_id": launch.run_id, "runner_epoch": launch.runner_epoch, "pid": self._worker.pid,
                "create_time": self._worker.create_time}))
        self._worker.launches += 1
        self._reader = threading.Thread(target=self._read_frames, name=f"runner-{launch.run_id}", daemon=True)
        self._reader.start()
        try:
            self._worker.send({"kind": "launch", "run_id": launch.run_id, "generation": launch.generation,
                               "runner_epoch": launch.runner_epoch, "revision": launch.revision,
                               **launch.envelope})
        except OSError as exc:
            self.actor_ref.tell(WorkerGone(f"could not send the launch: {exc}"))

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
            if not safe_tell(ref, WorkerFrame(frame)):
                return
            if frame.get("kind") == "run_over":
                # The launch is over; the next supervisor of this worker reads from here on.
                return

    def release_resources(self) -> None:
        if not self._finished:
            # Stopped from outside (host stopping) or crashed: the worker must not outlive us.
            self._kill_worker("host_stopping" if self._stop_reason is None else self._stop_reason)
            self._report_exit_blocking("host_stopping", requeue=True)
            self._finished = True
            safe_tell(self._scheduler, RunnerFinished(self._launch.run_id, None, None))

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {WorkerFrame: self._frame, WriteResult: self._written, WorkerGone: self._gone,
                StopRunner: self._stop_runner}

    # --- worker protocol ---------------------------------------------------------

    def _frame(self, message: WorkerFrame) -> None:
        frame = message.frame
        kind = frame.get("kind")
        if kind == "request":
            self._forward(frame)
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
        self._writer.submit(WriteCommand("worker.message", args, correlation_id=f"msg:{frame.get('message_id')}"),
                            self.actor_ref)

    def _written(self, result: WriteResult) -> None:
        correlation = result.correlation_id or ""
        if correlation == "exit":
            self._exited_recorded(result)
            return
        if not correlation.startswith("msg:"):
            return
        message_id = correlation[4:]
        if result.ok:
            answer = dict(result.value)
            answer.setdefault("outcome", "accepted")
            if answer.get("released"):
                self._claim_released = True
        else:
            answer = {"outcome": _OUTCOMES.get(result.error_code or "", "rejected"), "error": result.error}
        self._answer(message_id, answer)
        if answer["outcome"] == "claimLost":
            self._stop_runner(StopRunner("claimLost"))

    def _answer(self, message_id: Any, answer: dict[str, Any]) -> None:
        try:
            self._worker.send({"kind": "response", "message_id": message_id, **answer})
        except OSError:
            pass  # the reader thread reports the broken connection

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
              diagnostic: str | None = None) -> None:
        if self._exit_reported:
            return
        self._exit_reported = True
        self._reusable = reusable and self._worker.alive()
        if diagnostic:
            log.warning("run %s: worker %d %s (%s)", self._launch.run_id, self._worker.pid, outcome, diagnostic)
        self._writer.submit(WriteCommand("runner.exit", self._exit_args(outcome, exit_code, diagnostic),
                                         correlation_id="exit"), self.actor_ref)

    def _exit_args(self, outcome: str, exit_code: int | None, diagnostic: str | None,
                   requeue: bool = False) -> dict[str, Any]:
        launch = self._launch
        return {"run_id": launch.run_id, "generation": launch.generation, "runner_epoch": launch.runner_epoch,
                "token_hash": launch.token_hash, "outcome": outcome, "exit_code": exit_code,
                "diagnostic": diagnostic, "load_failure": self._load_failure, "requeue": requeue}

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
