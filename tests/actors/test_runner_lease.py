"""`RunnerLease`: its step function with a chosen `now`, and the actor on the shared renewal loop.

Two layers, as for the host lease (test_lease.py, test_lease_steps.py):
- `decide(state, event, now)` alone: renew due / not due, refusal and expiry
  lose the lease (there is no suspended state: a full disk loses it too),
  release on a clean stop;
- the actor with an in-memory writer double, a probe supervisor, a board and
  a hand-driven clock (its ticker interval is far longer than the test, so
  every RenewTick and every answer is told by the test).
Real runner hosts are tested in tests/integration/test_runner_hosts.py.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest
from lease_doubles import FakeClock, FakeWriter, Recorder

from piwf_actors.actors.lease import LeaseLostNotice
from piwf_actors.actors.lease_renewal import (
    Effect,
    Log,
    Notify,
    Publish,
    Release,
    Renewed,
    RenewTick,
    Started,
    Stopping,
    Submit,
)
from piwf_actors.actors.runner_lease import (
    GetRunnerLease,
    RunnerClaim,
    RunnerLease,
    RunnerLeaseState,
    decide,
    initial_state,
    runner_lease_view,
)
from piwf_actors.board import HostBoard, Section
from piwf_actors.errors import DiskFull, RunnerLeaseLost, StoreError
from piwf_actors.store.requests import WriteResult

T0 = 1_000.0

# --- the step function ------------------------------------------------------------------------

LEASE_S = 9.0
INTERVAL_S = LEASE_S / 3
CLAIM = RunnerClaim(runner_id="r1", epoch=2, token="runner-secret", pid=4242, lease_s=LEASE_S, max_workers=4,
                    expires_at=T0 + LEASE_S, heartbeat_at=T0)
RENEW = Submit("runner_lease.renew", {**CLAIM.identity_args(), "lease_s": LEASE_S}, "renew")


def step(state: RunnerLeaseState, event: Any, now: float) -> tuple[RunnerLeaseState, tuple[Effect, ...]]:
    return decide(state, event, now, interval_s=INTERVAL_S)


def lost_effects(why: str) -> tuple[Effect, ...]:
    reason = f"runner lease of r1 (epoch 2) lost: {why}"
    return Publish(), Log(logging.ERROR, reason), Notify(LeaseLostNotice(2, reason))


def refusal(detail: str) -> WriteResult:
    error = RunnerLeaseLost("r1", 2, detail)
    return WriteResult(False, None, error.code, str(error), "renew")


def test_start_hands_the_expiry_to_the_writer_and_publishes() -> None:
    state, effects = step(initial_state(CLAIM), Started(), T0)
    assert (state.expires_at, state.heartbeat_at) == (CLAIM.expires_at, CLAIM.heartbeat_at)
    assert effects == (Renewed(CLAIM.expires_at), Publish())


def test_a_tick_renews_once_per_interval_and_a_renewal_extends_the_lease() -> None:
    state, effects = step(initial_state(CLAIM), RenewTick(), T0 + 1)
    assert effects == (RENEW,) and state.renew_sent_at == T0 + 1
    assert "runner-secret" not in repr(effects)
    assert step(state, RenewTick(), T0 + 1 + INTERVAL_S - 0.001) == (state, ())
    assert step(state, RenewTick(), T0 + 1 + INTERVAL_S)[1] == (RENEW,)

    answer = WriteResult(True, {"expires_at": T0 + 2 + LEASE_S, "heartbeat_at": T0 + 2}, correlation_id="renew")
    state, effects = step(state, answer, T0 + 2)
    assert (state.expires_at, state.heartbeat_at, state.renew_sent_at, state.failures) == (
        T0 + 2 + LEASE_S, T0 + 2, None, 0)
    assert effects == (Renewed(T0 + 2 + LEASE_S), Publish())


def test_a_refusal_loses_the_lease_and_names_why() -> None:
    state, _ = step(initial_state(CLAIM), RenewTick(), T0 + 1)
    state, effects = step(state, refusal("the lease is at epoch 3 now"), T0 + 2)
    assert state.lost == "renewal refused: the lease is at epoch 3 now"
    assert effects == lost_effects("renewal refused: the lease is at epoch 3 now")
    assert step(state, RenewTick(), T0 + 50) == (state, ())  # never renewed again
    assert step(state, Stopping(), T0 + 51) == (state, ())  # nor released


def test_no_renewal_before_the_expiry_loses_the_lease() -> None:
    state, _ = step(initial_state(CLAIM), RenewTick(), T0 + 1)  # never answered
    state, effects = step(state, RenewTick(), CLAIM.expires_at)
    assert effects == lost_effects("no successful renewal before the lease expired")


def test_failures_count_until_one_is_answered_past_the_expiry_even_on_a_full_disk() -> None:
    error = DiskFull("x")  # a runner has no suspended state: it stops; the active host recovers its runs
    full = WriteResult(False, None, error.code, str(error), "renew")
    state, _ = step(initial_state(CLAIM), RenewTick(), T0 + 1)
    state, effects = step(state, full, T0 + 2)
    assert (state.failures, state.lost, state.renew_sent_at) == (1, None, None)
    assert effects == (Log(logging.WARNING, "runner lease renewal failed (1 in a row): database or disk is full: x"),)

    state, _ = step(state, RenewTick(), T0 + 3)
    locked = WriteResult(False, None, StoreError.code, "locked", "renew")
    state, effects = step(state, locked, CLAIM.expires_at)
    assert state.failures == 2
    assert effects == lost_effects("renewals kept failing: locked")  # no warning once it is lost


def test_a_renewal_after_a_failure_resets_the_count() -> None:
    state, _ = step(initial_state(CLAIM), RenewTick(), T0 + 1)
    state, _ = step(state, WriteResult(False, None, StoreError.code, "locked", "renew"), T0 + 2)
    assert state.failures == 1
    answer = WriteResult(True, {"expires_at": T0 + 3 + LEASE_S, "heartbeat_at": T0 + 3}, correlation_id="renew")
    state, _ = step(state, answer, T0 + 3)
    assert (state.failures, runner_lease_view(state)["renew_failures"]) == (0, 0)


def test_a_clean_stop_releases_the_lease() -> None:
    _, effects = step(initial_state(CLAIM), Stopping(), T0 + 1)
    assert effects == (Release("runner_lease.release", CLAIM.identity_args(), "runner lease of r1 (epoch 2)",
                               "the runner lease of r1"),)


def test_the_view_withholds_the_token() -> None:
    view = runner_lease_view(initial_state(CLAIM))
    assert view == {"runner_id": "r1", "epoch": 2, "pid": 4242, "expires_at": CLAIM.expires_at, "heartbeat_at": T0,
                    "lease_s": LEASE_S, "max_workers": 4, "renew_failures": 0, "lost": False}
    assert "runner-secret" not in repr(view)


# --- the actor on the shared loop ---------------------------------------------------------------


ACTOR_LEASE_S = 300.0  # renew interval 100 s: the lease's own ticker never fires during a test


@pytest.fixture
def runner_lease() -> Iterator[tuple[Callable[[], pykka.ActorRef[Any]], FakeWriter, FakeClock, queue.Queue[Any],
                                     HostBoard, RunnerClaim]]:
    clock = FakeClock(T0)
    writer = FakeWriter()
    board = HostBoard()
    notices: queue.Queue[Any] = queue.Queue()
    supervisor = Recorder.start(notices)
    claim = RunnerClaim(runner_id="r1", epoch=2, token="runner-secret", pid=4242, lease_s=ACTOR_LEASE_S,
                        max_workers=4, expires_at=T0 + ACTOR_LEASE_S, heartbeat_at=T0)
    refs: list[pykka.ActorRef[Any]] = []

    def start() -> pykka.ActorRef[Any]:
        ref = RunnerLease.start(writer, claim, supervisor=supervisor, clock=clock, board=board)  # type: ignore[arg-type]
        refs.append(ref)
        return ref

    try:
        yield start, writer, clock, notices, board, claim
    finally:
        for ref in refs:
            ref.stop()
        supervisor.stop()


def _view(lease: pykka.ActorRef[Any]) -> dict[str, Any]:
    """Ask after a tell: the mailbox is ordered, so the tell has been handled."""
    view: dict[str, Any] = lease.ask(GetRunnerLease(), block=True, timeout=5)
    return view


def test_the_actor_renews_publishes_and_releases_on_a_clean_stop(runner_lease) -> None:
    start, writer, clock, notices, board, claim = runner_lease
    lease = start()
    assert _view(lease)["expires_at"] == claim.expires_at
    assert writer.expires_at == claim.expires_at
    assert board.snapshot(Section.RUNNER_LEASE)["epoch"] == 2

    lease.tell(RenewTick())
    _view(lease)
    [(command, reply_to)] = writer.submitted
    assert (command.name, command.args, command.correlation_id) == (
        "runner_lease.renew", {**claim.identity_args(), "lease_s": ACTOR_LEASE_S}, "renew")
    assert reply_to == lease

    clock.now += 5
    lease.tell(WriteResult(True, {"expires_at": clock.now + ACTOR_LEASE_S, "heartbeat_at": clock.now},
                           correlation_id="renew"))
    view = _view(lease)
    assert (view["expires_at"], view["heartbeat_at"]) == (clock.now + ACTOR_LEASE_S, clock.now)
    assert writer.expires_at == clock.now + ACTOR_LEASE_S
    assert board.snapshot(Section.RUNNER_LEASE) == view  # published from the state after the step

    lease.stop()
    assert writer.calls == [("runner_lease.release", claim.identity_args())]
    assert notices.empty()


def test_the_actor_tells_the_supervisor_once_and_keeps_a_lost_lease(runner_lease) -> None:
    start, writer, clock, notices, board, claim = runner_lease
    lease = start()
    lease.tell(RenewTick())
    error = RunnerLeaseLost("r1", 2, "the lease was released")
    lease.tell(WriteResult(False, None, error.code, str(error), "renew"))
    notice = notices.get(timeout=5)
    assert notice == LeaseLostNotice(2, "runner lease of r1 (epoch 2) lost: renewal refused: the lease was released")
    assert _view(lease)["lost"] is True and board.snapshot(Section.RUNNER_LEASE)["lost"] is True

    clock.now += 200
    lease.tell(RenewTick())
    _view(lease)
    assert len(writer.submitted) == 1  # never renewed again
    lease.stop()
    assert writer.calls == []  # nor released
    assert notices.empty()  # told once
