"""`StandingClaim`: the scheduler's claim left with the writer while there is nothing to claim.

With idle slots and an empty queue, the scheduler would claim only after the
notice of the next `run.start`: one more commit and two thread hand-offs
before a fresh run starts. Instead it leaves the claim with the writer
(`WriterQueue.offer`), which applies it as the last command of the batch
that holds the next run.start, in the same transaction, and answers it as if
it had just been sent. The scheduler takes it back (`withdraw`) before it
claims anything else, when it suspends and when it stops; exactly one of
the two wins, and a claim the writer took is answered like any other.

Not where writers run at once (`Engine.concurrent_writers`: PostgreSQL) while
runner hosts claim from the same queue, nor on a runner host (the active host
claims there too): a claim inside a client's run.start transaction would tie
that write to theirs under SERIALIZABLE (more conflicts and retries for the
client's batch). SQLite has one writer at a time: nothing to conflict with.

Owned by the Scheduler and used from its thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from piwf_actors.actors.base import WriteReplies
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.engines.registry import engine_for
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteResult

#: How long the answer "no runner host is live" is trusted before it is read again.
RUNNERS_RECHECK_S = 1.0


class StandingClaim:
    def __init__(self, database: DatabaseLocation, *, host_duties: bool) -> None:
        self._writers_contend = engine_for(database).concurrent_writers
        self._host_duties = host_duties
        self._token: str | None = None
        self._checked_at = float("-inf")
        self._runners_live = True

    @property
    def standing(self) -> bool:
        return self._token is not None

    def allowed(self, reader: StoreReader | None) -> bool:
        if not self._writers_contend:
            return True
        now = time.monotonic()
        if now - self._checked_at >= RUNNERS_RECHECK_S and reader is not None:
            self._checked_at = now
            self._runners_live = not self._host_duties or queries.live_runner_hosts_exist(reader, time.time())
        return not self._runners_live

    def offer(self, replies: WriteReplies, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> None:
        """Leave `scheduler.claim_next` with `args` with the writer; `on_result` gets its answer."""

        def answered(result: WriteResult) -> None:
            self._token = None
            on_result(result)

        self._token = replies.offer("scheduler.claim_next", args, answered)

    def withdraw(self, replies: WriteReplies | None) -> bool:
        """Take it back; False when the writer took it already (its answer is on the way). True
        when none stands."""
        if self._token is None or replies is None:
            return True
        if not replies.withdraw(self._token):
            return False
        self._token = None
        return True
