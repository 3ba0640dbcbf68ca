"""`HostLease`: renewal, loss and release.

Two layers:
- the actor alone, with an in-memory writer double, a probe supervisor and a
  hand-driven clock (its ticker interval is far longer than the test, so
  every RenewTick is told by the test and every renewal answer too);
- a real host (`start_host`) with a short lease, checked through the
  database: heartbeats move, writes with the host's epoch commit, and after
  another "host" moves the epoch the old one's writes are refused with
  `stale_epoch` and it stops itself.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from lease_doubles import FakeClock, FakeWriter, Recorder
from testsupport import execute, host_state_row, wait_for

from piwf_actors.actors.lease import (
    GetLease,
    HostLease,
    LeaseClaim,
    LeaseLostNotice,
    LeaseRegained,
    LeaseSuspended,
    RenewTick,
)
from piwf_actors.canonical import token_hash
from piwf_actors.errors import DiskFull, LeaseLost, StoreError
from piwf_actors.store.requests import WriteResult

# --- the actor alone ----------------------------------------------------------------


LEASE_S = 300.0  # renew interval 100 s: the lease's own ticker never fires during a test


@pytest.fixture
def lease_parts() -> Iterator[tuple[Callable[[], pykka.ActorRef[Any]], FakeWriter, FakeClock, queue.Queue[Any],
                                    LeaseClaim]]:
    clock = FakeClock()
    writer = FakeWriter()
    notices: queue.Queue[Any] = queue.Queue()
    supervisor = Recorder.start(notices)
    claim = LeaseClaim(epoch=3, host_id="h-test", token="secret-token", pid=os.getpid(),
                       process_start_identity="1.0", lease_s=LEASE_S, expires_at=clock.now + LEASE_S)
    refs: list[pykka.ActorRef[Any]] = []

    def start() -> pykka.ActorRef[Any]:
        ref = HostLease.start(writer, claim, supervisor=supervisor, clock=clock)  # type: ignore[arg-type]
        refs.append(ref)
        return ref

    try:
        yield start, writer, clock, notices, claim
    finally:
        for ref in refs:
            ref.stop()
        supervisor.stop()


def _state(lease: pykka.ActorRef[Any]) -> dict[str, Any]:
    """Ask after a tell: the mailbox is ordered, so the tell has been handled."""
    state: dict[str, Any] = lease.ask(GetLease(), block=True, timeout=5)
    return state


def _renewed(clock: FakeClock, lease_s: float = LEASE_S) -> WriteResult:
    return WriteResult(True, {"expires_at": clock.now + lease_s, "heartbeat_at": clock.now}, correlation_id="renew")


def test_tick_submits_one_renewal_at_a_time(lease_parts) -> None:
    start, writer, clock, notices, claim = lease_parts
    lease = start()

    lease.tell(RenewTick())
    _state(lease)
    assert len(writer.submitted) == 1
    command, reply_to = writer.submitted[0]
    assert command.name == "lease.renew"
    assert command.args == {**claim.identity_args(), "lease_s": LEASE_S}
    assert command.args["token_hash"] == token_hash("secret-token")  # the token itself never leaves
    assert "secret-token" not in repr(command)
    assert reply_to == lease

    clock.now += 10  # the renewal is still with the writer: no second one
    lease.tell(RenewTick())
    _state(lease)
    assert len(writer.submitted) == 1

    clock.now += 5
    lease.tell(_renewed(clock))
    state = _state(lease)
    assert (state["heartbeat_at"], state["expires_at"]) == (clock.now, clock.now + LEASE_S)
    assert (state["lost"], state["renew_failures"]) == (False, 0)

    clock.now += 1
    lease.tell(RenewTick())
    _state(lease)
    assert len(writer.submitted) == 2
    assert notices.empty()


def test_refused_renewal_loses_the_lease_and_skips_release(lease_parts) -> None:
    start, writer, clock, notices, claim = lease_parts
    lease = start()
    lease.tell(RenewTick())
    lease.tell(WriteResult(False, None, LeaseLost.code, "host lease for epoch 3 lost: taken", "renew"))

    notice = notices.get(timeout=5)
    assert isinstance(notice, LeaseLostNotice)
    assert notice.epoch == claim.epoch and "taken" in notice.reason
    assert _state(lease)["lost"] is True

    clock.now += 200  # a lost lease is never renewed again
    lease.tell(RenewTick())
    _state(lease)
    assert len(writer.submitted) == 1

    lease.stop()
    assert writer.calls == []  # it must not release a lease that may be someone else's now
    assert notices.empty()  # told once


def test_failing_renewals_lose_the_lease_only_at_expiry(lease_parts) -> None:
    start, writer, clock, notices, claim = lease_parts
    lease = start()
    lease.tell(RenewTick())
    lease.tell(WriteResult(False, None, StoreError.code, "database is locked by another process", "renew"))
    state = _state(lease)
    assert (state["lost"], state["renew_failures"]) == (False, 1)
    assert notices.empty()

    # The next renewal gets no answer at all (a writer stuck on a slow disk) ...
    clock.now += LEASE_S / 3
    lease.tell(RenewTick())
    _state(lease)
    assert len(writer.submitted) == 2
    assert notices.empty()

    # ... and the lease runs out: the host must stop, whatever the writer is doing.
    clock.now = claim.expires_at
    lease.tell(RenewTick())
    notice = notices.get(timeout=5)
    assert isinstance(notice, LeaseLostNotice)
    assert "expired" in notice.reason
    assert len(writer.submitted) == 2


def test_a_full_disk_past_expiry_suspends_the_lease_and_takes_it_again_at_a_higher_epoch(lease_parts) -> None:
    start, writer, clock, notices, claim = lease_parts
    lease = start()
    lease.tell(RenewTick())
    lease.tell(WriteResult(False, None, DiskFull.code, "database or disk is full: x", "renew"))
    assert _state(lease)["renew_failures"] == 1

    clock.now = claim.expires_at  # still full when the lease runs out: suspended, not lost
    lease.tell(RenewTick())
    notice = notices.get(timeout=5)
    assert isinstance(notice, LeaseSuspended) and notice.epoch == claim.epoch
    state = _state(lease)
    assert (state["suspended"], state["lost"]) == (True, False)
    reacquire, reply_to = writer.submitted[-1]
    assert reacquire.name == "lease.reacquire" and reply_to == lease
    assert reacquire.args["epoch"] == claim.epoch and reacquire.args["token_hash"] == token_hash("secret-token")

    # Still full: it keeps trying, nothing else happens.
    lease.tell(WriteResult(False, None, DiskFull.code, "database or disk is full: x", "reacquire"))
    clock.now += LEASE_S / 3
    lease.tell(RenewTick())
    _state(lease)
    assert writer.submitted[-1][0].name == "lease.reacquire"
    assert notices.empty()

    # Room again: the lease is held at epoch + 1 and every handle stamps the new epoch.
    lease.tell(WriteResult(True, {"epoch": claim.epoch + 1, "expires_at": clock.now + LEASE_S,
                                  "heartbeat_at": clock.now, "claims": 2}, correlation_id="reacquire"))
    regained = notices.get(timeout=5)
    assert isinstance(regained, LeaseRegained)
    assert (regained.previous_epoch, regained.epoch) == (claim.epoch, claim.epoch + 1)
    assert writer.epoch == claim.epoch + 1 and writer.expires_at == clock.now + LEASE_S
    state = _state(lease)
    assert (state["suspended"], state["epoch"]) == (False, claim.epoch + 1)
    clock.now += LEASE_S / 3 + 1
    lease.tell(RenewTick())
    _state(lease)
    renew = writer.submitted[-1][0]
    assert renew.name == "lease.renew" and renew.args["epoch"] == claim.epoch + 1


def test_a_lease_someone_else_took_while_the_disk_was_full_is_lost(lease_parts) -> None:
    start, writer, clock, notices, claim = lease_parts
    lease = start()
    lease.tell(RenewTick())
    lease.tell(WriteResult(False, None, DiskFull.code, "database or disk is full: x", "renew"))
    _state(lease)  # both handled before the clock moves
    clock.now = claim.expires_at
    lease.tell(RenewTick())
    assert isinstance(notices.get(timeout=5), LeaseSuspended)
    lease.tell(WriteResult(False, None, LeaseLost.code, "lease for epoch 3 lost: another host took it",
                           "reacquire"))
    notice = notices.get(timeout=5)
    assert isinstance(notice, LeaseLostNotice) and "another host" in notice.reason
    lease.stop()
    assert writer.calls == []  # not released: it is not ours


def test_clean_stop_releases_with_the_claim_identity(lease_parts) -> None:
    start, writer, _clock, notices, claim = lease_parts
    lease = start()
    lease.stop()
    assert writer.calls == [("lease.release", claim.identity_args())]
    assert notices.empty()


# --- a real host ----------------------------------------------------------------------


@pytest.fixture
def host_factory(state_dir, hosts) -> Callable[..., Any]:
    """`host_factory(**config)`: `hosts` (tests/conftest.py) on the test's state directory."""
    return lambda **config: hosts(state_dir, **config)


