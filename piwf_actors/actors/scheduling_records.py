"""The records of the scheduler's step function (scheduling.py): its state, the events it decides on
and the effects it asks its loop (`Scheduler`, scheduler.py) to carry out. Frozen dataclasses; the only
logic here is reading the state (`active`, `serving`, `scheduler_view`) and replacing a slot.

An effect that answers (a read, the standing claim taken back, a launch its supervisor could not take)
names the event its answer comes back as; the loop decides on that answer at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.supervision_records import RunnerFinished, SlotReady, WorkerInfo
from piwf_actors.actors.worker_link import Launch
from piwf_actors.store.requests import ChangeNotice, WriteResult

# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    claim_lease_s: float
    reconcile_lease_s: float
    host_duties: bool  # False on a runner host: runs only, no reconciles


@dataclass(frozen=True, slots=True)
class SlotState:
    """One worker slot as the scheduler sees it (its supervisor's ref is the loop's)."""

    index: int
    worker: WorkerInfo | None = None  # its worker, as last reported (recorded with a claim)
    launch: Launch | None = None  # the launch it serves, None when idle
    stopping: bool = False  # told to stop its launch (cancel, claim lost)
    held: bool = False  # told to hold its launch (a pause is pending)
    handed: int = 0  # the launch count when its launch was handed (the board lists launches in that order)

    def freed(self) -> SlotState:
        """The slot with no launch (its worker as it was)."""
        return replace(self, launch=None, stopping=False, held=False)


@dataclass(frozen=True, slots=True)
class SchedulerState:
    slots: tuple[SlotState, ...]
    claiming: bool = False  # one claim in flight at a time
    standing: bool = False  # that claim stands with the writer (standing_claim.py)
    suspended: bool = False  # the lease ran out while the disk was full: claim and write nothing
    stopping: bool = False
    last_renewal: float = 0.0
    last_reconcile_renewal: float = 0.0
    prefer_reconcile: bool = False  # which kind the next claim prefers (resources/fairness.py)
    launched: int = 0

    def with_slot(self, slot: SlotState) -> SchedulerState:
        """The state with `slot` in place of the slot of its index."""
        slots = list(self.slots)
        slots[slot.index] = slot
        return replace(self, slots=tuple(slots))


def initial_state(max_workers: int) -> SchedulerState:
    return SchedulerState(tuple(SlotState(index) for index in range(max_workers)))


def active(state: SchedulerState) -> list[SlotState]:
    """The slots serving a launch, in the order their launches were handed."""
    return sorted((slot for slot in state.slots if slot.launch is not None), key=lambda slot: slot.handed)


def active_ids(state: SchedulerState) -> tuple[str, ...]:
    """The run ids (a reconcile's: its launch id) of the launches being served."""
    return tuple(slot.launch.run_id for slot in active(state) if slot.launch is not None)


def serving(state: SchedulerState, run_id: str) -> SlotState | None:
    return next((slot for slot in state.slots if slot.launch is not None and slot.launch.run_id == run_id), None)


def scheduler_view(state: SchedulerState, *, host_duties: bool) -> dict[str, Any]:
    """The board's scheduler section and the answer to GetSchedulerStatus."""
    return {
        "max_workers": len(state.slots),
        "active": [{"run_id": s.launch.run_id, "pid": s.worker.pid if s.worker else None,
                    "generation": s.launch.generation, "kind": s.launch.kind}
                   for s in active(state) if s.launch is not None],
        "idle_workers": [s.worker.pid for s in state.slots if s.launch is None and s.worker is not None],
        "launched": state.launched,
        "suspended": state.suspended,
        "host_duties": host_duties,
    }


# --- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Started:
    """The slots' supervisors are started: publish, and claim for them."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """The scheduler stops: claim nothing more, take a standing claim back."""


@dataclass(frozen=True, slots=True)
class Ticked:
    """The scheduler's tick; `dead`: the slots whose supervisor has died."""

    dead: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class SupervisorFailed:
    """A supervisor told its failure (`ActorFailed`); `dead`: the slots whose supervisor has died."""

    actor: str
    reason: str
    dead: frozenset[int]


@dataclass(frozen=True, slots=True)
class RunsClaimed:
    """The answer to `ClaimRuns`: `offered` is (slot, token, launch id) of each slot it was sent for."""

    result: WriteResult
    offered: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True, slots=True)
