"""`RunnerSupervisor`: one per worker slot, for the host's lifetime.

It owns its slot's worker process and supervises the runs that worker
executes, one launch after another: it sends the worker a launch, and each
launch's `LaunchLink` (worker_link.py) takes the worker's requests to the
writer as `worker.message` commands and answers the worker only after the
writer committed (or refused) each, in the order the requests came (pure
results arrive pipelined; see runner/engine.py). When the worker ends a
launch, dies, or must be stopped (cancel, claim lost, timeout, host
stopping) it reports the exit to the writer (`runner.exit`, which settles an
interrupted run) unless the launch's last transition already ended it, and
then tells the scheduler the slot is free. A worker that died or was killed
is replaced at once, so the slot stays warm.

The worker's socket is read by the scheduler's one `WorkerSockets` thread.
Per node nothing passes through this actor: that thread hands the launch's
requests to the writer, the writer's thread sends the answers back, a
running shell node's live output goes from that thread straight to the
watchers, and a node's `node_begin` arms the watchdog there. This actor is
told the rest (`WorkerFrames`: `content.read`, `run_over`), a claim the
writer found lost (`LaunchClaimLost`) and a broken protocol (`LinkBroken`).

A supervisor's crash is contained: `on_failure` kills its worker, reports
the launch's exit, and the scheduler starts a new supervisor for the slot
(one-for-one). A launch it cannot even start is reported as an exit too, so
no run stays `starting`.

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
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.content_exchange import ContentExchange
from piwf_actors.actors.worker_link import COMMANDS, Launch, LaunchClaimLost, LaunchLink, LinkBroken
from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.paths import DatabaseLocation
from piwf_actors.runner.process import WorkerProcess
from piwf_actors.runner.termination import is_same_process, machine_identity, terminate_tree
from piwf_actors.store.requests import WriteCommand, WriteResult

__all__ = ["HoldRun", "Launch", "RunnerFinished", "RunnerSupervisor", "SlotReady", "StopRunner", "WatchdogTick",
           "WorkerInfo", "describe_exit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerFrames:
    pid: int
    frames: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class WorkerGone:
    pid: int
    detail: str


@dataclass(frozen=True, slots=True)
class WatchdogTick:
    """From the scheduler's tick: check the running node's deadline and the start-up deadline."""


@dataclass(frozen=True, slots=True)
class StopRunner:
    """Kill the worker of `run_id`'s launch now: `reason` is cancelled, claimLost or timedOut."""

    reason: str
    run_id: str


@dataclass(frozen=True, slots=True)
class HoldRun:
    """A pause was requested for `run_id`: tell its worker to wait for its answers before it
    starts another node, so the pause lands at the next boundary without a node run for nothing."""

    run_id: str


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    pid: int
    create_time: float


@dataclass(frozen=True, slots=True)
class SlotReady:
    """Told to the scheduler when an idle slot's worker changed (spawned or gone)."""

    slot: int
    worker: WorkerInfo | None