def test_running_host_renews_its_lease(state_dir, host_factory) -> None:
    # Renewals every lease_s / 3 = 0.5 s: the first read below comes before the first renewal unless
    # the start takes half a second longer than it does (at 0.6 s, a loaded PostgreSQL run lost that race).
    lease_s = 1.5
    host = host_factory(lease_s=lease_s)
    first = host_state_row(state_dir)
    assert first["heartbeat_at"] == first["started_at"]
    heartbeats = [first["heartbeat_at"]]  # distinct values, in the order they were seen

    def renewed_twice() -> bool:
        row = host_state_row(state_dir)
        assert row["expires_at"] == pytest.approx(row["heartbeat_at"] + lease_s)
        assert (row["epoch"], row["pid"]) == (host.epoch, os.getpid())
        if row["heartbeat_at"] != heartbeats[-1]:
            heartbeats.append(row["heartbeat_at"])
        return len(heartbeats) >= 3

    # Two renewals come within ~1 s; the wait allows for a loaded machine.
    wait_for(renewed_twice, 10, "two lease renewals", poll=0.01)
    assert heartbeats == sorted(heartbeats)  # the heartbeat only moves forward
    assert not host.stopped
    state = host.lease.ask(GetLease(), timeout=5)
    assert (state["lost"], state["renew_failures"], state["epoch"]) == (False, 0, host.epoch)
    assert state["heartbeat_at"] > first["heartbeat_at"]

    host.stop()
    released = host_state_row(state_dir)
    assert released["host_id"] is None and released["epoch"] == host.epoch


