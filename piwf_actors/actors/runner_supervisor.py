"""`RunnerSupervisor`: one per worker slot, for the host's lifetime.

It owns its slot's worker process and supervises the runs that worker
executes, one launch after another: it sends the worker a launch, and each
launch's `LaunchLink` (worker_link.py) takes the worker's requests to the
writer as `worker.message` commands and answers the worker only after the
writer committed (or refused) each, in the order the requests came (pure
results arrive pipelined; see worker/engine.py). When the worker ends a
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

Frames stay bounded (`wire/content.py`): large launch values go as
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

Every decision is the step function `decide` (supervision.py), a pure
function of a frozen `SupervisorState`, tested with a chosen `now`; this
actor is its loop and owns what a decision cannot hold: the worker process,
the launch's link (which the socket and writer threads touch too), the
socket thread's callbacks. It turns messages into events with the facts
they need and carries out the effects; a spawn's new worker and a kill's
exit status are answers it decides on at once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.content_exchange import ContentExchange
from piwf_actors.actors.supervision import decide
from piwf_actors.actors.supervision_records import (
    AnswerRead,
    Attach,
    CloseLaunch,
    Effect,
    Event,
    FrameSeen,
    HoldRun,
    Kill,
    Killed,
    LaunchArrived,
    LaunchFailed,
    Link,
    Log,
    ReapChildren,
    ReportExit,
    ReportExitBlocking,
    RunnerFinished,
    SendHold,
    SendLaunch,
    ShutdownWorker,
    SlotReady,
    Spawn,
    Spawned,
    Started,
    Stopping,
    StopRunner,
    SupervisionConfig,
    SupervisorState,
    ToScheduler,
    WatchdogCheck,
    WatchdogTick,
    WorkerFrames,
    WorkerGone,
    WorkerInfo,
    describe_exit,
)
from piwf_actors.actors.worker_link import COMMANDS, Launch, LaunchClaimLost, LaunchLink, LinkBroken
from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.requests import WriteCommand, WriteResult
from piwf_actors.worker.process import WorkerProcess
from piwf_actors.worker.termination import is_same_process, machine_identity, terminate_tree

__all__ = ["HoldRun", "Launch", "RunnerFinished", "RunnerSupervisor", "SlotReady", "StopRunner", "WatchdogTick",
           "WorkerInfo", "describe_exit"]

log = logging.getLogger(__name__)


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
        self._config = SupervisionConfig(slot=slot, keep_warm=keep_warm, ready_timeout_s=ready_timeout_s,
                                         watchdog_grace_s=watchdog_grace_s)
        self._state = SupervisorState()
        self._writer = writer
        self._scheduler = scheduler
        self._sockets = sockets
        self._grace_s = grace_s
        self._database = database
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = ready_timeout_s
        self._clock = clock
        self._output = output  # where a node's live output goes (the host board's "node_output" stream)
        self._worker_log_level = worker_log_level
        self._worker_log_format = worker_log_format
        self._worker_env = worker_env
        # What `decide` knows as `SupervisorState.worker` / `.serving`, as the objects the socket thread
        # reads too (each changed by one assignment, in this actor's thread).
        self._worker: WorkerProcess | None = None
        self._serving: LaunchLink | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the supervisor's thread: starts the slot's warm worker."""
        self._handle(Started())

    def release_resources(self) -> None:
        """Host stopping, or this actor crashed: no worker may outlive the slot, and a launch in
        progress is reported (its run goes back to the queue)."""
        self._handle(Stopping())

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {Launch: self._start_launch, WorkerFrames: self._frames, WriteResult: self._handle,
                WorkerGone: self._handle, StopRunner: self._handle, HoldRun: self._handle,
                WatchdogTick: self._watchdog, LaunchClaimLost: self._handle, LinkBroken: self._handle}

    # --- messages to events ---------------------------------------------------------------------

    def _start_launch(self, launch: Launch) -> None:
        """Hand a claimed run to the worker. Whatever goes wrong is reported as the launch's exit
        (`launchFailed`): the run must not stay `starting` with its claim renewed for ever."""
        try:
            worker = self._worker
            self._handle(LaunchArrived(launch, worker is not None and worker.alive()))
        except Exception as exc:  # the launch could not start: settle it, free the slot
            log.exception("run %s: the launch could not start", launch.run_id)
            self._handle(LaunchFailed(f"the launch could not start: {type(exc).__name__}: {exc}"))

    def _frames(self, message: WorkerFrames) -> None:
        for frame in message.frames:
            serving, worker = self._serving, self._worker
            # Whether the worker still runs matters to `run_over` only (is it reusable?): read just then.
            alive = frame.get("kind") == "run_over" and worker is not None and worker.alive()
            self._handle(FrameSeen(message.pid, frame, serving is not None and serving.claim_released, alive))

    def _watchdog(self, _message: WatchdogTick) -> None:
        serving = self._serving
        self._handle(WatchdogCheck(serving.watch if serving else None, serving.ready_deadline if serving else None))

    # --- the loop: decide, then carry out -------------------------------------------------------

    def _handle(self, event: Event) -> None:
        """Runs in the supervisor's thread: decide on `event`, then carry out the effects in order;
        the answer of an effect that answers is decided on at once, before the next effect."""
        self._state, effects = decide(self._state, event, self._clock(), config=self._config)
        for effect in effects:
            answer = self._carry_out(effect)
            if answer is not None:
                self._handle(answer)

    def _carry_out(self, effect: Effect) -> Event | None:
        serving = self._serving
        match effect:
            case Spawn(then):
                worker = self._spawn_worker()
                return Spawned(WorkerInfo(worker.pid, worker.create_time), then)
            case Kill(reason, then):
                code = self._kill_worker(reason)
                return None if then is None else Killed(code, then)
            case Link(launch):
                self._link(launch, self._worker)
            case Attach(launch, worker):
                self._writer.submit(WriteCommand("runner.attach", {
                    "run_id": launch.run_id, "launch_id": launch.launch_id, "pid": worker.pid,
                    "create_time": worker.create_time}))
            case SendLaunch():
                assert serving is not None and self._worker is not None
                self._worker.launches += 1
                serving.send(self._launch_frame(serving), under=("state",))
            case SendHold():
                assert serving is not None
                serving.send({"kind": "hold"})
            case AnswerRead(message_id, payload):
                assert serving is not None
                serving.ready_deadline = None  # the worker is up and talking (reading its launch's content)
                serving.answer_read(message_id, payload)
            case ReportExit():
                assert serving is not None
                self._report_exit(serving, effect)
            case ReportExitBlocking():
                if serving is not None:
                    self._report_exit_blocking(serving, "host_stopping")
            case ReapChildren(run_id, children):
                self._reap_children(run_id, children)
            case CloseLaunch():
                self._serving = None
                if serving is not None:
                    serving.exit_reported = True
                    serving.content.close()
            case ShutdownWorker():
                self._shutdown_worker()
            case ToScheduler(message):
                safe_tell(self._scheduler, message)
            case Log(level, text):
                log.log(level, "%s", text)
            case _:
                raise TypeError(f"{self.actor_name} cannot carry out {effect!r}")
        return None

    # --- the worker process ------------------------------------------------------------------

    def _spawn_worker(self) -> WorkerProcess:
        worker = WorkerProcess.spawn(log_level=self._worker_log_level, log_format=self._worker_log_format,
                                     env={**os.environ, **self._worker_env} if self._worker_env else None)
        self._worker = worker
        pid, ref = worker.pid, self.actor_ref
        self._writer.submit(WriteCommand("child.register", {"pid": pid, "create_time": worker.create_time,
                                                            "kind": "worker", "machine_id": machine_identity()}))

        def gone(detail: str) -> None:  # in the socket thread
            safe_tell(ref, WorkerGone(pid, detail))

        self._sockets.add(worker.sock, lambda frames: self._on_frames(pid, frames), gone)
        return worker

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

    def _shutdown_worker(self) -> None:
        """Let the idle worker go: asked to exit (killed if it does not), or its socket closed if gone."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        self._sockets.remove(worker.sock)
        if worker.alive():
            worker.shutdown()
        else:
            worker.sock.close()
        self._release_child(worker)

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

    # --- the launch and its link -----------------------------------------------------------------

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

    # --- the exit ------------------------------------------------------------------------------

    def _report_exit(self, serving: LaunchLink, effect: ReportExit) -> None:
        """Send the launch's exit; from now on the link answers the worker nothing and the watchdog
        stands down. The writer's answer comes back as a `WriteResult` under `exit`."""
        serving.exit_reported = True
        serving.watch = serving.ready_deadline = None
        args = self._exit_args(serving, effect.outcome, effect.exit_code, effect.diagnostic)
        if effect.timed_out is not None:
            args["timed_out"] = effect.timed_out
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
                self._reap_children(serving.launch.run_id, result.value.get("children") or [])
        except Exception as exc:  # the next host's recovery settles the run
            log.warning("run %s: could not report runner exit: %s", serving.launch.run_id, exc)

    def _reap_children(self, run_id: str, children: Sequence[dict[str, Any]]) -> None:
        for child in children:
            if is_same_process(child["pid"], child["create_time"]):
                log.info("run %s: terminating leftover command pid %d", run_id, child["pid"])
                terminate_tree(child["pid"], child["create_time"], grace_s=self._grace_s)
            self._writer.submit(WriteCommand("child.release", {**child, "run_id": run_id}))
