"""A runner supervisor's decisions: `decide(state, event, now) -> (state, effects)`, a pure step
function (its state, events and effects are in supervision_records.py).

`RunnerSupervisor` (runner_supervisor.py) is the loop around it: it owns the
worker process and the launch's link, turns its messages into events with
the facts they need (is the worker alive, did the launch's last transition
release its claim, the link's deadlines), and carries out the effects. What
only a process can tell — a new worker's pid, a killed worker's exit status
— comes back as the answer of the effect that asked (`Spawned`, `Killed`),
decided at once, before the next effect of the step.

What it decides: a launch's worker (the warm one, or a new one when it is
gone, with `runner.attach` when it is not the one recorded with the claim);
how a launch ends (the worker's `run_over`, a crash, a stop from the
scheduler, a lost claim, a broken protocol, a node past its timeout, a
worker that never became ready) and the exit it reports; the worker the slot
keeps for the next launch; and what is left when the host stops.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from piwf_actors.actors.supervision_records import (
    AnswerRead,
    Attach,
    CloseLaunch,
    Died,
    Effect,
    Ending,
    Event,
    Finish,
    FrameSeen,
    HoldRun,
    Kill,
    Killed,
    LaunchArrived,
    LaunchFailed,
    Link,
    Log,
    Ready,
    ReapChildren,
    ReportExit,
    ReportExitBlocking,
    RunnerFinished,
    SendHold,
    SendLaunch,
    Serving,
    ShutdownWorker,
    SlotReady,
    Spawn,
    Spawned,
    Started,
    Step,
    Stopping,
    StopRunner,
    SupervisionConfig,
    SupervisorState,
    ToScheduler,
    WatchdogCheck,
    WorkerGone,
    describe_exit,
)
from piwf_actors.actors.worker_link import Launch, LaunchClaimLost, LinkBroken
from piwf_actors.store.requests import WriteResult

#: A worker that exits with this status found its claim lost (worker/main.py).
CLAIM_LOST_EXIT = 3


def decide(state: SupervisorState, event: Event, now: float, *, config: SupervisionConfig) -> Step:
    """What the supervisor of slot `config.slot` does on `event` at `now` (its clock): (state, effects).

    - `Started`: a warm slot spawns its worker; the scheduler learns the slot (`SlotReady`).
    - `LaunchArrived`: the launch is linked to the slot's worker, or to a new one if it is gone; a
      worker other than the one recorded with a run's claim is attached; the launch frame is sent.
      `LaunchFailed` (starting it raised): the worker is killed, the exit reported `launchFailed`.
    - `FrameSeen`: `content.read` is answered; `run_over` ends the launch — without another
      commit when its last transition released the claim, else reported `exited`, the worker kept
      if it still runs. Frames of a worker the slot let go of, or between launches, are ignored.
    - `StopRunner`, `LaunchClaimLost`, `LinkBroken`, and `WatchdogCheck` past a node's timeout (+
      grace) or the start-up deadline: the worker is killed and the exit reported (`cancelled`,
      `claimLost`, `crashed`, `timedOut`, `startTimeout`); `HoldRun` sends a hold.
    - `WorkerGone`: the worker is reaped; an idle slot gets a new one (if warm); a launch's exit is
      reported `crashed`, or `claimLost` for exit status 3, or the reason it was being stopped for.
    - The exit's `WriteResult`: leftover command processes are reaped, the launch is over, the slot
      keeps a reusable worker or gets a new one (if warm), and the scheduler is told.
    - `Stopping`: a launch in progress is killed and reported (its run goes back to the queue); an
      idle worker is let go (once).
    Each launch reports one exit.
    """
    serving = state.serving
    match event:
        case Spawned(worker, then):
            return _spawned(replace(state, worker=worker), then, config)
        case Killed(exit_code, Ending() as ending):
            return _exit(state, ending.outcome, config, reusable=False, exit_code=exit_code,
                         diagnostic=ending.diagnostic, timed_out=ending.timed_out)
        case Killed(exit_code, Died(pid, detail)):
            return _died(state, pid, detail, exit_code, config)
        case FrameSeen():
            return _frame(state, event, config)
        case WriteResult():
            if serving is None or event.correlation_id != "exit":
                return state, ()
            return _exit_recorded(state, serving, event, config)
        case WatchdogCheck(watch, ready_deadline):
            if serving is None or serving.exit_reported:
                return state, ()
            return _watchdog(state, serving.launch, watch, ready_deadline, now, config)
        case StopRunner(reason, run_id):
            if _current(serving, run_id=run_id):
                return _stop(state, reason)
            return state, ()
        case HoldRun(run_id):
            return state, ((SendHold(),) if _current(serving, run_id=run_id) else ())
        case LaunchClaimLost(launch_id):
            return _stop(state, "claimLost") if _current(serving, launch_id=launch_id) else (state, ())
        case LinkBroken(launch_id, detail):
            if not _current(serving, launch_id=launch_id) or serving is None:
                return state, ()
            log = Log(logging.WARNING, f"run {serving.launch.run_id}: worker {_pid(state)} broke the protocol: "
                                       f"{detail}")
            state, effects = _kill(state, "crashed", Ending("crashed", detail))
            return state, (log, *effects)
        case WorkerGone(pid, detail):
            if state.worker is None or pid != state.worker.pid:
                return state, ()  # a worker this slot already let go of
            return _kill(state, "crashed", Died(pid, detail))
        case LaunchArrived(launch, worker_alive):
            return _launch(state, launch, worker_alive, config)
        case LaunchFailed(detail):
            if serving is None:
                return state, ()
            return _kill(state, "launchFailed", Ending("launchFailed", detail))
        case Started():
            if config.keep_warm:
                return state, (Spawn(Ready()),)
            return state, (ToScheduler(SlotReady(config.slot, state.worker)),)
        case Stopping():
            return _stopping(state, config)
    raise TypeError(f"a runner supervisor cannot decide on {event!r}")


def _current(serving: Serving | None, *, run_id: str | None = None, launch_id: str | None = None) -> bool:
    """Is there a launch whose exit is not reported yet, and is it the one named?"""
    if serving is None or serving.exit_reported:
        return False
    return serving.launch.run_id == run_id if run_id is not None else serving.launch.launch_id == launch_id


def _pid(state: SupervisorState) -> int | None:
    return state.worker.pid if state.worker is not None else None


def _kill(state: SupervisorState, reason: str, then: Ending | Died | None = None) -> Step:
    """Kill the slot's worker (an answer comes back for `then`, even when there is no worker)."""
    return replace(state, worker=None), (Kill(reason, then),)


