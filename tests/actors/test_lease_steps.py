"""`HostLease`'s step function `decide(state, event, now)`, called with a chosen `now`.

No threads, no writer: each test feeds events to the pure function and
checks the new state and the effects it asks the renewal loop to carry out
(`actors/lease_renewal.py`). The actor around it is tested in test_lease.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from piwf_actors.actors.lease import (
    HostLeaseState,
    LeaseClaim,
    LeaseLostNotice,
    LeaseRegained,
    LeaseSuspended,
    RenewTick,
    decide,
    lease_view,
)
from piwf_actors.actors.lease_renewal import (
    AdvanceEpoch,
    Effect,
    Log,
    Notify,
    Publish,
    Release,
    Renewed,
    Started,
    Stopping,
    Submit,
)
from piwf_actors.errors import DiskFull, LeaseLost, ReadOnlyDatabase, StoreError
from piwf_actors.store.requests import WriteResult

LEASE_S = 30.0
INTERVAL_S = LEASE_S / 3
CLAIM_LEASE_S = 45.0
T0 = 1_000.0
CLAIM = LeaseClaim(epoch=3, host_id="h-test", token="secret-token", pid=4242, process_start_identity="1.0",
                   lease_s=LEASE_S, expires_at=T0 + LEASE_S)
RENEW_ARGS = {**CLAIM.identity_args(), "lease_s": LEASE_S}
REACQUIRE_ARGS = {**RENEW_ARGS, "claim_lease_s": CLAIM_LEASE_S}


def step(state: HostLeaseState, event: Any, now: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    return decide(state, event, now, interval_s=INTERVAL_S, claim_lease_s=CLAIM_LEASE_S)


def fresh() -> HostLeaseState:
    return HostLeaseState(CLAIM, heartbeat_at=T0)


def renewed(now: float) -> WriteResult:
    return WriteResult(True, {"expires_at": now + LEASE_S, "heartbeat_at": now}, correlation_id="renew")


def failed(error_type: type[StoreError], detail: str, correlation_id: str = "renew") -> WriteResult:
    error = error_type(detail)
    return WriteResult(False, None, error.code, str(error), correlation_id)


def refused(detail: str, correlation_id: str = "renew") -> WriteResult:
    error = LeaseLost(CLAIM.epoch, detail)
    return WriteResult(False, None, error.code, str(error), correlation_id)


def disk_full_at_expiry() -> HostLeaseState:
    """A renewal failed on a full disk and the lease has just been suspended at its expiry."""
    state, _ = step(fresh(), RenewTick(), T0)
    state, _ = step(state, failed(DiskFull, "x"), T0 + 1)
    state, _ = step(state, RenewTick(), CLAIM.expires_at)
    assert state.suspended and not state.lost
    return state


# --- start and renewal ---------------------------------------------------------------------


def test_start_hands_the_expiry_to_the_writer_and_publishes() -> None:
    state, effects = step(fresh(), Started(), T0)
    assert state == fresh()
    assert effects == (Renewed(CLAIM.expires_at), Publish())


def test_a_tick_renews_once_per_interval_while_the_renewal_is_with_the_writer() -> None:
    state, effects = step(fresh(), RenewTick(), T0)
    assert effects == (Submit("lease.renew", RENEW_ARGS, "renew"),)
    assert state.renew_sent_at == T0
    assert "secret-token" not in repr(effects)  # only the token's hash goes to the writer

    not_due, effects = step(state, RenewTick(), T0 + INTERVAL_S - 0.001)
    assert (not_due, effects) == (state, ())

    # No answer within an interval: the next attempt goes (a lost answer cannot stall the lease).
    again, effects = step(state, RenewTick(), T0 + INTERVAL_S)
    assert effects == (Submit("lease.renew", RENEW_ARGS, "renew"),)
    assert again.renew_sent_at == T0 + INTERVAL_S


def test_a_successful_renewal_extends_the_lease_and_resets_the_failures() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, renewed(T0 + 2), T0 + 2)
    assert (state.claim.expires_at, state.heartbeat_at, state.renew_sent_at) == (T0 + 2 + LEASE_S, T0 + 2, None)
    assert state.claim.epoch == CLAIM.epoch
    assert effects == (Renewed(T0 + 2 + LEASE_S), Publish())

    # Right after an answer the next tick renews (nothing is with the writer any more).
    _, effects = step(state, RenewTick(), T0 + 3)
    assert effects == (Submit("lease.renew", RENEW_ARGS, "renew"),)


def test_a_renewal_after_failures_logs_the_recovery() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, failed(StoreError, "database is locked"), T0 + 1)
    assert (state.renew_failures, state.lost) == (1, False)
    assert effects == (Log(logging.WARNING, "lease renewal failed (1 in a row): database is locked"),)

    state, effects = step(state, renewed(T0 + 2), T0 + 2)
    assert (state.renew_failures, state.storage_failing) == (0, False)
    assert effects == (Renewed(T0 + 2 + LEASE_S), Publish(), Log(logging.INFO, "lease renewal for epoch 3 recovered"))


# --- loss -------------------------------------------------------------------------------------


def test_a_refused_renewal_loses_the_lease_once_and_for_all() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, refused("taken"), T0 + 1)
    assert state.lost
    reason = "lease for epoch 3 lost: taken"
    assert effects == (Publish(), Log(logging.ERROR, f"lease for epoch 3 lost: {reason}"),
                       Notify(LeaseLostNotice(3, reason)))

    # Nothing more is sent, answered or released (the lease may be someone else's now).
    assert step(state, RenewTick(), T0 + 100) == (state, ())
    assert step(state, renewed(T0 + 101), T0 + 101)[1] == ()
    assert step(state, Stopping(), T0 + 102) == (state, ())


def test_a_refusal_without_a_text_is_still_a_loss() -> None:
    state, effects = step(fresh(), WriteResult(False, None, LeaseLost.code, None, "renew"), T0 + 1)
    assert state.lost and effects[-1] == Notify(LeaseLostNotice(3, "renewal refused"))


def test_no_successful_renewal_before_the_expiry_loses_the_lease() -> None:
    state, _ = step(fresh(), RenewTick(), T0)  # never answered
    alive, effects = step(state, RenewTick(), CLAIM.expires_at - 0.001)
    assert not alive.lost and effects == (Submit("lease.renew", RENEW_ARGS, "renew"),)

    lost, effects = step(alive, RenewTick(), CLAIM.expires_at)
    reason = "no successful renewal before the lease expired"
    assert lost.lost
    assert effects == (Publish(), Log(logging.ERROR, f"lease for epoch 3 lost: {reason}"),
                       Notify(LeaseLostNotice(3, reason)))


def test_failures_lose_the_lease_only_when_one_is_answered_past_the_expiry() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, failed(StoreError, "locked"), CLAIM.expires_at - 1)
    assert not state.lost and len(effects) == 1

    state, _ = step(state, RenewTick(), CLAIM.expires_at - 0.5)
    state, effects = step(state, failed(StoreError, "still locked"), CLAIM.expires_at)
    assert (state.lost, state.renew_failures) == (True, 2)
    reason = "renewals kept failing: still locked"
    assert effects == (Log(logging.WARNING, "lease renewal failed (2 in a row): still locked"), Publish(),
                       Log(logging.ERROR, f"lease for epoch 3 lost: {reason}"), Notify(LeaseLostNotice(3, reason)))


# --- a database that cannot be written ----------------------------------------------------------


def test_a_full_disk_at_the_expiry_suspends_and_retakes_the_lease_at_a_higher_epoch() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, failed(DiskFull, "x"), T0 + 1)
    assert (state.storage_failing, state.renew_failures, state.suspended) == (True, 1, False)

    # Still full when it runs out: suspended (not lost), and the first reacquire goes at once.
    state, effects = step(state, RenewTick(), CLAIM.expires_at)
    reason = "the lease expired while the database could not be written"
    assert (state.suspended, state.lost, state.renew_sent_at) == (True, False, CLAIM.expires_at)
    assert effects == (
        Publish(),
        Log(logging.WARNING, f"lease for epoch 3 suspended: {reason}; serving reads, claiming nothing, and "
                             "taking the lease again once writes succeed"),
        Notify(LeaseSuspended(3, reason)),
        Submit("lease.reacquire", REACQUIRE_ARGS, "reacquire"))

    # Still full: the reacquire fails quietly, and the next tick tries again.
    state, effects = step(state, failed(DiskFull, "x", "reacquire"), CLAIM.expires_at + 1)
    assert state.suspended and effects == (Log(logging.DEBUG, "taking the lease again failed: "
                                                              "database or disk is full: x"),)
    state, effects = step(state, RenewTick(), CLAIM.expires_at + 2)
    assert effects == (Submit("lease.reacquire", REACQUIRE_ARGS, "reacquire"),)
    assert step(state, RenewTick(), CLAIM.expires_at + 3)[1] == ()  # that one is still with the writer

    # Room again: held at epoch 4; the writer stamps the new epoch; the supervisor has claims resume.
    now = CLAIM.expires_at + 4
    state, effects = step(state, WriteResult(True, {"epoch": 4, "expires_at": now + LEASE_S, "heartbeat_at": now,
                                                    "claims": 2}, correlation_id="reacquire"), now)
    assert (state.suspended, state.storage_failing, state.renew_failures) == (False, False, 0)
    assert (state.claim.epoch, state.claim.expires_at, state.heartbeat_at) == (4, now + LEASE_S, now)
    assert replace(state.claim, epoch=3, expires_at=CLAIM.expires_at) == CLAIM  # the same holder and token
    assert effects == (Renewed(now + LEASE_S), AdvanceEpoch(4), Publish(),
                       Log(logging.WARNING, "lease taken again at epoch 4 (was 3) now that writes succeed"),
                       Notify(LeaseRegained(3, 4)))

    # From then on it renews at the new epoch, and a clean stop releases that epoch.
    _, effects = step(state, RenewTick(), now + 1)
    assert effects == (Submit("lease.renew", {**state.claim.identity_args(), "lease_s": LEASE_S}, "renew"),)
    assert effects[0].args["epoch"] == 4
    _, effects = step(state, Stopping(), now + 2)
    assert effects == (Release("lease.release", state.claim.identity_args(), "lease for epoch 4",
                               "lease for epoch 4"),)


def test_a_read_only_database_suspends_like_a_full_disk() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, effects = step(state, failed(ReadOnlyDatabase, "x"), CLAIM.expires_at)  # answered past the expiry
    reason = "the lease expired while the database could not be written: database is read-only: x"
    assert (state.suspended, state.lost) == (True, False)
    assert effects[0] == Log(logging.WARNING, "lease renewal failed (1 in a row): database is read-only: x")
    assert effects[-1] == Notify(LeaseSuspended(3, reason))
    assert not any(isinstance(effect, Submit) for effect in effects)  # the next tick sends the reacquire


def test_a_refusal_after_storage_failures_suspends_rather_than_loses() -> None:
    state, _ = step(fresh(), RenewTick(), T0)
    state, _ = step(state, failed(DiskFull, "x"), T0 + 1)
    state, _ = step(state, RenewTick(), T0 + 1 + INTERVAL_S)
    state, effects = step(state, refused("expired"), T0 + 2 + INTERVAL_S)
    assert (state.suspended, state.lost) == (True, False)
    assert effects[-1] == Notify(LeaseSuspended(3, "lease for epoch 3 lost: expired"))


def test_a_renewal_answered_while_suspended_changes_nothing() -> None:
    state = disk_full_at_expiry()
    later, effects = step(state, renewed(CLAIM.expires_at + 1), CLAIM.expires_at + 1)
    assert effects == () and later == replace(state, renew_sent_at=None)


def test_a_lease_another_host_took_while_the_disk_was_full_is_lost_and_not_released() -> None:
    state = disk_full_at_expiry()
    state, effects = step(state, refused("another host took it", "reacquire"), CLAIM.expires_at + 1)
    reason = "lease for epoch 3 lost: another host took it"
    assert state.lost
    assert effects == (Publish(), Log(logging.ERROR, f"lease for epoch 3 lost: {reason}"),
                       Notify(LeaseLostNotice(3, reason)))
    assert step(state, RenewTick(), CLAIM.expires_at + 100)[1] == ()
    assert step(state, Stopping(), CLAIM.expires_at + 101)[1] == ()


# --- stop and view ----------------------------------------------------------------------------


def test_a_clean_stop_releases_a_held_lease_but_not_a_suspended_one() -> None:
    _, effects = step(fresh(), Stopping(), T0 + 1)
    assert effects == (Release("lease.release", CLAIM.identity_args(), "lease for epoch 3", "lease for epoch 3"),)
    assert step(disk_full_at_expiry(), Stopping(), CLAIM.expires_at + 1)[1] == ()


def test_the_view_withholds_the_token() -> None:
    state = disk_full_at_expiry()
    view = lease_view(state)
    assert view == {"epoch": 3, "host_id": "h-test", "pid": 4242, "process_start_identity": "1.0",
                    "expires_at": CLAIM.expires_at, "heartbeat_at": T0, "lease_s": LEASE_S, "renew_failures": 1,
                    "lost": False, "suspended": True}
    assert "secret-token" not in repr(view) and CLAIM.identity_args()["token_hash"] not in repr(view)
