"""`Scheduler`'s step function `decide(state, event, now)` (actors/scheduling.py), called with a chosen `now`.

No threads, no writer, no database, no worker: each test feeds events to the pure function, answers
the effects that ask (a read, the standing claim taken back) with the event the loop would send, and
checks the new state and the effects. The actor around it is tested in test_scheduler.py and by every
host test.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.runner_supervisor import (
    HoldRun,
    Launch,
    RunnerFinished,
    SlotReady,
    StopRunner,
    WatchdogTick,
    WorkerInfo,
)
from piwf_actors.actors.scheduling import decide
from piwf_actors.actors.scheduling_records import (
    AskStanding,
    ClaimReconcile,
    ClaimRuns,
    ControlsSeen,
    Effect,
    Hand,
    Log,
    LookForWork,
    NotHanded,
    OfferWithdrawn,
    Publish,
    ReadControls,
    ReadRunStatuses,
    ReconcileClaimed,
    RunsClaimed,
    SchedulerState,
    SchedulingConfig,
    StandingSeen,
    Started,
    StartSupervisor,
    StatusesSeen,
    Stopping,
    Submit,
    SupervisorFailed,
    Tell,
    Ticked,
    WithdrawOffer,
    WorkSeen,
    Written,
    active_ids,
    initial_state,
    scheduler_view,
)
from piwf_actors.canonical import token_hash
from piwf_actors.store.requests import ChangeNotice, WriteResult

CONFIG = SchedulingConfig(claim_lease_s=30.0, reconcile_lease_s=120.0, host_duties=True)
T0 = 10_000.0
WORKERS = (WorkerInfo(101, 1.5), WorkerInfo(102, 2.5), WorkerInfo(103, 3.5), WorkerInfo(104, 4.5))


def step(state: SchedulerState, event: Any, now: float = T0,
         config: SchedulingConfig = CONFIG) -> tuple[SchedulerState, tuple[Effect, ...]]:
    return decide(state, event, now, config=config)


def warm(slots: int = 2) -> SchedulerState:
    """A started scheduler whose slots each reported a warm worker (and that claimed nothing yet)."""
    state = initial_state(slots)
    for index in range(slots):
        state, _ = step(state, SlotReady(index, WORKERS[index]))
    return state


def claimed_run(run_id: str, launch_id: str, **extra: Any) -> dict[str, Any]:
    """A run as `scheduler.claim_next` answers it."""
    return {"run_id": run_id, "generation": 1, "launch_id": launch_id, "revision": 2, "workflow": "wf",
            "workflow_path": "/p/wf.py", "workflow_attr": "wf", "definition_digest": "d", "project_path": "/p",
            "source": b"src", "source_size": 3, "source_sha256": "s", "state": None, **extra}


def serve(state: SchedulerState, *run_ids: str) -> SchedulerState:
    """`state` with each run of `run_ids` claimed and handed to the next idle slot."""
    idle = [slot.index for slot in state.slots if slot.launch is None]
    offered = tuple((slot, f"token-{run_id}", f"launch-{run_id}") for slot, run_id in zip(idle, run_ids, strict=False))
    state = replace(state, claiming=True)
    claimed = [claimed_run(run_id, f"launch-{run_id}") for run_id in run_ids]
    state, _ = step(state, RunsClaimed(WriteResult(True, claimed), offered))
    return state


def of(effects: tuple[Effect, ...], kind: type) -> list[Any]:
    return [effect for effect in effects if isinstance(effect, kind)]


# --- claiming for idle slots ----------------------------------------------------------------------------


def test_a_started_scheduler_publishes_and_looks_for_work_for_every_idle_slot() -> None:
    state, effects = step(initial_state(3), Started())
    assert effects == (Publish(), LookForWork((0, 1, 2), (), reconciles=True))
    assert not state.claiming  # nothing is sent before the answer says something waits


def test_waiting_runs_are_claimed_for_every_idle_slot_with_its_worker_in_one_command() -> None:
    state, effects = step(warm(3), WorkSeen((0, 1, 2), runs_waiting=True, reconciles_waiting=False))
    (claim,) = effects
    assert isinstance(claim, ClaimRuns) and not claim.standing and claim.claim_lease_s == 30.0
    assert [(slot.index, slot.worker) for slot in claim.slots] == [(0, WORKERS[0]), (1, WORKERS[1]), (2, WORKERS[2])]
    assert state.claiming
    # One claim in flight at a time: a notice of a new run while it is out looks for nothing.
    assert step(state, ChangeNotice(1, ("run",), ("r9",), T0)) == (state, ())


def test_only_the_idle_slots_whose_supervisor_is_alive_are_claimed_for() -> None:
    state = serve(warm(3), "r1")
    assert step(state, Started())[1][1] == LookForWork((1, 2), ("r1",), reconciles=True)
    _, effects = step(state, WorkSeen((2,), runs_waiting=True, reconciles_waiting=False))  # slot 1's died
    (claim,) = of(effects, ClaimRuns)
    assert [slot.index for slot in claim.slots] == [2] and claim.exclude == ("r1",)


def test_runs_and_reconciles_take_turns_and_runs_leave_room_for_a_reconcile() -> None:
    state = warm(4)
    seen = WorkSeen((0, 1, 2, 3), runs_waiting=True, reconciles_waiting=True)
    # No launch yet: runs first, but on half the idle slots while reconciles wait.
    _, effects = step(state, seen)
    assert [slot.index for slot in of(effects, ClaimRuns)[0].slots] == [0, 1]
    state = serve(state, "r1")
    assert state.prefer_reconcile
    state, effects = step(state, WorkSeen((1, 2, 3), runs_waiting=True, reconciles_waiting=True))
    assert effects == (ClaimReconcile(1, ("r1",), 120.0),) and state.claiming
    reconcile = {"reconcile_id": "rc-1", "claim_generation": 4, "launch_id": "rc-1", "token_hash": "h" * 64,
                 "manager": "builds", "key": "repo-a", "uid": "u", "project_path": "/p",
                 "manager_path": "/p/m.py", "resource": {"n": 1}}
    state, effects = step(state, ReconcileClaimed(WriteResult(True, reconcile), 1))
    hand = of(effects, Hand)[0]
    assert (hand.slot, hand.launch.kind, hand.launch.worker_pid, hand.launch.fence) == (
        1, "reconcile", 102, {"manager": "builds", "key": "repo-a"})
    assert not state.prefer_reconcile and effects[-1] == LookForWork((2, 3), ("r1", "rc-1"), reconciles=True)


def test_a_runner_host_looks_for_runs_only() -> None:
    config = SchedulingConfig(claim_lease_s=5.0, reconcile_lease_s=120.0, host_duties=False)
    _, effects = step(initial_state(1), Started(), config=config)
    assert effects[-1] == LookForWork((0,), (), reconciles=False)


def test_with_nothing_waiting_the_claim_stands_with_the_writer_where_allowed() -> None:
    state, effects = step(warm(2), WorkSeen((0, 1), runs_waiting=False, reconciles_waiting=False))
    assert effects == (AskStanding((0, 1)),) and not state.claiming
    assert step(state, StandingSeen((0, 1), allowed=False)) == (state, ())
    state, effects = step(state, StandingSeen((0, 1), allowed=True))
    (claim,) = effects
    assert isinstance(claim, ClaimRuns) and claim.standing and [s.index for s in claim.slots] == [0, 1]
    assert state.standing and state.claiming


def test_a_standing_claim_is_taken_back_before_anything_else_is_claimed() -> None:
    state, _ = step(warm(2), StandingSeen((0, 1), allowed=True))
    # A run ended elsewhere (a notice): first the standing claim comes back.
    assert step(state, ChangeNotice(2, ("run",), ("r1",), T0)) == (state, (WithdrawOffer(),))
    # The writer had taken it already: its answer is on the way; nothing else is claimed.
    assert step(state, OfferWithdrawn(False)) == (state, ())
    # Taken back: claiming goes on at once.
    state, effects = step(state, OfferWithdrawn(True))
    assert not state.standing and not state.claiming and effects == (LookForWork((0, 1), (), reconciles=True),)


def test_a_standing_claim_the_writer_answered_launches_like_any_claim() -> None:
    state, _ = step(warm(2), StandingSeen((0, 1), allowed=True))
    state, effects = step(state, RunsClaimed(WriteResult(True, [claimed_run("r1", "l-0")]),
                                             ((0, "t0", "l-0"), (1, "t1", "l-1"))))
    assert not state.standing and not state.claiming
    assert [hand.slot for hand in of(effects, Hand)] == [0]
    assert effects[-1] == LookForWork((1,), ("r1",), reconciles=True)


# --- dispatch -----------------------------------------------------------------------------------------------


def test_each_claimed_run_is_handed_to_the_slot_it_was_claimed_for() -> None:
    state = replace(warm(3), claiming=True)
    offered = ((0, "t0", "l-0"), (1, "t1", "l-1"), (2, "t2", "l-2"))
    answer = [claimed_run("r2", "l-2"), claimed_run("r0", "l-0", worker_pid=101)]  # none for slot 1
    state, effects = step(state, RunsClaimed(WriteResult(True, answer), offered))
    hands = of(effects, Hand)
    assert [(hand.slot, hand.launch.run_id) for hand in hands] == [(0, "r0"), (2, "r2")]
    launch = hands[0].launch
    assert (launch.generation, launch.launch_id, launch.token_hash, launch.revision, launch.worker_pid) == (
        1, "l-0", token_hash("t0"), 2, 101)
    assert launch.envelope["source"] == b"src" and launch.kind == "run"
    assert active_ids(state) == ("r0", "r2") and state.launched == 2 and not state.claiming
    assert effects[-1] == LookForWork((1,), ("r0", "r2"), reconciles=True)  # the slot left idle


def test_a_large_source_is_handed_as_a_content_reference() -> None:
    state = replace(warm(1), claiming=True)
    run = claimed_run("r1", "l-0", source=None, source_size=5_000_000, source_sha256="abc")
    _, effects = step(state, RunsClaimed(WriteResult(True, [run]), ((0, "t0", "l-0"),)))
    envelope = of(effects, Hand)[0].launch.envelope
    assert envelope["source"] is None and envelope["source_ref"] == {"digest": "abc", "bytes": 5_000_000}


def test_a_failed_claim_is_logged_and_nothing_is_claimed_until_the_next_notice() -> None:
    state = replace(warm(1), claiming=True)
    state, effects = step(state, RunsClaimed(WriteResult(False, None, "busy", "database is locked"), ((0, "t", "l"),)))
    assert effects == (Log(logging.WARNING, "claiming runs failed: database is locked"),)
    assert not state.claiming and active_ids(state) == ()


def test_a_launch_its_supervisor_could_not_take_is_settled_and_the_slot_stays_idle() -> None:
    state = serve(warm(2), "r1")
    launch = state.slots[0].launch
    assert launch is not None and state.launched == 1
    state, effects = step(state, NotHanded(0, launch))
    assert state.slots[0].launch is None and state.launched == 0 and active_ids(state) == ()
    (settle,) = of(effects, Submit)
    assert settle.name == "runner.exit" and settle.reply == "unlaunched"
    assert (settle.args["outcome"], settle.args["requeue"], settle.args["run_id"]) == ("launchFailed", False, "r1")


def test_a_claim_answered_while_stopping_is_handed_back_to_the_queue() -> None:
    state = replace(warm(1), claiming=True)
    state, _ = step(state, Stopping())
    state, effects = step(state, RunsClaimed(WriteResult(True, [claimed_run("r1", "l-0")]), ((0, "t0", "l-0"),)))
    assert of(effects, Hand) == [] and active_ids(state) == ()
    (settle,) = effects
    assert isinstance(settle, Submit) and settle.args["requeue"] is True and settle.args["outcome"] == "launchFailed"


def test_a_finished_runner_frees_its_slot_with_the_worker_for_the_next_launch() -> None:
    state = serve(warm(2), "r1", "r2")
    state, effects = step(state, RunnerFinished(0, "r1", WorkerInfo(201, 9.0), "done"))
    assert state.slots[0].launch is None and state.slots[0].worker == WorkerInfo(201, 9.0)
    assert effects == (Publish(), LookForWork((0,), ("r2",), reconciles=True))
    # A finish for a run the scheduler no longer serves frees the slot it names.
    state, _ = step(state, RunnerFinished(1, "gone", None, None))
    assert state.slots[1].launch is None and state.slots[1].worker is None


# --- runners to stop or hold --------------------------------------------------------------------------------


def test_a_cancel_stops_the_runner_once_and_a_pause_holds_it_once() -> None:
    state = serve(warm(2), "r1", "r2")
    state, effects = step(state, ChangeNotice(3, ("run_control",), ("r1", "r2", "elsewhere"), T0))
    assert effects == (ReadControls(("r1", "r2")),)
    seen = ControlsSeen((("r1", True, False), ("r2", False, True)))
    state, effects = step(state, seen)
    assert effects == (Tell(0, StopRunner("cancelled", "r1")), Tell(1, HoldRun("r2")))
    assert state.slots[0].stopping and state.slots[1].held
    assert step(state, seen) == (state, ())  # told once each


def test_a_notice_for_runs_this_scheduler_does_not_serve_reads_nothing() -> None:
    state = serve(warm(1), "r1")
    assert step(state, ChangeNotice(3, ("run_control",), ("other",), T0)) == (state, ())


# --- the tick: watchdog, dead supervisors, beats ------------------------------------------------------------


def test_a_tick_drives_the_watchdogs_renews_on_its_beat_and_looks_at_controls() -> None:
    state = serve(warm(2), "r1")
    state, effects = step(state, Ticked(), now=T0)
    assert effects[0] == Tell(0, WatchdogTick())
    renew, settle = of(effects, Submit)
    assert renew == Submit("scheduler.renew_claims", {"claims": [
        {"run_id": "r1", "generation": 1, "token_hash": token_hash("token-r1")}], "claim_lease_s": 30.0}, "renewed")
    assert settle == Submit("scheduler.settle_abandoned", {"active": ["r1"]}, "settled")
    assert ReadControls(("r1",)) in effects and effects[-1] == LookForWork((1,), ("r1",), reconciles=True)
    # Within the beat (claim_lease_s / 3) nothing is renewed again.
    _, effects = step(state, Ticked(), now=T0 + 9.9)
    assert of(effects, Submit) == []
    _, effects = step(state, Ticked(), now=T0 + 10.0)
    assert [submit.name for submit in of(effects, Submit)] == ["scheduler.renew_claims", "scheduler.settle_abandoned"]


def test_with_no_launch_the_tick_still_runs_the_safety_net() -> None:
    _, effects = step(warm(1), Ticked(), now=T0)
    assert of(effects, Submit) == [Submit("scheduler.settle_abandoned", {"active": []}, "settled")]


def test_reconcile_claims_are_renewed_on_their_own_slower_beat() -> None:
    state = replace(warm(2), claiming=True)
    reconcile = {"reconcile_id": "rc-1", "claim_generation": 4, "launch_id": "rc-1", "token_hash": "h" * 64,
                 "manager": "builds", "key": "repo-a", "uid": "u", "project_path": "/p",
                 "manager_path": "/p/m.py", "resource": {}}
    state, _ = step(state, ReconcileClaimed(WriteResult(True, reconcile), 0))
    state, effects = step(state, Ticked(), now=T0)
    assert Submit("reconcile.renew", {"claims": [{"manager": "builds", "key": "repo-a", "claim_generation": 4,
                                                  "token_hash": "h" * 64}], "claim_lease_s": 120.0},
                  "reconciles_renewed") in effects
    assert "scheduler.renew_claims" not in [submit.name for submit in of(effects, Submit)]  # no run claims
    _, effects = step(state, Ticked(), now=T0 + 29.9)
    assert "reconcile.renew" not in [submit.name for submit in of(effects, Submit)]  # beat: 120 / 4 s


def test_a_dead_supervisors_slot_gets_a_new_one_and_its_launch_is_dropped() -> None:
    state = serve(warm(2), "r1")
    state, effects = step(state, Ticked(dead=frozenset({0})), now=T0)
    assert effects[:4] == (Tell(0, WatchdogTick()), Log(logging.WARNING, "slot 0: starting a new runner supervisor"),
                           StartSupervisor(0), Publish())
    assert state.slots[0].launch is None and state.slots[0].worker is None
    # Its run is no longer renewed nor excluded from the safety net: that settles its claim once it expires.
    assert of(effects, Submit) == [Submit("scheduler.settle_abandoned", {"active": []}, "settled")]
    state, effects = step(state, SupervisorFailed("runner-1", "RuntimeError: boom", frozenset({1})))
    assert effects == (Log(logging.ERROR, "runner-1 failed: RuntimeError: boom"),
                       Log(logging.WARNING, "slot 1: starting a new runner supervisor"), StartSupervisor(1), Publish())


def test_a_lost_run_claim_stops_its_runner_only_while_the_run_is_still_its_runners() -> None:
    state = serve(warm(3), "r1", "r2", "r3")
    state, effects = step(state, Written("renewed", WriteResult(True, {"r1": False, "r2": False, "r3": True})))
    assert effects == (ReadRunStatuses(("r1", "r2")),)
    state, effects = step(state, StatusesSeen((("r1", "running"), ("r2", "parked"))))
    assert effects == (Log(logging.WARNING, "run r1: claim lost"), Tell(0, StopRunner("claimLost", "r1")))
    assert state.slots[0].stopping and not state.slots[1].stopping
    # A stopping runner is not stopped twice.
    assert step(state, Written("renewed", WriteResult(True, {"r1": False})))[1] == ()


def test_a_lost_reconcile_claim_stops_its_runner_at_once() -> None:
    state = replace(warm(1), claiming=True)
    reconcile = {"reconcile_id": "rc-1", "claim_generation": 1, "launch_id": "rc-1", "token_hash": "h",
                 "manager": "m", "key": "k", "uid": "u", "project_path": "/p", "manager_path": "/p/m.py",
                 "resource": {}}
    state, _ = step(state, ReconcileClaimed(WriteResult(True, reconcile), 0))
    state, effects = step(state, Written("reconciles_renewed", WriteResult(True, {"rc-1": False})))
    assert effects == (Log(logging.WARNING, "rc-1: claim lost"), Tell(0, StopRunner("claimLost", "rc-1")))


# --- the lease pausing, coming back; stopping ------------------------------------------------------------


def test_a_suspended_lease_claims_and_writes_nothing_until_it_is_held_again() -> None:
    state, _ = step(warm(1), StandingSeen((0,), allowed=True))
    state, effects = step(state, LeaseSuspended(3, "disk full"))
    assert effects == (WithdrawOffer(), Publish()) and state.suspended
    state, _ = step(state, OfferWithdrawn(True))
    state, effects = step(state, Ticked(), now=T0)
    assert effects == ()  # no renewal, no safety net, no claim
    assert step(state, WorkSeen((0,), True, False)) == (state, ())
    state, effects = step(state, LeaseRegained(3, 4))
    assert not state.suspended and effects == (Publish(), LookForWork((0,), (), reconciles=True))
    # The claims moved to the new epoch: the next tick renews at once.
    _, effects = step(state, Ticked(), now=T0 + 1)
    assert "scheduler.settle_abandoned" in [submit.name for submit in of(effects, Submit)]


def test_stopping_takes_a_standing_claim_back_and_claims_nothing_more() -> None:
    state, _ = step(warm(1), StandingSeen((0,), allowed=True))
    state, effects = step(state, Stopping())
    assert effects == (WithdrawOffer(),) and state.stopping
    state, effects = step(state, OfferWithdrawn(True))
    assert effects == () and not state.claiming
    assert step(state, Stopping())[1] == ()  # safe twice


@pytest.mark.parametrize(("reply", "result", "logged"), [
    ("settled", WriteResult(True, ["r1"]), "settled run(s) whose runner left without a recorded exit: ['r1']"),
    ("unlaunched", WriteResult(False, None, "x", "boom"), "settling a claim that could not be launched failed: boom"),
    ("renewed", WriteResult(False, None, "x", "boom"), "claim renewal failed: boom"),
])
def test_answers_that_only_inform_are_logged(reply: str, result: WriteResult, logged: str) -> None:
    assert step(warm(1), Written(reply, result))[1] == (Log(logging.WARNING, logged),)


def test_the_view_lists_active_launches_in_the_order_they_were_handed() -> None:
    state = serve(warm(3), "r1")
    state = serve(state, "r2")
    state, _ = step(state, RunnerFinished(0, "r1", WORKERS[0], "done"))
    state = serve(state, "r3")  # into slot 0, after r2
    view = scheduler_view(state, host_duties=True)
    assert [(item["run_id"], item["pid"]) for item in view["active"]] == [("r2", 102), ("r3", 101)]
    assert view["idle_workers"] == [103] and view["launched"] == 3 and view["max_workers"] == 3


def test_an_event_it_does_not_know_is_a_programming_error() -> None:
    with pytest.raises(TypeError):
        step(warm(1), Launch("r", 1, "l", "h", 0, {}))