@dataclass(frozen=True, slots=True)
class RunnerFinished:
    """Told to the scheduler when a launch is over; the slot is free again. `worker` is the
    slot's worker for the next launch (None: it has none right now)."""

    slot: int
    run_id: str
    worker: WorkerInfo | None
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

    def __init__(self, writer: WriterHandle, scheduler: pykka.ActorRef[Any], sockets: WorkerSockets, slot: int, *,
                 keep_warm: bool = True, grace_s: float = 3.0, database: DatabaseLocation | None = None,
                 watchdog_grace_s: float = 5.0, ready_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 output: Callable[[dict[str, Any]], None] | None = None,
                 worker_log_level: str = "WARNING", worker_log_format: str = "text",
                 worker_env: dict[str, str] | None = None) -> None:
        """Runs in the scheduler's thread: stores arguments only. `worker_env`: variables added to the
        worker's environment (a test's timer clock, piwf_actors/clock.py)."""
        super().__init__(scheduler)
        self.actor_name = f"runner-{slot}"
        self.slot = slot
        self._writer = writer
        self._scheduler = scheduler
        self._sockets = sockets
        self._keep_warm = keep_warm
        self._grace_s = grace_s
        self._database = database
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = ready_timeout_s
        self._clock = clock
        self._output = output  # where a node's live output goes (the host board's "node_output" stream)
        self._worker_log_level = worker_log_level
        self._worker_log_format = worker_log_format
        self._worker_env = worker_env
        self._worker: WorkerProcess | None = None
        self._serving: LaunchLink | None = None
        self._stopped = False

    # --- lifecycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the supervisor's thread: starts the slot's warm worker."""
        if self._keep_warm:
            self._spawn_worker()
        safe_tell(self._scheduler, SlotReady(self.slot, self._worker_info()))

    def release_resources(self) -> None:
        """Host stopping, or this actor crashed: no worker may outlive the slot, and a launch in
        progress is reported (its run goes back to the queue)."""
        if self._stopped:
            return
        self._stopped = True
        serving = self._serving
        if serving is not None and not serving.exit_reported:
            self._kill_worker(serving.stop_reason or "host_stopping")
            self._report_exit_blocking(serving, "host_stopping")
            serving.content.close()
            self._serving = None
            safe_tell(self._scheduler, RunnerFinished(self.slot, serving.launch.run_id, None, None))
        elif self._worker is not None:
            worker, self._worker = self._worker, None
            self._sockets.remove(worker.sock)
            if worker.alive():
                worker.shutdown()
            else:
                worker.sock.close()
            self._release_child(worker)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {Launch: self._start_launch, WorkerFrames: self._frames, WriteResult: self._written,
                WorkerGone: self._gone, StopRunner: self._stop_runner, HoldRun: self._hold,
                WatchdogTick: self._watchdog, LaunchClaimLost: self._claim_lost, LinkBroken: self._link_broken}

    # --- the worker process ------------------------------------------------------------------

    def _spawn_worker(self) -> WorkerProcess:
        worker = WorkerProcess.spawn(log_level=self._worker_log_level, log_format=self._worker_log_format,
                                     env={**os.environ, **self._worker_env} if self._worker_env else None)
        self._worker = worker
        pid, ref = worker.pid, self.actor_ref
        self._writer.submit(WriteCommand("child.register", {"pid": pid, "create_time": worker.create_time,
                                                            "kind": "worker", "machine_id": machine_identity()}))
        self._sockets.add(worker.sock, lambda frames: self._on_frames(pid, frames),
                          lambda detail: safe_tell(ref, WorkerGone(pid, detail)))
        return worker

    def _worker_info(self) -> WorkerInfo | None:
        worker = self._worker
        return None if worker is None else WorkerInfo(worker.pid, worker.create_time)

    def _release_child(self, worker: WorkerProcess) -> None:
        self._writer.submit(WriteCommand("child.release", {"pid": worker.pid, "create_time": worker.create_time}))

    def _kill_worker(self, reason: str) -> int | None:
        """Terminate the worker's tree; the slot has no worker until the next spawn."""
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        log.debug("slot %d: terminating worker %d (%s)", self.slot, worker.pid, reason)
        self._sockets.remove(worker.sock)
        code = worker.kill(self._grace_s) if worker.alive() else worker.process.wait()
        worker.sock.close()
        self._release_child(worker)
        return code

    def _on_frames(self, pid: int, frames: list[dict[str, Any]]) -> None:
        """In the socket thread: a launch's requests go to its link (and on to the writer), live
        output to the watchers, `node_begin` arms the watchdog; the rest goes to the actor as one
        message. (`content.read` is only sent while no other request is outstanding, and
        `run_over` after every answer was read, so what goes to the actor cannot overtake a
        request or be overtaken by one.)"""
        serving = self._serving
        worker = self._worker
        current = (serving is not None and not serving.exit_reported and worker is not None and worker.pid == pid)
        forward = []
        for frame in frames:
            kind = frame.get("kind")
            if kind == "node_output":
                # Live output of a running shell node: straight to the watchers, no actor hop.
                if self._output is not None and serving is not None:
                    self._output({**frame, "run_id": serving.launch.run_id})
            elif kind == "node_begin":
                if serving is not None:
                    serving.arm_watchdog(frame)
            elif current and (kind == "content" or (kind == "request" and frame.get("op") != "content.read")):
                assert serving is not None
                if not serving.from_worker(frame):
                    return  # the link broke (and told this actor): the launch ends, nothing more is read
            else:
                forward.append(frame)
        if forward:
            safe_tell(self.actor_ref, WorkerFrames(pid, forward))

    # --- launches ------------------------------------------------------------------------------

    def _start_launch(self, launch: Launch) -> None:
        """Hand a claimed run to the worker. Whatever goes wrong is reported as the launch's exit
        (`launchFailed`): the run must not stay `starting` with its claim renewed for ever."""
        worker = self._worker
        serving = self._link(launch, worker)
        try:
            if worker is None or not worker.alive():
                if worker is not None:
                    self._kill_worker("gone before its launch")
                worker = self._spawn_worker()
                serving = self._link(launch, worker)
            if launch.worker_pid != worker.pid and launch.kind == "run":
                self._writer.submit(WriteCommand("runner.attach", {
                    "run_id": launch.run_id, "launch_id": launch.launch_id, "pid": worker.pid,
                    "create_time": worker.create_time}))
                safe_tell(self._scheduler, SlotReady(self.slot, self._worker_info()))
            worker.launches += 1
            serving.send(self._launch_frame(serving), under=("state",))
        except Exception as exc:  # the launch could not start: settle it, free the slot
            log.exception("run %s: the launch could not start", launch.run_id)
            code = self._kill_worker("launchFailed")
            self._exit(serving, "launchFailed", reusable=False, exit_code=code,
                       diagnostic=f"the launch could not start: {type(exc).__name__}: {exc}")

    def _link(self, launch: Launch, worker: WorkerProcess | None) -> LaunchLink:
        """The launch's link to `worker`, made the slot's current launch (the socket thread takes
        the worker's requests to it from now on)."""
        ref = self.actor_ref
        link = LaunchLink(launch, ContentExchange(self._database), writer=self._writer, sockets=self._sockets,
                          sock=worker.sock if worker is not None else None,
                          ready_deadline=self._clock() + self._ready_timeout_s,
                          tell=lambda message: safe_tell(ref, message), clock=self._clock,
                          watchdog_grace_s=self._watchdog_grace_s)
        previous, self._serving = self._serving, link
        if previous is not None and previous is not link:
            previous.content.close()
        return link

    def _launch_frame(self, serving: LaunchLink) -> dict[str, Any]:
        """The launch envelope; large stored values (the state's, the source) as content references."""
        launch = serving.launch
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
                 "launch_id": launch.launch_id, "revision": launch.revision, **envelope}
        return serving.content.point_at(frame, stored)

    # --- worker protocol ---------------------------------------------------------------------

    def _frames(self, message: WorkerFrames) -> None:
        for frame in message.frames:
            serving = self._serving
            if serving is None or serving.exit_reported or self._worker is None or message.pid != self._worker.pid:
                return  # a killed worker's last words, or frames between launches (hello)
            self._frame(serving, frame)

    def _frame(self, serving: LaunchLink, frame: dict[str, Any]) -> None:
        kind = frame.get("kind")
        if kind == "request" and frame.get("op") == "content.read":
            serving.ready_deadline = None  # the worker is up and talking (reading its launch's content)
            serving.answer_read(frame.get("message_id"), frame.get("payload") or {})
        elif kind == "run_over":
            if serving.claim_released:
                # The last transition ended the launch in the same commit (done, failed,
                # parked): nothing is left to settle, so no extra commit.
                serving.exit_reported = True
                self._finished(serving, None, keep_worker=True)
                return
            self._exit(serving, "exited", reusable=True)
        elif kind != "hello":
            log.warning("run %s: unexpected worker frame %r", serving.launch.run_id, kind)

    def _written(self, result: WriteResult) -> None:
        """The writer's answer to this actor's own commands: the exit of a launch."""
        serving = self._serving
        if serving is not None and result.correlation_id == "exit":
            self._exited_recorded(serving, result)

    def _claim_lost(self, message: LaunchClaimLost) -> None:
        serving = self._serving
        if serving is not None and not serving.exit_reported and serving.launch.launch_id == message.launch_id:
            self._stop_launch(serving, "claimLost")

    def _link_broken(self, message: LinkBroken) -> None:
        serving = self._serving
        if serving is not None and not serving.exit_reported and serving.launch.launch_id == message.launch_id:
            self._protocol_error(serving, message.detail)

    def _protocol_error(self, serving: LaunchLink, detail: str) -> None:
        pid = self._worker.pid if self._worker is not None else None
        log.warning("run %s: worker %s broke the protocol: %s", serving.launch.run_id, pid, detail)
        code = self._kill_worker("crashed")
        self._exit(serving, "crashed", reusable=False, exit_code=code, diagnostic=detail)

    # --- the watchdog ---------------------------------------------------------------------------

    def _watchdog(self, _message: WatchdogTick) -> None:
        serving = self._serving
        if serving is None or serving.exit_reported:
            return
        now = self._clock()
        pid = self._worker.pid if self._worker is not None else None
        if serving.watch is not None and now >= serving.watch[3]:
            node_id, attempt_id, timeout_s, _ = serving.watch
            serving.watch = None
            log.warning("run %s: node %s ran past its timeout of %g s (+%g s grace); stopping worker %s",
                        serving.launch.run_id, node_id, timeout_s, self._watchdog_grace_s, pid)
            code = self._kill_worker("timedOut")
            self._exit(serving, "timedOut", reusable=False, exit_code=code,
                       diagnostic=f"node {node_id} exceeded its timeout of {timeout_s:g} s",
                       timed_out={"node_id": node_id, "attempt_id": attempt_id, "after_s": timeout_s})
        elif serving.ready_deadline is not None and now >= serving.ready_deadline:
            serving.ready_deadline = None
            log.warning("run %s: worker %s did not become ready within %g s; replacing it", serving.launch.run_id,
                        pid, self._ready_timeout_s)
            code = self._kill_worker("startTimeout")
            self._exit(serving, "startTimeout", reusable=False, exit_code=code,
                       diagnostic=f"the worker did not become ready within {self._ready_timeout_s:g} s")

    # --- endings ------------------------------------------------------------------------------

    def _hold(self, message: HoldRun) -> None:
        serving = self._serving
        if serving is None or serving.exit_reported or serving.launch.run_id != message.run_id:
            return
        serving.send({"kind": "hold"})

    def _stop_runner(self, message: StopRunner) -> None:
        serving = self._serving
        if serving is None or serving.exit_reported or serving.launch.run_id != message.run_id:
            return
        self._stop_launch(serving, message.reason)

    def _stop_launch(self, serving: LaunchLink, reason: str) -> None:
        serving.stop_reason = reason
        pid = self._worker.pid if self._worker is not None else None
        log.info("run %s: stopping worker %s (%s)", serving.launch.run_id, pid, reason)
        code = self._kill_worker(reason)
        self._exit(serving, reason, reusable=False, exit_code=code)

    def _gone(self, message: WorkerGone) -> None:
        if self._worker is None or message.pid != self._worker.pid:
            return  # a worker this slot already let go of
        serving = self._serving
        code = self._kill_worker("crashed")
        if serving is None or serving.exit_reported:
            # An idle worker died: replace it so the slot stays warm.
            log.warning("slot %d: idle worker %d went away (%s; %s)", self.slot, message.pid, message.detail,
                        describe_exit(code))
            if self._keep_warm and serving is None:
                self._spawn_worker()
            if serving is None:
                safe_tell(self._scheduler, SlotReady(self.slot, self._worker_info()))
            return
        outcome = serving.stop_reason or ("claimLost" if code == 3 else "crashed")
        self._exit(serving, outcome, reusable=False, exit_code=code,
                   diagnostic=f"{message.detail}; {describe_exit(code)}")

    def _exit(self, serving: LaunchLink, outcome: str, *, reusable: bool, exit_code: int | None = None,
              diagnostic: str | None = None, timed_out: dict[str, Any] | None = None) -> None:
        if serving.exit_reported:
            return
        serving.exit_reported = True
        serving.watch = serving.ready_deadline = None
        serving.reusable = reusable and self._worker is not None and self._worker.alive()
        if diagnostic:
            log.warning("run %s: worker %s (%s)", serving.launch.run_id, outcome, diagnostic)
        args = self._exit_args(serving, outcome, exit_code, diagnostic)
        if timed_out is not None:
            args["timed_out"] = timed_out
        self._writer.submit(WriteCommand(COMMANDS[serving.launch.kind][1], args, correlation_id="exit"),
                            self.actor_ref)

    @staticmethod
    def _exit_args(serving: LaunchLink, outcome: str, exit_code: int | None, diagnostic: str | None,
                   requeue: bool = False) -> dict[str, Any]:
        launch = serving.launch
        return {**launch.claim_fence(), "launch_id": launch.launch_id,
                "token_hash": launch.token_hash, "outcome": outcome, "exit_code": exit_code,
                "diagnostic": diagnostic and diagnostic[:2000], "load_failure": serving.load_failure,
                "requeue": requeue}

    def _report_exit_blocking(self, serving: LaunchLink, outcome: str) -> None:
        serving.exit_reported = True
        try:
            result = self._writer.execute(COMMANDS[serving.launch.kind][1], self._exit_args(
                serving, outcome, None, "host stopping", requeue=True), timeout=10)
            if result.ok:
                self._reap_children(serving, result.value.get("children") or [])
        except Exception as exc:  # the next host's recovery settles the run
            log.warning("run %s: could not report runner exit: %s", serving.launch.run_id, exc)

    def _reap_children(self, serving: LaunchLink, children: list[dict[str, Any]]) -> None:
        for child in children:
            if is_same_process(child["pid"], child["create_time"]):
                log.info("run %s: terminating leftover command pid %d", serving.launch.run_id, child["pid"])
                terminate_tree(child["pid"], child["create_time"], grace_s=self._grace_s)
            self._writer.submit(WriteCommand("child.release", {**child, "run_id": serving.launch.run_id}))

    def _exited_recorded(self, serving: LaunchLink, result: WriteResult) -> None:
        status = result.value.get("status") if result.ok and isinstance(result.value, dict) else None
        if result.ok and isinstance(result.value, dict):
            self._reap_children(serving, result.value.get("children") or [])
        self._finished(serving, status, keep_worker=serving.reusable)

    def _finished(self, serving: LaunchLink, status: str | None, *, keep_worker: bool) -> None:
        """The launch is over: free the slot, with a warm worker for the next one."""
        serving.content.close()
        self._serving = None
        if not keep_worker and self._worker is not None:
            self._kill_worker("not reusable")
        if self._worker is None and self._keep_warm:
            self._spawn_worker()
        safe_tell(self._scheduler, RunnerFinished(self.slot, serving.launch.run_id, self._worker_info(), status))
