"""`RunnerWatch`: the active host's eye on the runner hosts that share its queue (docs/runners.md).

Runner hosts claim runs under their own runner lease. When one dies (or is
paused, or loses its database) its lease runs out and the runs it held must
go on elsewhere. Every `poll_s` this actor reads, through its own read-only
connection, the runner leases (published on the host board: `host.status`
lists the live runner hosts) and whether a runner whose lease is gone left
claims or child processes behind. If one did, it sends `runners.recover`,
which decides again inside the transaction (with the database's clock on
PostgreSQL): each such claim is settled like a host crash's (an `applying`
effect becomes ambiguous and parks the run, otherwise the run is re-queued
and resumes from its last committed node), and the answer names the dead
runners' unreleased children. Those registered on this machine are
terminated (matched by pid *and* start time); those of another machine are
released without a signal — a pid names nothing across machines, and a
worker left running there can change nothing (its claim is gone).

Only the active host runs this; a runner host never recovers another's
work. `plan` is the step function: what to do after a poll, given a chosen
`now`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import PollingActor
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand, WriteResult
from piwf_actors.worker.termination import is_same_process, machine_identity, terminate_tree

log = logging.getLogger(__name__)

#: A runners.recover without an answer for this long may be sent again (the writer always answers;
#: this only keeps a lost answer from ending recovery for good).
ATTEMPT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RunnerPoll:
    """Time to look at the runner leases (sent by the watch's ticker)."""


def plan(dead_work: bool, recovering_since: float | None, now: float) -> bool:
    """Whether to send `runners.recover` now: a dead runner left work and no recovery is under way
    (or the last one has had no answer for ATTEMPT_TIMEOUT_S)."""
    if not dead_work:
        return False
    return recovering_since is None or now - recovering_since >= ATTEMPT_TIMEOUT_S


class RunnerWatch(PollingActor):
    actor_name = "runner-watch"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, supervisor: pykka.ActorRef[Any] | None,
                 board: HostBoard | None = None, poll_s: float = 0.5, grace_s: float = 3.0,
                 clock: Callable[[], float] = time.time) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._database = database
        self._board = board
        self._poll_s = poll_s
        self._grace_s = grace_s
        self._clock = clock
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._recovering_since: float | None = None
        self._machine = machine_identity()

    def on_start(self) -> None:
        """Runs in the watch's thread: its reader, a first look at once, then the ticker."""
        self._reader = StoreReader(self._database)
        self._poll(RunnerPoll())
        self._ticker = Ticker(self.actor_ref, RunnerPoll(), self._poll_s, "runner-watch").start()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {RunnerPoll: self._poll, WriteResult: self._recovered}

    def _poll(self, _message: RunnerPoll) -> None:
        assert self._reader is not None
        now = self._clock()
        runners = queries.runner_hosts(self._reader, now)
        if self._board is not None:
            live = [r for r in runners if r["live"]]
            self._board.publish(Section.RUNNERS, {"live": len(live), "runners": runners})
        if plan(queries.dead_runner_work(self._reader, now), self._recovering_since, now):
            self._recovering_since = now
            self._writer.submit(WriteCommand("runners.recover", {}, correlation_id="recover"), self.actor_ref)

    def _recovered(self, result: WriteResult) -> None:
        self._recovering_since = None
        if not result.ok:
            log.warning("recovering the work of runner hosts whose lease is gone failed: %s", result.error)
            return
        value = result.value
        if value["runs"]:
            log.warning("recovered %d run(s) of runner host(s) %s whose lease is gone: %s", len(value["runs"]),
                        ", ".join(value["runners"]),
                        ", ".join(f"{run_id} → {status}" for run_id, status in value["runs"].items()))
        for child in value["children"]:
            self._reap(child)

    def _reap(self, child: dict[str, Any]) -> None:
        """Terminate a dead runner's child on this machine (pid + start time); release it either way."""
        if child["machine_id"] not in (None, self._machine):
            log.info("released %s pid %d (run %s) of runner %s on machine %s without signalling it: not this "
                     "machine", child["kind"], child["pid"], child["run_id"], child["runner_id"], child["machine_id"])
        elif is_same_process(child["pid"], child["create_time"]):
            terminate_tree(child["pid"], child["create_time"], grace_s=self._grace_s)
            log.info("reaped %s pid %d (run %s) of runner %s", child["kind"], child["pid"], child["run_id"],
                     child["runner_id"])
        self._writer.submit(WriteCommand("child.release", {"pid": child["pid"], "create_time": child["create_time"],
                                                           "run_id": child["run_id"]}))
