"""The records of a runner supervisor (runner_supervisor.py): the messages it exchanges with the
scheduler, and its step function's state, events and effects (supervision.py). Frozen dataclasses;
no logic but `describe_exit`.

An effect that answers (`Spawn`, a `Kill` with something to do `then`) names the event its answer
comes back as; the supervisor decides on that answer at once, before the next effect of the step.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from piwf_actors.actors.worker_link import Launch, LaunchClaimLost, LinkBroken
from piwf_actors.store.requests import WriteResult

# --- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerFrames:
    """From the socket thread: frames of worker `pid` that are the actor's (not a launch's requests)."""

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


# --- state ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SupervisionConfig:
    slot: int
    keep_warm: bool  # the slot keeps a worker between launches (and from the start)
    ready_timeout_s: float  # a launch's worker must send its first request within this
    watchdog_grace_s: float  # a node may run this long past its own timeout


@dataclass(frozen=True, slots=True)
class Serving:
    """The launch the slot serves, as far as the supervisor decides (the link it runs on is the
    actor's: the socket and writer threads touch it too)."""

    launch: Launch
    exit_reported: bool = False  # its exit is settled or being settled (mirrored on its link)
    stop_reason: str | None = None  # why it was stopped from here (cancelled, claimLost, timedOut)
    reusable: bool = False  # its worker may serve the next launch


@dataclass(frozen=True, slots=True)
class SupervisorState:
    worker: WorkerInfo | None = None  # the slot's worker process
    serving: Serving | None = None
    stopped: bool = False


# --- events (besides the messages StopRunner, HoldRun, WorkerGone, LaunchClaimLost, LinkBroken and the
# writer's WriteResult, which `decide` takes as they come) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Started:
    """The supervisor started: a warm slot spawns its worker; the scheduler learns the slot."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """The host stops, or the supervisor crashed: no worker may outlive the slot."""


@dataclass(frozen=True, slots=True)
class LaunchArrived:
    """The scheduler handed the slot `launch`; `worker_alive`: the slot's worker still runs."""

    launch: Launch
    worker_alive: bool


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """Starting the launch raised (`detail` says what): it is settled, the slot freed."""

    detail: str


@dataclass(frozen=True, slots=True)
class FrameSeen:
    """One frame of worker `pid` for the actor, with what the link and the process showed just then."""

    pid: int
    frame: dict[str, Any]
    claim_released: bool  # the launch's own last transition released its claim (the writer's thread)
    worker_alive: bool


@dataclass(frozen=True, slots=True)
class WatchdogCheck:
    """A `WatchdogTick`, with the link's deadlines as the socket thread last set them."""

    watch: tuple[str, str, float, float] | None  # (node id, attempt id, timeout_s, deadline)
    ready_deadline: float | None


@dataclass(frozen=True, slots=True)
class Ready:
    """After a spawn: tell the scheduler the slot's worker (`SlotReady`)."""


@dataclass(frozen=True, slots=True)
class Finish:
    """After a spawn: tell the scheduler the launch of `run_id` is over (`RunnerFinished`)."""

    run_id: str
    status: str | None


@dataclass(frozen=True, slots=True)
class Spawned:
    """The answer to `Spawn`: the new worker; `then` what to do with it."""

    worker: WorkerInfo
    then: Ready | Finish | Launch


@dataclass(frozen=True, slots=True)
class Ending:
    """After a kill: report the launch's exit as `outcome` (with the kill's exit status)."""

    outcome: str
    diagnostic: str | None = None
    timed_out: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Died:
    """After a kill: worker `pid` had gone away (`detail`); its exit status says how."""

    pid: int
    detail: str


@dataclass(frozen=True, slots=True)
class Killed:
    """The answer to a `Kill` with a `then`: the worker's exit status (None: unknown, or no worker)."""

    exit_code: int | None
    then: Ending | Died


Event = (Started | Stopping | LaunchArrived | LaunchFailed | FrameSeen | WatchdogCheck | Spawned | Killed
         | StopRunner | HoldRun | WorkerGone | LaunchClaimLost | LinkBroken | WriteResult)


# --- effects --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spawn:
    """Spawn the slot's worker (registered as a child, its socket read); answered `Spawned(worker, then)`."""

    then: Ready | Finish | Launch


@dataclass(frozen=True, slots=True)
class Kill:
    """Terminate the slot's worker tree (`reason` for the log); the slot has none until the next spawn.
    Answered `Killed(exit status, then)` when `then` is given."""

    reason: str
    then: Ending | Died | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """Make `launch` the slot's current launch, linked to the slot's worker (the socket thread takes its
    requests to the writer from now on)."""

    launch: Launch


@dataclass(frozen=True, slots=True)
class Attach:
    """`runner.attach`: the launch runs on `worker`, not the one recorded with its claim."""

    launch: Launch
    worker: WorkerInfo


@dataclass(frozen=True, slots=True)
class SendLaunch:
    """Send the launch frame to the worker (large values as content references)."""


@dataclass(frozen=True, slots=True)
class SendHold:
    """Tell the worker to wait for its answers before it starts another node."""


@dataclass(frozen=True, slots=True)
class AnswerRead:
    """Answer the worker's `content.read` with one chunk (the worker is up: no start-up deadline)."""

    message_id: Any
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReportExit:
    """Send the launch's exit (`runner.exit` / `reconcile.exit`); the writer's answer (a `WriteResult`
    under `exit`) comes back to the actor. The link stops answering the worker."""

    outcome: str
    exit_code: int | None = None
    diagnostic: str | None = None
    timed_out: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ReportExitBlocking:
    """The host stops: report the exit (`host_stopping`, back to the queue) and wait for it, up to 10 s;
    terminate the command processes it reports left over."""


@dataclass(frozen=True, slots=True)
class ReapChildren:
    """Terminate the launch's leftover command processes that still run, and release their records."""

    run_id: str
    children: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class CloseLaunch:
    """The launch is over: its link is closed and let go."""


@dataclass(frozen=True, slots=True)
class ShutdownWorker:
    """Let the idle worker go (asked to exit, killed after a grace)."""


@dataclass(frozen=True, slots=True)
class ToScheduler:
    message: SlotReady | RunnerFinished


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    text: str


Effect = (Spawn | Kill | Link | Attach | SendLaunch | SendHold | AnswerRead | ReportExit | ReportExitBlocking
          | ReapChildren | CloseLaunch | ShutdownWorker | ToScheduler | Log)
Step = tuple[SupervisorState, tuple[Effect, ...]]