def _take_over_with_sql(state_dir: Path, host: Any) -> None:
    assert execute(state_dir, "UPDATE host_state SET epoch = epoch + 1, host_id = 'intruder', token_hash = 'other' "
                              "WHERE id = 1") == 1


def _take_over_through_the_writer(_state_dir: Path, host: Any) -> None:
    # What a second host does when it believes the holder is dead (pid + start identity match).
    claim = host.claim
    host.writer.call("lease.acquire", {
        "host_id": "intruder", "token_hash": "other", "pid": os.getpid(), "process_start_identity": "x",
        "lease_s": 60, "holder_dead": {"pid": claim.pid, "process_start_identity": claim.process_start_identity},
    })


@pytest.mark.parametrize("take_over", [_take_over_with_sql, _take_over_through_the_writer],
                         ids=["raw-sql", "acquire-with-holder-dead"])
def test_host_fenced_out_by_a_new_epoch_stops_itself(state_dir, host_factory, take_over) -> None:
    lease_s = 0.6
    host = host_factory(lease_s=lease_s)
    assert host.epoch == 1
    # A harmless fenced write (nothing to release): it passes the fence only with the current epoch.
    fenced_write = ("child.release", {"pid": 0, "create_time": 0.0})
    accepted = host.writer.execute(*fenced_write)
    assert accepted.ok, accepted.error
    assert accepted.value is False

    # Move the epoch right after a renewal, so the next one (0.2 s away) cannot stop the
    # host before the stale write below reaches the writer.
    seen = host_state_row(state_dir)["heartbeat_at"]
    wait_for(lambda: host_state_row(state_dir)["heartbeat_at"] != seen, 3, "a lease renewal", poll=0.01)
    take_over(state_dir, host)
    stale = host.writer.execute(*fenced_write)
    assert not stale.ok
    assert stale.error_code == "stale_epoch"
    assert "epoch 1 is stale (current epoch is 2)" in (stale.error or "")

    # The next renewal is refused; the host stops within one lease period.
    assert host.wait(lease_s + 5)
    assert host.stopped
    assert "lease" in (host.stop_reason or "")
    assert "epoch 1" in (host.stop_reason or "")
    row = host_state_row(state_dir)
    assert (row["epoch"], row["host_id"], row["token_hash"]) == (2, "intruder", "other")  # not released by us
    after_stop = host.writer.execute(*fenced_write, timeout=5)
    assert (after_stop.ok, after_stop.error_code) == (False, "writer_stopped")


def test_expired_lease_is_not_renewed(state_dir, host_factory) -> None:
    # A host paused past its expiry (SIGSTOP, a laptop lid) must not silently revive its lease.
    lease_s = 0.6
    host = host_factory(lease_s=lease_s)
    assert execute(state_dir, "UPDATE host_state SET expires_at = ? WHERE id = 1", (time.time() - 1,)) == 1
    assert host.wait(lease_s + 5)
    assert "lease for epoch 1 lost" in (host.stop_reason or "")
    assert "expired" in (host.stop_reason or "")