# --- launching ----------------------------------------------------------------------------------


def _launch(state: SupervisorState, launch: Launch, worker_alive: bool, config: SupervisionConfig) -> Step:
    """Hand a claimed launch to the worker; a worker gone meanwhile is replaced first."""
    state = replace(state, serving=Serving(launch))
    if state.worker is not None and worker_alive:
        return state, (Link(launch), *_send(state, launch, config))
    effects: tuple[Effect, ...] = (Link(launch),)
    if state.worker is not None:
        effects += (Kill("gone before its launch"),)
    return replace(state, worker=None), (*effects, Spawn(launch))


def _send(state: SupervisorState, launch: Launch, config: SupervisionConfig) -> tuple[Effect, ...]:
    assert state.worker is not None
    if launch.worker_pid != state.worker.pid and launch.kind == "run":
        return (Attach(launch, state.worker), ToScheduler(SlotReady(config.slot, state.worker)), SendLaunch())
    return (SendLaunch(),)


def _spawned(state: SupervisorState, then: Ready | Finish | Launch, config: SupervisionConfig) -> Step:
    match then:
        case Ready():
            return state, (ToScheduler(SlotReady(config.slot, state.worker)),)
        case Finish(run_id, status):
            return state, (ToScheduler(RunnerFinished(config.slot, run_id, state.worker, status)),)
    return state, (Link(then), *_send(state, then, config))  # the launch, on its new worker


# --- how a launch ends --------------------------------------------------------------------------


def _frame(state: SupervisorState, seen: FrameSeen, config: SupervisionConfig) -> Step:
    serving = state.serving
    if serving is None or serving.exit_reported or state.worker is None or seen.pid != state.worker.pid:
        return state, ()  # a killed worker's last words, or frames between launches (hello)
    frame = seen.frame
    kind = frame.get("kind")
    if kind == "request" and frame.get("op") == "content.read":
        return state, (AnswerRead(frame.get("message_id"), frame.get("payload") or {}),)
    if kind == "run_over":
        if seen.claim_released:
            # The last transition ended the launch in the same commit (done, failed, parked):
            # nothing is left to settle, so no extra commit.
            state = replace(state, serving=replace(serving, exit_reported=True))
            return _finished(state, None, config, keep_worker=True)
        return _exit(state, "exited", config, reusable=seen.worker_alive)
    if kind == "hello":
        return state, ()
    return state, (Log(logging.WARNING, f"run {serving.launch.run_id}: unexpected worker frame {kind!r}"),)


