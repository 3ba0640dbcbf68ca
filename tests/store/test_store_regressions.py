"""Store-level regressions found in review: runs that could get stuck for good.

Each drives the write commands directly (open_store + apply_batch with a
chosen `now`), as the scheduler and a worker would.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.requests import WriteCommand

TOKEN = "c" * 64


class Store:
    def __init__(self, database) -> None:
        """`database`: a location (the `database` fixture: SQLite file or PostgreSQL database)."""
        self.location = database
        self.db = open_store(database, StoreOptions(synchronous="OFF"))
        self.ids = itertools.count(1)
        self.claims: dict[str, tuple[int, str]] = {}
        self.epoch = None
        self.epoch = self.call("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                                 "process_start_identity": "1", "lease_s": 6000})["epoch"]

    def raw(self, name: str, args: dict[str, Any], now: float = 1000.0):
        return apply_batch(self.db, [WriteCommand(name, args, self.epoch)], now).results[0]

    def call(self, name: str, args: dict[str, Any], now: float = 1000.0) -> Any:
        return self.raw(name, args, now).unwrap()

    def claim(self, now: float = 1000.0) -> dict[str, Any] | None:
        epoch = f"re{next(self.ids)}"
        claimed = self.call("scheduler.claim_next", {"token_hash": TOKEN, "launch_id": epoch, "claim_lease_s": 60},
                            now)
        if claimed:
            self.claims[claimed["run_id"]] = (claimed["generation"], epoch)
        return claimed

    def worker(self, run_id: str, op: str, payload: dict[str, Any], now: float = 1000.0) -> dict[str, Any]:
        generation, epoch = self.claims[run_id]
        return self.call("worker.message", {"run_id": run_id, "launch_id": epoch, "message_id": f"m{next(self.ids)}",
                                            "generation": generation, "token_hash": TOKEN, "op": op,
                                            "payload": payload, "expected_revision": None}, now)

    def crash(self, run_id: str, now: float = 1000.0) -> dict[str, Any]:
        generation, epoch = self.claims[run_id]
        return self.call("runner.exit", {"run_id": run_id, "generation": generation, "launch_id": epoch,
                                         "token_hash": TOKEN, "outcome": "crashed"}, now)

    def run(self, run_id: str) -> tuple[Any, ...]:
        return self.db.execute_sql("SELECT status, park_reason, pause_requested FROM run WHERE run_id = ?",
                                   (run_id,)).fetchone()


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


AGENT = {"kind": "agent", "prompt": "p", "max_submissions": 3, "timeout_s": None}


def test_agent_answer_survives_an_interrupted_validation(store):
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    store.claim()
    store.worker("r1", "ready", {"start_at": "ag"})
    asked = store.worker("r1", "interaction_request", {"node_id": "ag", "attempt_id": "att1", "kind": "agent",
                                                       "contract": AGENT})
    request_id = asked["value"]["request_id"]
    store.call("interaction.submit", {"request_id": request_id, "value": {"x": 1}, "submission_id": "sub1"})
    # The launch that validates crashes before it completes the node.
    store.claim()
    store.worker("r1", "ready", {})
    assert store.worker("r1", "interaction_request", {"node_id": "ag", "attempt_id": "att2", "kind": "agent",
                                                      "contract": AGENT})["value"]["status"] == "validating"
    store.crash("r1")
    if store.run("r1")[0] == "parked":
        store.call("run.resume", {"run_id": "r1"})
    # The next launch validates again and completes the node with the answer.
    store.claim()
    store.worker("r1", "ready", {})
    again = store.worker("r1", "interaction_request", {"node_id": "ag", "attempt_id": "att3", "kind": "agent",
                                                       "contract": AGENT})["value"]
    assert again["status"] == "validating"
    store.worker("r1", "submission_verdict", {"request_id": request_id, "submission_id": "sub1", "accepted": True})
    done = store.worker("r1", "node_finished", {"node_id": "ag", "attempt_id": again["attempt_id"], "outcome": "ok",
                                                "output": {"x": 1}, "request_id": request_id,
                                                "next": {"finish": True}})
    assert done["outcome"] == "accepted"
    assert store.run("r1")[0] == "done"


def test_cancel_in_flight_when_the_run_reaches_a_checkpoint_ends_it_cancelled(store):
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    store.claim()
    store.worker("r1", "ready", {"start_at": "cp"})
    assert store.call("run.cancel", {"run_id": "r1"})["receipt"]["status"] == "cancelling"
    answer = store.worker("r1", "interaction_request", {"node_id": "cp", "attempt_id": "att1", "kind": "checkpoint",
                                                        "contract": {"kind": "checkpoint", "prompt": "p"}})
    assert answer["value"]["directive"] == "stop"  # not parked: the claim (and the cancel) still stand
    store.crash("r1")
    assert store.run("r1")[0] == "cancelled"
    assert store.db.execute_sql("SELECT count(*) FROM interactive_request").fetchone()[0] == 0


def test_resolving_an_effect_of_a_paused_run_keeps_it_paused(store):
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    store.claim()
    store.worker("r1", "ready", {"start_at": "a"})
    effect = store.worker("r1", "effect_reserve", {"node_id": "a", "idempotent": False})["value"]["effect_id"]
    store.crash("r1")
    assert store.run("r1")[:2] == ("parked", "ambiguous_effect")
    store.call("run.pause", {"run_id": "r1"})
    store.call("effect.resolve", {"effect_id": effect, "action": "retry"})
    assert store.run("r1") == ("parked", "paused", 0)
    store.call("run.resume", {"run_id": "r1"})
    assert store.claim()["run_id"] == "r1"


def test_an_abandoned_claim_is_settled_by_the_safety_net(store):
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    store.claim(now=1000.0)
    store.worker("r1", "ready", {"start_at": "a"})
    # No runner is active for r1 and its claim lease (60 s) ran out: settle it.
    assert store.call("scheduler.settle_abandoned", {"active": []}, now=1030.0) == {}
    settled = store.call("scheduler.settle_abandoned", {"active": []}, now=1061.0)
    assert settled == {"r1": "parked"}  # no progress since its launch
    assert store.run("r1")[:2] == ("parked", "no_progress")