class ReconcileClaimed:
    """The answer to `ClaimReconcile` for `slot`."""

    result: WriteResult
    slot: int


@dataclass(frozen=True, slots=True)
class Written:
    """The answer to a `Submit`, under the `reply` it was sent with."""

    reply: str
    result: WriteResult


@dataclass(frozen=True, slots=True)
class WorkSeen:
    """The answer to `LookForWork`: the idle slots whose supervisor is alive, and what waits."""

    idle: tuple[int, ...]
    runs_waiting: bool
    reconciles_waiting: bool


@dataclass(frozen=True, slots=True)
class StandingSeen:
    """The answer to `AskStanding`: whether a claim may stand with the writer now."""

    idle: tuple[int, ...]
    allowed: bool


@dataclass(frozen=True, slots=True)
class ControlsSeen:
    """The answer to `ReadControls`: (run id, cancel requested, pause requested) of those with either."""

    requests: tuple[tuple[str, bool, bool], ...]


@dataclass(frozen=True, slots=True)
class StatusesSeen:
    """The answer to `ReadRunStatuses`: each run's status (None: no such run)."""

    statuses: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class OfferWithdrawn:
    """The answer to `WithdrawOffer`; False: the writer took the standing claim, its answer is coming."""

    ok: bool


@dataclass(frozen=True, slots=True)
class NotHanded:
    """The answer to a `Hand` whose supervisor was gone."""

    slot: int
    launch: Launch


Event = (Started | Stopping | Ticked | SupervisorFailed | ChangeNotice | RunnerFinished | SlotReady
         | LeaseSuspended | LeaseRegained | RunsClaimed | ReconcileClaimed | Written | WorkSeen | StandingSeen
         | ControlsSeen | StatusesSeen | OfferWithdrawn | NotHanded)


# --- effects -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publish:
    """Write the board's scheduler section from the state after this step."""


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Tell:
    """Tell `slot`'s supervisor `message` (WatchdogTick, StopRunner, HoldRun)."""

    slot: int
    message: Any


@dataclass(frozen=True, slots=True)
class Hand:
    """Tell `slot`'s supervisor to run `launch`; answered `NotHanded` if it is gone."""

    slot: int
    launch: Launch


@dataclass(frozen=True, slots=True)
class StartSupervisor:
    """Start a new supervisor for `slot` (its old one died)."""

    slot: int


@dataclass(frozen=True, slots=True)
class Submit:
    """Send write command `name`; its answer comes back as `Written(reply, result)`."""

    name: str
    args: dict[str, Any]
    reply: str


@dataclass(frozen=True, slots=True)
class ClaimRuns:
    """`scheduler.claim_next` for `slots` (a token and launch id drawn for each), answered `RunsClaimed`;
    `standing`: left with the writer as the standing claim instead of sent."""

    slots: tuple[SlotState, ...]
    exclude: tuple[str, ...]
    claim_lease_s: float
    standing: bool = False


@dataclass(frozen=True, slots=True)
class ClaimReconcile:
    """`reconcile.claim` for `slot` (a token and launch id drawn), answered `ReconcileClaimed`."""

    slot: int
    exclude: tuple[str, ...]
    claim_lease_s: float


@dataclass(frozen=True, slots=True)
class LookForWork:
    """Which of `idle` have a live supervisor, and is anything waiting (runs not in `exclude`; reconciles
    due, if `reconciles`)? Answered `WorkSeen` (without a read when no slot is alive)."""

    idle: tuple[int, ...]
    exclude: tuple[str, ...]
    reconciles: bool


@dataclass(frozen=True, slots=True)
class AskStanding:
    """May a claim stand with the writer now (standing_claim.py)? Answered `StandingSeen`."""

    idle: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReadControls:
    """Read the cancels and pauses requested for `run_ids`; answered `ControlsSeen`."""

    run_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadRunStatuses:
    """Read the status of each of `run_ids`; answered `StatusesSeen`."""

    run_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WithdrawOffer:
    """Take the standing claim back; answered `OfferWithdrawn`."""


Effect = (Publish | Log | Tell | Hand | StartSupervisor | Submit | ClaimRuns | ClaimReconcile | LookForWork
          | AskStanding | ReadControls | ReadRunStatuses | WithdrawOffer)
Step = tuple[SchedulerState, tuple[Effect, ...]]
