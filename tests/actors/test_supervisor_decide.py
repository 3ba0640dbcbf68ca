"""`RunnerSupervisor`'s step function `decide(state, event, now)` (actors/supervision.py), with a chosen `now`.

No threads, no worker process, no writer: each test feeds events to the pure function, answers the
effects that answer (a spawn's new worker, a kill's exit status) with the event the actor would send,
and checks the new state and the effects. The actor around it runs real workers in
tests/worker/test_worker_between_launches.py and every host test.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from piwf_actors.actors.supervision import decide
from piwf_actors.actors.supervision_records import (
    AnswerRead,
    Attach,
    CloseLaunch,
    Died,
    Effect,
    Ending,
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
    WorkerGone,
    WorkerInfo,
    describe_exit,
)
from piwf_actors.actors.worker_link import Launch, LaunchClaimLost, LinkBroken
from piwf_actors.store.requests import WriteResult

SLOT = 2
WARM = SupervisionConfig(slot=SLOT, keep_warm=True, ready_timeout_s=30.0, watchdog_grace_s=5.0)
COLD = SupervisionConfig(slot=SLOT, keep_warm=False, ready_timeout_s=30.0, watchdog_grace_s=5.0)
T0 = 500.0
OLD = WorkerInfo(4001, 1.0)
NEW = WorkerInfo(4002, 2.0)


def step(state: SupervisorState, event: Any, now: float = T0,
         config: SupervisionConfig = WARM) -> tuple[SupervisorState, tuple[Effect, ...]]:
    return decide(state, event, now, config=config)


def launch(run_id: str = "r1", *, worker_pid: int | None = OLD.pid, kind: str = "run") -> Launch:
    return Launch(run_id=run_id, generation=1, launch_id=f"l-{run_id}", token_hash="h" * 64, revision=3,
                  envelope={"workflow": "wf"}, worker_pid=worker_pid, kind=kind,
                  fence={"manager": "m", "key": "k"} if kind == "reconcile" else None)


def serving(run_id: str = "r1") -> SupervisorState:
    """A warm slot serving `run_id` on the worker recorded with its claim."""
    state, effects = step(SupervisorState(worker=OLD), LaunchArrived(launch(run_id), worker_alive=True))
    assert effects == (Link(launch(run_id)), SendLaunch())
    return state


def frame(kind: str, *, pid: int = OLD.pid, claim_released: bool = False,
          worker_alive: bool = True, **fields: Any) -> FrameSeen:
    return FrameSeen(pid, {"kind": kind, **fields}, claim_released, worker_alive)


def exit_answer(value: dict[str, Any] | None = None, ok: bool = True) -> WriteResult:
    return WriteResult(ok, value, None if ok else "busy", None if ok else "database is locked", "exit")


# --- a slot and its worker -------------------------------------------------------------------------------


def test_a_warm_slot_spawns_its_worker_then_tells_the_scheduler() -> None:
    state, effects = step(SupervisorState(), Started())
    assert effects == (Spawn(Ready()),)
    state, effects = step(state, Spawned(NEW, Ready()))
    assert state.worker == NEW and effects == (ToScheduler(SlotReady(SLOT, NEW)),)


def test_a_cold_slot_starts_without_a_worker() -> None:
    assert step(SupervisorState(), Started(), config=COLD) == (SupervisorState(), (ToScheduler(SlotReady(SLOT, None)),))


# --- launching -------------------------------------------------------------------------------------------


def test_a_launch_on_the_warm_worker_recorded_with_its_claim_is_sent_at_once() -> None:
    state = serving()
    assert state.serving is not None and state.serving.launch == launch() and state.worker == OLD


def test_a_run_on_a_worker_other_than_the_claims_is_attached_first() -> None:
    unrecorded = launch(worker_pid=None)
    _, effects = step(SupervisorState(worker=OLD), LaunchArrived(unrecorded, worker_alive=True))
    assert effects == (Link(unrecorded), Attach(unrecorded, OLD), ToScheduler(SlotReady(SLOT, OLD)), SendLaunch())
    # A reconcile's claim records no worker: it is never attached.
    reconcile = launch("rc-1", worker_pid=None, kind="reconcile")
    _, effects = step(SupervisorState(worker=OLD), LaunchArrived(reconcile, worker_alive=True))
    assert effects == (Link(reconcile), SendLaunch())


def test_a_launch_whose_worker_is_gone_gets_a_new_worker_and_is_attached_to_it() -> None:
    arriving = launch()
    state, effects = step(SupervisorState(worker=OLD), LaunchArrived(arriving, worker_alive=False))
    assert effects == (Link(arriving), Kill("gone before its launch"), Spawn(arriving))
    assert state.worker is None
    state, effects = step(state, Spawned(NEW, arriving))
    assert state.worker == NEW
    assert effects == (Link(arriving), Attach(arriving, NEW), ToScheduler(SlotReady(SLOT, NEW)), SendLaunch())


def test_a_launch_on_a_slot_without_a_worker_spawns_one() -> None:
    arriving = launch(worker_pid=None)
    _, effects = step(SupervisorState(), LaunchArrived(arriving, worker_alive=False), config=COLD)
    assert effects == (Link(arriving), Spawn(arriving))


def test_a_launch_that_could_not_start_is_reported_launch_failed() -> None:
    state, effects = step(serving(), LaunchFailed("the launch could not start: RuntimeError: broken"))
    assert effects == (Kill("launchFailed", Ending("launchFailed", "the launch could not start: RuntimeError: broken")),)
    state, effects = step(state, Killed(None, Ending("launchFailed", "the launch could not start: RuntimeError: broken")))
    assert effects == (
        Log(logging.WARNING, "run r1: worker launchFailed (the launch could not start: RuntimeError: broken)"),
        ReportExit("launchFailed", None, "the launch could not start: RuntimeError: broken"))
    assert state.serving is not None and state.serving.exit_reported and not state.serving.reusable


# --- the worker's frames ---------------------------------------------------------------------------------


def test_content_reads_are_answered_and_hellos_ignored() -> None:
    state = serving()
    assert step(state, frame("request", op="content.read", message_id=7, payload={"digest": "d"}))[1] == (
        AnswerRead(7, {"digest": "d"}),)
    assert step(state, frame("request", op="content.read", message_id=8))[1] == (AnswerRead(8, {}),)
    assert step(state, frame("hello")) == (state, ())
    assert step(state, frame("bogus"))[1] == (Log(logging.WARNING, "run r1: unexpected worker frame 'bogus'"),)


def test_frames_of_a_worker_let_go_of_or_between_launches_are_ignored() -> None:
    state = serving()
    assert step(state, frame("run_over", pid=NEW.pid)) == (state, ())
    assert step(SupervisorState(worker=OLD), frame("run_over")) == (SupervisorState(worker=OLD), ())


def test_a_run_over_whose_last_transition_released_the_claim_ends_without_another_commit() -> None:
    state, effects = step(serving(), frame("run_over", claim_released=True))
    assert effects == (CloseLaunch(), ToScheduler(RunnerFinished(SLOT, "r1", OLD, None)))
    assert state == SupervisorState(worker=OLD)  # the worker stays warm for the next launch


def test_a_run_over_without_its_end_recorded_is_reported_exited_and_the_live_worker_kept() -> None:
    state, effects = step(serving(), frame("run_over"))
    assert effects == (ReportExit("exited"),)
    assert state.serving is not None and state.serving.reusable
    # The exit is reported once: a second run_over (or anything else) finds it reported.
    assert step(state, frame("run_over")) == (state, ())
    state, effects = step(state, exit_answer({"status": "done", "settled": True}))
    assert effects == (CloseLaunch(), ToScheduler(RunnerFinished(SLOT, "r1", OLD, "done")))
    assert state == SupervisorState(worker=OLD)


def test_a_worker_that_died_after_its_run_over_is_replaced_before_the_slot_is_free() -> None:
    state, _ = step(serving(), frame("run_over", worker_alive=False))
    assert state.serving is not None and not state.serving.reusable
    state, effects = step(state, exit_answer({"status": "queued"}))
    assert effects == (CloseLaunch(), Kill("not reusable"), Spawn(Finish("r1", "queued")))
    state, effects = step(state, Spawned(NEW, Finish("r1", "queued")))
    assert effects == (ToScheduler(RunnerFinished(SLOT, "r1", NEW, "queued")),) and state.worker == NEW


def test_a_cold_slot_frees_without_a_new_worker() -> None:
    state, _ = step(serving(), frame("run_over", worker_alive=False), config=COLD)
    _, effects = step(state, exit_answer({"status": "failed"}), config=COLD)
    assert effects == (CloseLaunch(), Kill("not reusable"), ToScheduler(RunnerFinished(SLOT, "r1", None, "failed")))


def test_leftover_command_processes_the_exit_names_are_reaped_first() -> None:
    state, _ = step(serving(), frame("run_over"))
    children = [{"pid": 777, "create_time": 3.0}]
    _, effects = step(state, exit_answer({"status": "parked", "children": children}))
    assert effects[0] == ReapChildren("r1", tuple(children)) and effects[1] == CloseLaunch()


def test_an_exit_the_writer_refused_still_frees_the_slot() -> None:
    state, _ = step(serving(), frame("run_over"))
    _, effects = step(state, exit_answer(ok=False))
    assert effects == (CloseLaunch(), ToScheduler(RunnerFinished(SLOT, "r1", OLD, None)))


def test_answers_to_other_commands_are_ignored() -> None:
    state = serving()
    assert step(state, WriteResult(True, {}, correlation_id="other")) == (state, ())
    assert step(SupervisorState(worker=OLD), exit_answer({})) == (SupervisorState(worker=OLD), ())


# --- stopping a launch from outside ------------------------------------------------------------------------


def test_a_stop_kills_the_worker_and_reports_the_exit_once() -> None:
    state = serving()
    assert step(state, StopRunner("cancelled", "another-run")) == (state, ())
    state, effects = step(state, StopRunner("cancelled", "r1"))
    assert effects == (Log(logging.INFO, f"run r1: stopping worker {OLD.pid} (cancelled)"),
                       Kill("cancelled", Ending("cancelled")))
    assert state.worker is None and state.serving is not None and state.serving.stop_reason == "cancelled"
    state, effects = step(state, Killed(-15, Ending("cancelled")))
    assert effects == (ReportExit("cancelled", -15),)
    assert step(state, StopRunner("claimLost", "r1")) == (state, ())
    assert step(state, HoldRun("r1")) == (state, ())


def test_a_hold_is_sent_to_the_worker_of_that_run_only() -> None:
    state = serving()
    assert step(state, HoldRun("r1"))[1] == (SendHold(),)
    assert step(state, HoldRun("r2"))[1] == ()


def test_a_claim_the_writer_found_lost_stops_that_launch_only() -> None:
    state = serving()
    assert step(state, LaunchClaimLost("l-other")) == (state, ())
    state, effects = step(state, LaunchClaimLost("l-r1"))
    assert effects[-1] == Kill("claimLost", Ending("claimLost"))


def test_a_broken_protocol_is_a_crash_with_its_detail() -> None:
    state, effects = step(serving(), LinkBroken("l-r1", "bad content frame: too large"))
    assert effects == (Log(logging.WARNING, f"run r1: worker {OLD.pid} broke the protocol: bad content frame: too large"),
                       Kill("crashed", Ending("crashed", "bad content frame: too large")))
    _, effects = step(state, Killed(-9, Ending("crashed", "bad content frame: too large")))
    assert effects[-1] == ReportExit("crashed", -9, "bad content frame: too large")
    assert step(serving(), LinkBroken("l-other", "x"))[1] == ()


# --- the watchdog ------------------------------------------------------------------------------------------


def test_the_watchdog_waits_until_a_deadline_passes() -> None:
    state = serving()
    watch = ("build", "a-1", 10.0, T0 + 15.0)
    assert step(state, WatchdogCheck(watch, T0 + 30.0), now=T0 + 14.9) == (state, ())
    assert step(state, WatchdogCheck(None, None), now=T0 + 1_000) == (state, ())


def test_a_node_past_its_timeout_and_grace_is_stopped_timed_out() -> None:
    watch = ("build", "a-1", 10.0, T0 + 15.0)
    state, effects = step(serving(), WatchdogCheck(watch, None), now=T0 + 15.0)
    ending = Ending("timedOut", "node build exceeded its timeout of 10 s",
                    {"node_id": "build", "attempt_id": "a-1", "after_s": 10.0})
    assert effects == (Log(logging.WARNING, f"run r1: node build ran past its timeout of 10 s (+5 s grace); "
                                            f"stopping worker {OLD.pid}"), Kill("timedOut", ending))
    _, effects = step(state, Killed(-15, ending))
    assert effects[-1] == ReportExit("timedOut", -15, "node build exceeded its timeout of 10 s",
                                     {"node_id": "build", "attempt_id": "a-1", "after_s": 10.0})


def test_a_worker_that_never_became_ready_is_replaced() -> None:
    state, effects = step(serving(), WatchdogCheck(None, T0 + 30.0), now=T0 + 30.0)
    ending = Ending("startTimeout", "the worker did not become ready within 30 s")
    assert effects == (Log(logging.WARNING, f"run r1: worker {OLD.pid} did not become ready within 30 s; "
                                            "replacing it"), Kill("startTimeout", ending))
    state, effects = step(state, Killed(None, ending))
    state, effects = step(state, exit_answer({"status": "queued"}))
    assert effects == (CloseLaunch(), Spawn(Finish("r1", "queued")))  # killed: a new warm worker


def test_the_watchdog_stands_down_once_the_exit_is_reported() -> None:
    state, _ = step(serving(), frame("run_over"))
    assert step(state, WatchdogCheck(("n", "a", 1.0, T0), T0), now=T0 + 99) == (state, ())


# --- a worker that goes away -----------------------------------------------------------------------------


def test_an_idle_warm_workers_death_is_replaced_and_told() -> None:
    state = SupervisorState(worker=OLD)
    assert step(state, WorkerGone(NEW.pid, "socket closed")) == (state, ())  # not this slot's worker
    state, effects = step(state, WorkerGone(OLD.pid, "socket closed"))
    assert effects == (Kill("crashed", Died(OLD.pid, "socket closed")),) and state.worker is None
    state, effects = step(state, Killed(-9, Died(OLD.pid, "socket closed")))
    assert effects == (Log(logging.WARNING, f"slot {SLOT}: idle worker {OLD.pid} went away (socket closed; "
                                            "killed by SIGKILL)"), Spawn(Ready()))


def test_an_idle_cold_workers_death_leaves_the_slot_without_one() -> None:
    state, _ = step(SupervisorState(worker=OLD), WorkerGone(OLD.pid, "eof"), config=COLD)
    _, effects = step(state, Killed(0, Died(OLD.pid, "eof")), config=COLD)
    assert effects[-1] == ToScheduler(SlotReady(SLOT, None))


@pytest.mark.parametrize(("code", "outcome"), [(-9, "crashed"), (1, "crashed"), (3, "claimLost"), (None, "crashed")])
def test_a_worker_that_dies_during_its_launch_ends_it(code: int | None, outcome: str) -> None:
    state, effects = step(serving(), WorkerGone(OLD.pid, "socket closed"))
    assert effects == (Kill("crashed", Died(OLD.pid, "socket closed")),)
    state, effects = step(state, Killed(code, Died(OLD.pid, "socket closed")))
    diagnostic = f"socket closed; {describe_exit(code)}"
    assert effects == (Log(logging.WARNING, f"run r1: worker {outcome} ({diagnostic})"),
                       ReportExit(outcome, code, diagnostic))


def test_a_worker_dying_between_its_exit_and_the_answer_is_only_logged() -> None:
    state, _ = step(serving(), frame("run_over"))
    state, _ = step(state, WorkerGone(OLD.pid, "eof"))
    state, effects = step(state, Killed(0, Died(OLD.pid, "eof")))
    assert effects == (Log(logging.WARNING, f"slot {SLOT}: idle worker {OLD.pid} went away (eof; exit code 0)"),)
    # The answer then finds no worker to keep: a new one, warm.
    _, effects = step(state, exit_answer({"status": "done"}))
    assert effects == (CloseLaunch(), Spawn(Finish("r1", "done")))


# --- the host stopping ------------------------------------------------------------------------------------


def test_stopping_mid_launch_kills_reports_and_frees_the_slot() -> None:
    state, effects = step(serving(), Stopping())
    assert effects == (Kill("host_stopping"), ReportExitBlocking(), CloseLaunch(),
                       ToScheduler(RunnerFinished(SLOT, "r1", None, None)))
    assert state.stopped and state.worker is None and state.serving is None
    assert step(state, Stopping()) == (state, ())  # safe twice


def test_stopping_an_idle_slot_lets_its_worker_go() -> None:
    state, effects = step(SupervisorState(worker=OLD), Stopping())
    assert effects == (ShutdownWorker(),) and state.worker is None
    assert step(SupervisorState(), Stopping())[1] == ()


def test_an_event_it_does_not_know_is_a_programming_error() -> None:
    with pytest.raises(TypeError):
        step(SupervisorState(), launch())
