"""The leases a write batch's commands are fenced by, as its transaction sees them (store/batch.py).

A fenced command carries either the host epoch (the active host's writes) or a runner identity (a
runner host's, docs/runners.md: runner id + the epoch of its runner lease); it is refused unless that
lease row names the same epoch and is unexpired. The host lease is read once per transaction, a
runner's lease on its first command; `prefetch` sends those reads ahead, so that on an engine that
defers statements they travel with the batch's first round trip. Used in the writer's thread only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from piwf_actors import errors
from piwf_actors.store.commands import lookup
from piwf_actors.store.requests import WriteCommand


@dataclass(slots=True)
class _Lease:
    """The lease row as this transaction sees it."""

    epoch: int
    held: bool
    expires_at: float | None
    host_id: str | None = None

    def refusal(self, cmd: WriteCommand, fence_now: float) -> errors.PiwfError | None:
        """Why a fenced command may not write now, or None."""
        if cmd.host_epoch != self.epoch or not self.held:
            return errors.StaleEpoch(cmd.host_epoch if cmd.host_epoch is not None else -1, self.epoch)
        if self.expires_at is None or self.expires_at <= fence_now:
            return errors.LeaseExpired(self.epoch, self.expires_at)
        return None


_LEASE_SQL = "SELECT epoch, host_id, expires_at FROM host_state WHERE id = 1"
_RUNNER_LEASE_SQL = "SELECT epoch, expires_at, released_at FROM runner_host WHERE runner_id = ?"


def _current_lease(cursor: Any) -> _Lease:
    """The host lease from the cursor of `_LEASE_SQL`."""
    row = cursor.fetchone()
    return _Lease(int(row[0]), row[1] is not None, row[2], row[1]) if row else _Lease(0, False, None)


@dataclass(slots=True)
class _RunnerLease:
    """A runner host's lease row (`runner_host`) as this transaction sees it (docs/runners.md)."""

    runner_id: str
    epoch: int | None  # None: no row
    expires_at: float | None
    released: bool

    def refusal(self, cmd: WriteCommand, fence_now: float) -> errors.PiwfError | None:
        """Why a fenced command of this runner may not write now, or None."""
        epoch = cmd.runner_lease_epoch if cmd.runner_lease_epoch is not None else -1
        if self.epoch is None:
            return errors.RunnerLeaseLost(self.runner_id, epoch, "no such runner lease")
        if self.epoch != epoch:
            return errors.RunnerLeaseLost(self.runner_id, epoch, f"the lease is at epoch {self.epoch} now")
        if self.released:
            return errors.RunnerLeaseLost(self.runner_id, epoch, "the lease was released")
        if self.expires_at is None or self.expires_at <= fence_now:
            return errors.LeaseExpired(epoch, self.expires_at)
        return None


def _runner_lease(cursor: Any, runner_id: str) -> _RunnerLease:
    """`runner_id`'s lease from the cursor of `_RUNNER_LEASE_SQL`."""
    row = cursor.fetchone()
    if row is None:
        return _RunnerLease(runner_id, None, None, False)
    return _RunnerLease(runner_id, int(row[0]), row[1], row[2] is not None)


class Fences:
    """The leases a transaction's commands are fenced by: the host lease (read once), and the runner
    leases of the runner hosts that sent commands (read on first use; one writer serves one host, so
    that is at most one runner)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._host: _Lease | None = None
        self.runners: dict[str, _RunnerLease] = {}
        # Lease reads sent ahead (`prefetch`), their answers not read yet.
        self._pending_host: Any = None
        self._pending_runners: dict[str, Any] = {}

    @property
    def host(self) -> _Lease:
        """The host lease, read on first use: a runner host's batches never read it (on PostgreSQL a
        read of the row the active host renews would tie every runner transaction to those renewals)."""
        if self._host is None:
            cursor, self._pending_host = self._pending_host, None
            self._host = _current_lease(cursor if cursor is not None else self._conn.execute(_LEASE_SQL))
        return self._host

    def prefetch(self, commands: list[WriteCommand]) -> None:
        """Send the lease reads `commands` will need before the first of them needs one, so that a
        pipelined batch reads them in the same round trip as its clock: the host lease when a host
        command is in the batch (each reads its epoch), a runner lease when a fenced command of that
        runner is. Reads nothing another command would not have read."""
        for cmd in commands:
            if cmd.runner_id is None:
                if self._host is None and self._pending_host is None:
                    self._pending_host = self._conn.execute(_LEASE_SQL)
            elif cmd.runner_id not in self.runners and cmd.runner_id not in self._pending_runners:
                try:
                    fenced = lookup(cmd.name).fenced
                except errors.UnknownCommand:
                    continue
                if fenced:
                    self._pending_runners[cmd.runner_id] = self._conn.execute(_RUNNER_LEASE_SQL, (cmd.runner_id,))

    def runner(self, runner_id: str) -> _RunnerLease:
        lease = self.runners.get(runner_id)
        if lease is None:
            cursor = self._pending_runners.pop(runner_id, None)
            if cursor is None:
                cursor = self._conn.execute(_RUNNER_LEASE_SQL, (runner_id,))
            lease = self.runners[runner_id] = _runner_lease(cursor, runner_id)
        return lease

    def refusal(self, cmd: WriteCommand, fence_now: float) -> errors.PiwfError | None:
        if cmd.runner_id is not None:
            return self.runner(cmd.runner_id).refusal(cmd, fence_now)
        return self.host.refusal(cmd, fence_now)

    def moved(self, cmd: WriteCommand) -> None:
        """A lease command succeeded: read the lease it moved again before the next command."""
        if cmd.name.startswith("lease."):
            self._host = self._pending_host = None
        elif cmd.name.startswith("runner_lease."):
            self.runners.pop(str(cmd.args.get("runner_id")), None)
            self._pending_runners.pop(str(cmd.args.get("runner_id")), None)

    def _expiry(self, runner_id: str | None) -> tuple[float | None, int]:
        """(expires_at, epoch) of the lease that fences `runner_id`'s writes (None: the host's own);
        a runner lease not read yet has epoch -1."""
        if runner_id is None:
            return self.host.expires_at, self.host.epoch
        lease = self.runner(runner_id)
        return lease.expires_at, lease.epoch if lease.epoch is not None else -1

    def earliest_expiry(self, fenced_by: set[str | None]) -> tuple[int, float] | None:
        """(epoch, expires_at) of the lease that runs out first among those of the senders whose
        fenced writes this batch holds; None when none of them has a finite expiry."""
        found: tuple[int, float] | None = None
        for runner_id in fenced_by:
            expires_at, epoch = self._expiry(runner_id)
            if expires_at is not None and math.isfinite(expires_at) and (found is None or expires_at < found[1]):
                found = (epoch, float(expires_at))
        return found

    def expired_at_commit(self, clock_now: float, fenced_by: set[str | None]) -> errors.StoreError | None:
        """The lease of a sender whose fenced writes this batch holds ran out meanwhile (None: still held)."""
        for runner_id in fenced_by:
            expires_at, epoch = self._expiry(runner_id)
            if expires_at is not None and clock_now >= expires_at:
                return errors.LeaseExpired(epoch, expires_at)
        return None