def _watchdog(state: SupervisorState, launch: Launch, watch: tuple[str, str, float, float] | None,
              ready_deadline: float | None, now: float, config: SupervisionConfig) -> Step:
    """The watchdog, outside the worker: a node past its timeout (+ grace), a worker never ready."""
    if watch is not None and now >= watch[3]:
        node_id, attempt_id, timeout_s, _ = watch
        log = Log(logging.WARNING, f"run {launch.run_id}: node {node_id} ran past its timeout of {timeout_s:g} s "
                                   f"(+{config.watchdog_grace_s:g} s grace); stopping worker {_pid(state)}")
        state, effects = _kill(state, "timedOut", Ending(
            "timedOut", f"node {node_id} exceeded its timeout of {timeout_s:g} s",
            {"node_id": node_id, "attempt_id": attempt_id, "after_s": timeout_s}))
        return state, (log, *effects)
    if ready_deadline is not None and now >= ready_deadline:
        log = Log(logging.WARNING, f"run {launch.run_id}: worker {_pid(state)} did not become ready within "
                                   f"{config.ready_timeout_s:g} s; replacing it")
        state, effects = _kill(state, "startTimeout", Ending(
            "startTimeout", f"the worker did not become ready within {config.ready_timeout_s:g} s"))
        return state, (log, *effects)
    return state, ()


def _stop(state: SupervisorState, reason: str) -> Step:
    """Stop the launch from here (cancelled, claimLost): kill its worker, report the exit as `reason`."""
    assert state.serving is not None
    log = Log(logging.INFO, f"run {state.serving.launch.run_id}: stopping worker {_pid(state)} ({reason})")
    state = replace(state, serving=replace(state.serving, stop_reason=reason))
    state, effects = _kill(state, reason, Ending(reason))
    return state, (log, *effects)


def _died(state: SupervisorState, pid: int, detail: str, exit_code: int | None, config: SupervisionConfig) -> Step:
    """The slot's worker went away and is reaped (`exit_code`)."""
    serving = state.serving
    if serving is None or serving.exit_reported:
        # An idle worker died: replace it so the slot stays warm.
        log = Log(logging.WARNING, f"slot {config.slot}: idle worker {pid} went away ({detail}; "
                                   f"{describe_exit(exit_code)})")
        if serving is not None:
            return state, (log,)
        if config.keep_warm:
            return state, (log, Spawn(Ready()))
        return state, (log, ToScheduler(SlotReady(config.slot, None)))
    outcome = serving.stop_reason or ("claimLost" if exit_code == CLAIM_LOST_EXIT else "crashed")
    return _exit(state, outcome, config, reusable=False, exit_code=exit_code,
                 diagnostic=f"{detail}; {describe_exit(exit_code)}")


def _exit(state: SupervisorState, outcome: str, config: SupervisionConfig, *, reusable: bool,
          exit_code: int | None = None, diagnostic: str | None = None,
          timed_out: dict[str, object] | None = None) -> Step:
    """Report the launch's exit (once); `reusable`: its worker may serve the next launch."""
    serving = state.serving
    if serving is None or serving.exit_reported:
        return state, ()
    state = replace(state, serving=replace(serving, exit_reported=True,
                                           reusable=reusable and state.worker is not None))
    logged: tuple[Effect, ...] = ()
    if diagnostic:
        logged = (Log(logging.WARNING, f"run {serving.launch.run_id}: worker {outcome} ({diagnostic})"),)
    return state, (*logged, ReportExit(outcome, exit_code, diagnostic, timed_out))


def _exit_recorded(state: SupervisorState, serving: Serving, result: WriteResult, config: SupervisionConfig) -> Step:
    answer = result.value if result.ok and isinstance(result.value, dict) else None
    status = answer.get("status") if answer is not None else None
    children = tuple(answer.get("children") or ()) if answer is not None else ()
    reaped: tuple[Effect, ...] = (ReapChildren(serving.launch.run_id, children),) if children else ()
    state, effects = _finished(state, status, config, keep_worker=serving.reusable)
    return state, (*reaped, *effects)


def _finished(state: SupervisorState, status: str | None, config: SupervisionConfig, *, keep_worker: bool) -> Step:
    """The launch is over: free the slot, with a warm worker for the next one."""
    assert state.serving is not None
    run_id = state.serving.launch.run_id
    state = replace(state, serving=None)
    effects: tuple[Effect, ...] = (CloseLaunch(),)
    if not keep_worker and state.worker is not None:
        state, killed = _kill(state, "not reusable")
        effects += killed
    if state.worker is None and config.keep_warm:
        return state, (*effects, Spawn(Finish(run_id, status)))
    return state, (*effects, ToScheduler(RunnerFinished(config.slot, run_id, state.worker, status)))


def _stopping(state: SupervisorState, config: SupervisionConfig) -> Step:
    """Host stopping, or this supervisor crashed: no worker may outlive the slot, and a launch in
    progress is reported (its run goes back to the queue)."""
    if state.stopped:
        return state, ()
    serving = state.serving
    state = replace(state, stopped=True)
    if serving is not None and not serving.exit_reported:
        state = replace(state, worker=None, serving=None)
        return state, (Kill(serving.stop_reason or "host_stopping"), ReportExitBlocking(), CloseLaunch(),
                       ToScheduler(RunnerFinished(config.slot, serving.launch.run_id, None, None)))
    if state.worker is not None:
        return replace(state, worker=None), (ShutdownWorker(),)
    return state, ()
