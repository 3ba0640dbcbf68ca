"""A real writer on a fresh store (a SQLite file, or a database of either engine), with a clock the test
moves, and the commands that build runs as the scheduler and a worker would (for the scheduler's, the
housekeeper's and the waits' tests)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from piwf_actors.actors.writer import WriterHandle, start_writer
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.database import open_store
from piwf_actors.store.reader import StoreReader

TOKEN = "c" * 64


class WriterStore:
    """`writer` holds the host lease (its handle stamps the epoch); `now` is the writer's clock and is
    handed to the actor under test, so both judge deadlines and expiries by the same time.

    `time` is the time the test moves (`store.time += 30`): the writer's clock, also on PostgreSQL,
    whose commands otherwise read the database server's clock (`database_clock=False`)."""

    def __init__(self, state_dir: Path, *, database: DatabaseLocation | None = None) -> None:
        """On `state_dir`'s state.db, or on `database` (a test's `database` fixture: either engine)."""
        self.database = database if database is not None else state_dir / "state.db"
        open_store(self.database).close()
        self.time = time.time()
        self.writer: WriterHandle = start_writer(self.database, clock=self.now, database_clock=False)
        epoch = self.writer.call("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                                   "process_start_identity": "1", "lease_s": 10**7})["epoch"]
        self.writer.advance_epoch(epoch)
        self.reader = StoreReader(self.database)
        self.claims: dict[str, dict[str, Any]] = {}
        self.messages = 0

    def now(self) -> float:
        return self.time

    def close(self) -> None:
        self.reader.close()
        self.writer.ref.stop()

    def claimed_run(self, run_id: str, *, claim_lease_s: float = 60.0, claim_token_hash: str = TOKEN) -> dict[str, Any]:
        """A run created and claimed for a launch whose launch id is `re-{run_id}`; the claim's answer."""
        self.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
        claimed = self.writer.call("scheduler.claim_next", {
            "token_hash": claim_token_hash, "launch_id": f"re-{run_id}", "claim_lease_s": claim_lease_s})
        assert claimed is not None and claimed["run_id"] == run_id
        self.claims[run_id] = claimed
        return claimed

    def worker(self, run_id: str, op: str, payload: dict[str, Any]) -> Any:
        claimed = self.claims[run_id]
        self.messages += 1
        answer = self.writer.call("worker.message", {
            "run_id": run_id, "launch_id": claimed["launch_id"], "message_id": f"m{self.messages}",
            "generation": claimed["generation"], "token_hash": TOKEN, "op": op, "payload": payload})
        assert answer["outcome"] == "accepted", answer
        return answer["value"]

    def finished_run(self, run_id: str) -> None:
        """A run that went through one node and finished `done` (its claim released)."""
        self.claimed_run(run_id)
        self.worker(run_id, "ready", {})
        self.worker(run_id, "node_finished", {"node_id": "a", "outcome": "ok", "output": None,
                                              "notification": "finished", "next": {"finish": True}})

    def status(self, run_id: str) -> str | None:
        found = queries.run_status(self.reader, run_id)
        return None if found is None else found[0]

    def barrier(self) -> None:
        """Return once everything sent to the writer before this call is committed (it applies
        commands in the order they were sent)."""
        self.writer.call("scheduler.renew_claims", {"claims": [], "claim_lease_s": 1})  # renews nothing
