"""The scheduler's decisions: `decide(state, event, now) -> (state, effects)`, a pure step function
(its state, events and effects are in scheduling_records.py).

`Scheduler` (scheduler.py) is the loop around it: it turns its messages into
events, carries out the effects in order and keeps what a decision cannot
hold (the supervisors' refs, the reader, the writer's replies, the standing
claim). The function never reads the database, never touches a ref and never
draws a token. What it must know it asks for with an effect that answers
(`LookForWork`, `AskStanding`, `ReadControls`, `ReadRunStatuses`,
`WithdrawOffer`, a `Hand` that was refused); the loop decides on the answer
at once, before the next effect of the same step, so a step runs in the
order the straight-line code did. Which supervisors have died is a fact the
loop gathers before deciding (`Ticked.dead`, `SupervisorFailed.dead`).

Limits and priorities are not decided here: the claim command applies them
in its transaction (store/commands/scheduler.py), so they hold across hosts.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from piwf_actors.actors.launches import reconcile_launch, run_launch, unlaunched_exit
from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.scheduling_records import (
    AskStanding,
    ClaimReconcile,
    ClaimRuns,
    ControlsSeen,
    Effect,
    Event,
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
    SlotState,
    StandingSeen,
    Started,
    StartSupervisor,
    StatusesSeen,
    Step,
    Stopping,
    Submit,
    SupervisorFailed,
    Tell,
    Ticked,
    WithdrawOffer,
    WorkSeen,
    Written,
    active,
    active_ids,
    serving,
)
from piwf_actors.actors.supervision_records import HoldRun, RunnerFinished, SlotReady, StopRunner, WatchdogTick
from piwf_actors.actors.worker_link import Launch
from piwf_actors.resources.fairness import after_launch, next_claim
from piwf_actors.store.requests import ChangeNotice, WriteResult

#: A run whose claim renewal was refused while in one of these is still its runner's: stop the runner.
SERVING_STATUSES = ("starting", "running")


# --- the step function ---------------------------------------------------------------------------


def decide(state: SchedulerState, event: Event, now: float, *, config: SchedulingConfig) -> Step:
    """What the scheduler does on `event` at `now`: (new state, effects in order).

    - Claiming (`Started`, `ChangeNotice` of a run, `SlotReady`, `RunnerFinished`, `LeaseRegained`, a
      claim answered, a tick): take a standing claim back first (`WithdrawOffer`); then, unless
      stopping, suspended or a claim is in flight, look for work for the idle slots; `WorkSeen`
      claims runs or one reconcile (`resources.fairness`), or with nothing waiting `AskStanding`,
      whose `StandingSeen` leaves the claim with the writer where allowed.
    - `RunsClaimed` / `ReconcileClaimed`: each launch is handed to the slot it was claimed for
      (`Hand`), or settled `launchFailed` when stopping (or on `NotHanded`); then claim again.
    - `ChangeNotice` of `run_control`, and each tick for every active run: `ReadControls`, whose
      `ControlsSeen` stops a cancelled run's runner and holds a pausing one (once each).
    - `Ticked`: the watchdog tick to every active slot, new supervisors for dead ones, then (unless
      suspended) the renewal beats and the safety net, and a claim.
    - A renewal answered: a reconcile whose claim is lost is stopped; a run's is stopped only if
      the run is still `starting`/`running` (`ReadRunStatuses`; otherwise it ended or parked and
      released its claim).
    - `RunnerFinished` / `SlotReady`: the slot's worker as reported, idle again on a finish.
    - `LeaseSuspended` / `LeaseRegained`, `Stopping`: claiming pauses, resumes (with a renewal on the
      next tick), ends.
    """
    match event:
        case Ticked(dead):
            return _tick(state, dead, now, config)
        case ChangeNotice():
            return _changed(state, event, config)
        case RunsClaimed(result, offered):
            return _runs_claimed(state, result, offered, config)
        case ReconcileClaimed(result, slot):
            return _reconcile_claimed(state, result, slot, config)
        case Written(reply, result):
            return _written(state, reply, result)
        case WorkSeen():
            return _work_seen(state, event, config)
        case StandingSeen(idle, allowed):
            if not allowed or not _may_claim(state):
                return state, ()
            return _claim_runs(state, _still_idle(state, idle), config, standing=True)
        case ControlsSeen(requests):
            return _stop_cancelled(state, requests)
        case StatusesSeen(statuses):
            return _claims_lost(state, statuses)
        case OfferWithdrawn(ok):
            if not ok:
                return state, ()  # the writer took it: its answer is on the way
            return _try_claim(replace(state, standing=False, claiming=False), config)
        case NotHanded(slot, launch):
            return _not_handed(state, slot, launch)
        case RunnerFinished():
            return _finished(state, event, config)
        case SlotReady(slot, worker):
            if slot >= len(state.slots):
                return state, ()
            state = state.with_slot(replace(state.slots[slot], worker=worker))
            return _then(state, (Publish(),), _try_claim(state, config))
        case SupervisorFailed(actor, reason, dead):
            state, replaced = _replace_dead(state, dead)
            return state, (Log(logging.ERROR, f"{actor} failed: {reason}"), *replaced)
        case LeaseSuspended():
            state = replace(state, suspended=True)
            return state, (*_withdraw(state), Publish())
        case LeaseRegained():
            state = replace(state, suspended=False, last_renewal=0.0)
            return _then(state, (Publish(),), _try_claim(state, config))
        case Started():
            return _then(state, (Publish(),), _try_claim(state, config))
        case Stopping():
            state = replace(state, stopping=True)
            return state, _withdraw(state)
    raise TypeError(f"the scheduler cannot decide on {event!r}")


def _then(state: SchedulerState, first: tuple[Effect, ...], step: Step) -> Step:
    """`first`, then the effects of `step` (which was decided from `state`)."""
    return step[0], first + step[1]


def _withdraw(state: SchedulerState) -> tuple[Effect, ...]:
    return (WithdrawOffer(),) if state.standing else ()


# --- claiming ------------------------------------------------------------------------------------


def _may_claim(state: SchedulerState) -> bool:
    return not (state.standing or state.stopping or state.claiming or state.suspended)


def _still_idle(state: SchedulerState, idle: tuple[int, ...]) -> list[SlotState]:
    return [state.slots[i] for i in idle if i < len(state.slots) and state.slots[i].launch is None]


def _try_claim(state: SchedulerState, config: SchedulingConfig) -> Step:
    """Claim for the idle slots: first take a standing claim back; then look for work (the answer
    decides), unless stopping, suspended or a claim is already in flight."""
    if state.standing:
        return state, (WithdrawOffer(),)
    if not _may_claim(state):
        return state, ()
    idle = tuple(slot.index for slot in state.slots if slot.launch is None)
    if not idle:
        return state, ()
    return state, (LookForWork(idle, active_ids(state), config.host_duties),)


def _work_seen(state: SchedulerState, seen: WorkSeen, config: SchedulingConfig) -> Step:
    idle = _still_idle(state, seen.idle)
    if not idle or not _may_claim(state):
        return state, ()
    plan = next_claim(len(idle), prefer_reconcile=state.prefer_reconcile, runs_waiting=seen.runs_waiting,
                      reconciles_waiting=seen.reconciles_waiting)
    if plan is None:
        return state, (AskStanding(tuple(slot.index for slot in idle)),)
    kind, count = plan
    if kind == "reconcile":
        return replace(state, claiming=True), (ClaimReconcile(idle[0].index, active_ids(state),
                                                              config.reconcile_lease_s),)
    return _claim_runs(state, idle[:count], config, standing=False)


def _claim_runs(state: SchedulerState, slots: list[SlotState], config: SchedulingConfig, *,
                standing: bool) -> Step:
    if not slots:
        return state, ()
    return (replace(state, claiming=True, standing=standing),
            (ClaimRuns(tuple(slots), active_ids(state), config.claim_lease_s, standing),))


def _runs_claimed(state: SchedulerState, result: WriteResult, offered: tuple[tuple[int, str, str], ...],
                  config: SchedulingConfig) -> Step:
    state = replace(state, claiming=False, standing=False)
    claimed = result.value if result.ok else []
    effects: tuple[Effect, ...] = () if result.ok else (Log(logging.WARNING, f"claiming runs failed: {result.error}"),)
    by_launch = {run["launch_id"]: run for run in claimed}
    for slot, token, launch_id in offered:
        run = by_launch.get(launch_id)
        if run is not None:
            state, launched = _launch_or_settle(state, slot, run_launch(run, token))
            effects += launched
    if claimed:
        state = replace(state, prefer_reconcile=after_launch("run"))
    return _then(state, effects, _try_claim(state, config)) if claimed and not state.stopping else (state, effects)


def _reconcile_claimed(state: SchedulerState, result: WriteResult, slot: int, config: SchedulingConfig) -> Step:
    state = replace(state, claiming=False)
    if not result.ok:
        return state, (Log(logging.WARNING, f"claiming a reconcile failed: {result.error}"),)
    if result.value is None:
        return state, ()  # taken meanwhile (or not due after all): the next notice or tick looks again
    worker = state.slots[slot].worker
    launch = reconcile_launch(result.value, worker.pid if worker else None)
    state = replace(state, prefer_reconcile=after_launch("reconcile"))
    state, effects = _launch_or_settle(state, slot, launch)
    return (state, effects) if state.stopping else _then(state, effects, _try_claim(state, config))


# --- dispatch ------------------------------------------------------------------------------------


def _launch_or_settle(state: SchedulerState, slot: int, launch: Launch) -> Step:
    """Hand a claimed launch to its slot's supervisor (counted as handed; `NotHanded` takes that back).
    While stopping, the claim is settled at once like a runner that exited at once (`launchFailed`):
    a launch that cannot start never holds a slot."""
    if state.stopping:
        return state, _settle_unlaunched(state, launch)
    launched = state.launched + 1
    state = replace(state.with_slot(replace(state.slots[slot].freed(), launch=launch, handed=launched)),
                    launched=launched)
    return state, (Hand(slot, launch), Publish())


def _not_handed(state: SchedulerState, slot: int, launch: Launch) -> Step:
    """The slot's supervisor was gone: the launch was never the slot's; settle its claim."""
    if slot < len(state.slots) and state.slots[slot].launch == launch:
        state = replace(state.with_slot(state.slots[slot].freed()), launched=state.launched - 1)
    return state, (*_settle_unlaunched(state, launch), Publish())


def _settle_unlaunched(state: SchedulerState, launch: Launch) -> tuple[Effect, ...]:
    name, args = unlaunched_exit(launch, stopping=state.stopping)
    return (Submit(name, args, "unlaunched"),)


def _finished(state: SchedulerState, message: RunnerFinished, config: SchedulingConfig) -> Step:
    slot = serving(state, message.run_id)
    if slot is None and message.slot < len(state.slots):
        slot = state.slots[message.slot]
    if slot is not None:
        state = state.with_slot(replace(slot.freed(), worker=message.worker))
    return _then(state, (Publish(),), _try_claim(state, config))


def _replace_dead(state: SchedulerState, dead: frozenset[int]) -> Step:
    """One-for-one: a slot whose supervisor died gets a new one (its launch was settled by the old one's
    `on_failure`, or is settled by `settle_abandoned` when even that failed)."""
    if state.stopping:
        return state, ()
    effects: tuple[Effect, ...] = ()
    for slot in state.slots:
        if slot.index in dead:
            state = state.with_slot(replace(slot, launch=None, stopping=False, worker=None))
            effects += (Log(logging.WARNING, f"slot {slot.index}: starting a new runner supervisor"),
                        StartSupervisor(slot.index))
    if effects:
        effects += (Publish(),)  # the board's `active` is what the housekeeper reads as idle or not
    return state, effects


# --- runners to stop or hold ---------------------------------------------------------------------


def _changed(state: SchedulerState, notice: ChangeNotice, config: SchedulingConfig) -> Step:
    effects: tuple[Effect, ...] = ()
    if "run_control" in notice.tables:  # a cancel or pause was requested (store/commands/runs.py)
        watched = tuple(run_id for run_id in notice.runs if serving(state, run_id) is not None)
        if watched:
            effects = (ReadControls(watched),)
    return _then(state, effects, _try_claim(state, config)) if "run" in notice.tables else (state, effects)


def _stop_cancelled(state: SchedulerState, requests: tuple[tuple[str, bool, bool], ...]) -> Step:
    """Stop the runners of cancelled runs now; tell those of runs with a pause pending to hold (the
    pause itself lands at the next node boundary, in the writer)."""
    effects: tuple[Effect, ...] = ()
    for run_id, cancel, pause in requests:
        slot = serving(state, run_id)
        if slot is None or slot.stopping:
            continue
        if cancel:
            state = state.with_slot(replace(slot, stopping=True))
            effects += (Tell(slot.index, StopRunner("cancelled", run_id)),)
        elif pause and not slot.held:
            state = state.with_slot(replace(slot, held=True))
            effects += (Tell(slot.index, HoldRun(run_id)),)
    return state, effects


def _claims_lost(state: SchedulerState, statuses: tuple[tuple[str, str | None], ...]) -> Step:
    effects: tuple[Effect, ...] = ()
    for run_id, status in statuses:
        slot = serving(state, run_id)
        if slot is None or slot.stopping:
            continue
        if status is not None and status not in SERVING_STATUSES:
            continue  # the run ended or parked and released its claim; its runner is finishing
        state = state.with_slot(replace(slot, stopping=True))
        effects += (Log(logging.WARNING, f"run {run_id}: claim lost"), Tell(slot.index, StopRunner("claimLost", run_id)))
    return state, effects


# --- the tick and its beats ----------------------------------------------------------------------


def _tick(state: SchedulerState, dead: frozenset[int], now: float, config: SchedulingConfig) -> Step:
    effects: tuple[Effect, ...] = tuple(Tell(slot.index, WatchdogTick()) for slot in active(state))
    state, replaced = _replace_dead(state, dead)
    effects += replaced
    if state.suspended:
        return state, effects  # nothing can be written until the lease is held again
    if now - state.last_renewal >= config.claim_lease_s / 3:
        state = replace(state, last_renewal=now)
        effects += _renew_claims(state, config)
        # Safety net for claims whose runner is gone without a recorded exit. It stays with the
        # renewals (same beat, same active set, on runner hosts too): the writer applies commands
        # in the order they were sent, so a claim still in flight is committed before it with a
        # fresh lease, and it settles expired claims only.
        effects += (Submit("scheduler.settle_abandoned", {"active": list(active_ids(state))}, "settled"),)
    if now - state.last_reconcile_renewal >= config.reconcile_lease_s / 4:
        state = replace(state, last_reconcile_renewal=now)
        effects += _renew_reconciles(state, config)
    if active(state):
        effects += (ReadControls(active_ids(state)),)
    return _then(state, effects, _try_claim(state, config))


def _renew_claims(state: SchedulerState, config: SchedulingConfig) -> tuple[Effect, ...]:
    claims = [{"run_id": s.launch.run_id, "generation": s.launch.generation, "token_hash": s.launch.token_hash}
              for s in active(state) if s.launch is not None and s.launch.kind == "run"]
    if not claims:
        return ()
    return (Submit("scheduler.renew_claims", {"claims": claims, "claim_lease_s": config.claim_lease_s}, "renewed"),)


def _renew_reconciles(state: SchedulerState, config: SchedulingConfig) -> tuple[Effect, ...]:
    claims = [{**s.launch.fence, "claim_generation": s.launch.generation, "token_hash": s.launch.token_hash}
              for s in active(state) if s.launch is not None and s.launch.kind == "reconcile"
              and s.launch.fence is not None]
    if not claims:
        return ()
    return (Submit("reconcile.renew", {"claims": claims, "claim_lease_s": config.reconcile_lease_s},
                   "reconciles_renewed"),)


def _written(state: SchedulerState, reply: str, result: WriteResult) -> Step:
    if reply == "renewed":
        if not result.ok:
            return state, (Log(logging.WARNING, f"claim renewal failed: {result.error}"),)
        lost = tuple(run_id for run_id, held in result.value.items() if not held
                     and (slot := serving(state, run_id)) is not None and not slot.stopping)
        return state, ((ReadRunStatuses(lost),) if lost else ())
    if reply == "reconciles_renewed":
        if not result.ok:
            return state, (Log(logging.WARNING, f"reconcile claim renewal failed: {result.error}"),)
        effects: tuple[Effect, ...] = ()
        for reconcile_id, held in result.value.items():
            slot = serving(state, reconcile_id)
            if held or slot is None or slot.stopping:
                continue
            state = state.with_slot(replace(slot, stopping=True))
            effects += (Log(logging.WARNING, f"{reconcile_id}: claim lost"),
                        Tell(slot.index, StopRunner("claimLost", reconcile_id)))
        return state, effects
    if reply == "settled":
        if result.ok and result.value:
            return state, (Log(logging.WARNING, f"settled run(s) whose runner left without a recorded exit: "
                                                f"{result.value}"),)
        return state, ()
    if reply == "unlaunched":
        if not result.ok:
            return state, (Log(logging.WARNING, f"settling a claim that could not be launched failed: "
                                                f"{result.error}"),)
        return state, ()
    raise TypeError(f"the scheduler sent no command answered as {reply!r}")
