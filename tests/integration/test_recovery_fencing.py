"""Run fencing and worker-message idempotency, driven at the store level.

No host runs here: the test opens the state database with `open_store` and
applies write commands with `apply_batch` at chosen times, exactly as the
writer actor would — `lease.acquire`, `run.create`, `scheduler.claim_next`,
`worker.message`, `runner.exit`, `host.recover`. That makes the interleavings
that are hard to force with real processes (a stale worker still talking
after its run was claimed again, a replayed message) deterministic.

- a message from an older claim (generation, token or launch id) is
  refused `claim_lost` and changes nothing, as is one after the claim expired;
- a command from an earlier host epoch is refused `stale_epoch`;
- the same (launch id, message id) with the same payload returns the
  recorded answer with `"replayed": True` and applies nothing again; with
  another payload it is rejected.

One test runs a real host: the scheduler's renewals keep the claim of a node
that runs longer than the claim lease, so its result is not refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wf import harness
from wf.harness import Oracle, events, flow, wait_for_status

from piwf_actors.canonical import token_hash
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import open_store
from piwf_actors.store.requests import WriteCommand, WriteResult

guard = harness.guard  # the fixture of the real-process test (see wf/harness.py)

T0 = 1_700_000_000.0


class Store:
    """The state database, written the way the writer actor writes it, at chosen times."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = open_store(path)
        self.epoch: int | None = None

    def apply(self, name: str, args: dict[str, Any], *, at: float = T0, epoch: int | None = None) -> WriteResult:
        command = WriteCommand(name, args, self.epoch if epoch is None else epoch)
        outcome = apply_batch(self.db, [command], at)
        assert outcome.committed
        return outcome.results[0]

    def ok(self, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
        result = self.apply(name, args, **kwargs)
        assert result.ok, (name, result.error_code, result.error)
        return result.value

    def acquire_lease(self, host_id: str, *, at: float = T0, lease_s: float = 60.0) -> int:
        value = self.ok("lease.acquire", {"host_id": host_id, "token_hash": token_hash(host_id), "pid": os.getpid(),
                                          "process_start_identity": "test", "lease_s": lease_s,
                                          "state_dir": str(self.path.parent)}, at=at)
        self.epoch = value["epoch"]
        return value["epoch"]

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        return self.db.connection().execute(sql, params).fetchone()

    def run_state(self, run_id: str) -> dict[str, Any]:
        cursor = self.db.connection().execute(
            "SELECT status, park_reason, steps, current_node, revision FROM run WHERE run_id = ?", (run_id,))
        return dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))

    def event_count(self, run_id: str) -> int:
        return self.one("SELECT count(*) FROM run_event WHERE run_id = ?", (run_id,))[0]


class Launch:
    """One claim of a run, and the worker messages its runner would send."""

    def __init__(self, store: Store, claimed: dict[str, Any], token: str) -> None:
        self.store = store
        self.run_id = claimed["run_id"]
        self.generation = claimed["generation"]
        self.launch_id = claimed["launch_id"]
        self.token_hash = token_hash(token)

    def message(self, message_id: str, op: str, payload: dict[str, Any] | None = None, *, at: float = T0,
                epoch: int | None = None, **override: Any) -> WriteResult:
        args = {"run_id": self.run_id, "generation": self.generation, "launch_id": self.launch_id,
                "token_hash": self.token_hash, "message_id": message_id, "op": op, "expected_revision": None,
                "payload": payload or {}, **override}
        return self.store.apply("worker.message", args, at=at, epoch=epoch)

    def exit(self, outcome: str = "crashed", *, at: float = T0, requeue: bool = False) -> dict[str, Any]:
        return self.store.ok("runner.exit", {
            "run_id": self.run_id, "generation": self.generation, "launch_id": self.launch_id,
            "token_hash": self.token_hash, "outcome": outcome, "exit_code": -9,
            "diagnostic": "worker closed its connection; killed by SIGKILL", "load_failure": None,
            "requeue": requeue}, at=at)


def claim(store: Store, name: str, *, at: float = T0, claim_lease_s: float = 30.0) -> Launch:
    claimed = store.ok("scheduler.claim_next", {"exclude": [], "token_hash": token_hash(f"token-{name}"),
                                                "launch_id": f"runner-{name}", "claim_lease_s": claim_lease_s},
                       at=at)
    assert claimed is not None, "nothing was eligible to claim"
    return Launch(store, claimed, f"token-{name}")


def finished(node_id: str, next_node: str, attempt_id: str) -> dict[str, Any]:
    return {"node_id": node_id, "attempt_id": attempt_id, "new_attempt": True, "outcome": "ok",
            "output": {"node": node_id}, "next": {"node": next_node}}


@pytest.fixture
def store(state_dir: Path) -> Iterator[Store]:
    opened = Store(state_dir / "state.db")
    try:
        yield opened
    finally:
        opened.db.close()


@pytest.fixture
def run_id(store: Store) -> str:
    store.acquire_lease("host-1")
    return store.ok("run.create", {"workflow": "w", "input": {"x": 1}})["run_id"]


def test_message_from_an_older_claim_is_claim_lost_and_changes_nothing(store, run_id) -> None:
    first = claim(store, "a")
    assert first.generation == 1
    ready = first.message("m1", "ready")
    assert ready.ok and ready.value["outcome"] == "accepted"
    assert ready.value["value"]["input"] == {"x": 1}
    assert first.message("m2", "node_finished", finished("a", "b", "att-a")).value["outcome"] == "accepted"
    # The worker dies after progress: its exit re-queues the run, and a new launch claims it.
    assert first.exit() == {"status": "queued", "settled": True, "children": []}
    second = claim(store, "b")
    assert second.generation == 2
    before = (store.run_state(run_id), store.event_count(run_id))

    stale = first.message("m3", "node_finished", finished("b", "c", "att-b"))
    assert (stale.ok, stale.error_code) == (False, "claim_lost")
    # Every part of the fence counts: generation, token, launch id.
    mixes = [
        {"generation": 1, "token_hash": second.token_hash, "launch_id": second.launch_id},
        {"generation": 2, "token_hash": first.token_hash, "launch_id": second.launch_id},
        {"generation": 2, "token_hash": second.token_hash, "launch_id": first.launch_id},
    ]
    for index, mix in enumerate(mixes):
        result = first.message(f"mix{index}", "node_finished", finished("b", "c", f"att-mix{index}"), **mix)
        assert (result.ok, result.error_code) == (False, "claim_lost"), mix
    assert (store.run_state(run_id), store.event_count(run_id)) == before
    assert store.one("SELECT count(*) FROM node_attempt WHERE run_id = ? AND node_id = 'b'", (run_id,))[0] == 0
    # A refused message is not recorded: it cannot be "replayed" into an answer later.
    assert store.one("SELECT count(*) FROM worker_message WHERE launch_id = ? AND message_id = 'm3'",
                     (first.launch_id,))[0] == 0

    # The old launch's late exit report does not settle the run the new launch owns.
    assert first.exit()["settled"] is False
    resumed = second.message("m1", "ready").value["value"]
    assert (resumed["current_node"], resumed["steps"], resumed["outputs"]) == ("b", 1, {"a": {"node": "a"}})
    assert store.run_state(run_id)["status"] == "running"


def test_expired_claim_is_claim_lost(store, run_id) -> None:
    launch = claim(store, "a", claim_lease_s=5)
    assert launch.message("m1", "ready", at=T0 + 1).ok
    renewed = store.ok("scheduler.renew_claims", {"claims": [{"run_id": run_id, "generation": 1,
                                                              "token_hash": launch.token_hash}],
                                                  "claim_lease_s": 5}, at=T0 + 6)
    assert renewed == {run_id: False}
    late = launch.message("m2", "node_finished", finished("a", "b", "att-a"), at=T0 + 6)
    assert (late.ok, late.error_code) == (False, "claim_lost")
    assert "expired" in late.error


def test_earlier_host_epoch_is_stale_and_its_claims_are_lost(store, run_id) -> None:
    old = claim(store, "a")
    assert old.message("m1", "ready").ok
    # The first host stops renewing; once its lease ran out a second host takes over.
    assert store.acquire_lease("host-2", at=T0 + 61) == 2
    stale = old.message("m2", "node_finished", finished("a", "b", "att-a"), at=T0 + 62, epoch=1)
    assert (stale.ok, stale.error_code) == (False, "stale_epoch")
    # Recovery: a host crash is not the run's fault, so it goes back to the queue.
    assert store.ok("host.recover", {}, at=T0 + 62) == {"runs": {run_id: "queued"}}
    assert store.one("SELECT status FROM run_worker WHERE launch_id = ?", (old.launch_id,))[0] == "orphaned"
    # Even stamped with the new epoch, the old launch's messages are refused.
    refused = old.message("m2", "node_finished", finished("a", "b", "att-a"), at=T0 + 62)
    assert (refused.ok, refused.error_code) == (False, "claim_lost")
    new = claim(store, "b", at=T0 + 63)
    assert new.generation == 2
    refused = old.message("m3", "node_finished", finished("a", "b", "att-a"), at=T0 + 63)
    assert (refused.ok, refused.error_code) == (False, "claim_lost")
    assert new.message("m1", "ready", at=T0 + 63).value["outcome"] == "accepted"


def test_replayed_message_returns_the_recorded_answer_and_applies_nothing_again(store, run_id) -> None:
    launch = claim(store, "a")
    first_ready = launch.message("m1", "ready")
    assert first_ready.ok and "replayed" not in first_ready.value
    state = store.run_state(run_id)
    replay = launch.message("m1", "ready")
    assert replay.ok
    assert replay.value == {**first_ready.value, "replayed": True}
    assert store.run_state(run_id) == state  # no second run_started, no revision bump

    payload = finished("a", "b", "att-a")
    done = launch.message("m2", "node_finished", payload)
    assert done.ok and done.value["outcome"] == "accepted"
    after = (store.run_state(run_id), store.event_count(run_id))
    again = launch.message("m2", "node_finished", json.loads(json.dumps(payload)))
    assert again.value == {**done.value, "replayed": True}
    assert (store.run_state(run_id), store.event_count(run_id)) == after
    assert after[0]["steps"] == 1
    assert store.one("SELECT count(*) FROM node_attempt WHERE run_id = ?", (run_id,))[0] == 1

    # Same message id, different payload: refused, nothing applied.
    other = launch.message("m2", "node_finished", finished("a", "c", "att-other"))
    assert (other.ok, other.error_code) == (False, "rejected")
    assert "m2" in other.error
    assert (store.run_state(run_id), store.event_count(run_id)) == after
    # A different generation under the same id is a different request as well.
    regenerated = launch.message("m2", "node_finished", payload, generation=7)
    assert (regenerated.ok, regenerated.error_code) == (False, "rejected")


def test_a_resend_after_the_launch_ended_is_claim_lost_and_applies_nothing(store, run_id) -> None:
    """A launch's message records last as long as its claim (they serve a resend within the
    launch): a runner that sends a message again after its claim moved on is told `claimLost`,
    and nothing is applied a second time."""
    first = claim(store, "a")
    assert first.message("m1", "ready").ok
    assert first.message("m2", "node_finished", finished("a", "b", "att-a")).ok
    first.exit()
    assert store.one("SELECT count(*) FROM worker_message WHERE launch_id = ?", (first.launch_id,))[0] == 0
    claim(store, "b")
    state, events = store.run_state(run_id), store.event_count(run_id)
    for message_id, op, payload in (("m1", "ready", None), ("m2", "node_finished", finished("a", "b", "att-a"))):
        replay = first.message(message_id, op, payload) if payload else first.message(message_id, op)
        assert (replay.ok, replay.error_code) == (False, "claim_lost")
    assert (store.run_state(run_id), store.event_count(run_id)) == (state, events)
    assert store.run_state(run_id)["status"] == "starting"


def test_renewals_keep_the_claim_of_a_node_longer_than_the_claim_lease(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, claim_lease_s=1.0)
    run_id = host.start_run(flow("four"), {"oracle": str(oracle.path), "sleeps": {"p2": 2.5}})["receipt"]["run_id"]
    view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"))
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"p1": 1, "p2": 1, "p3": 1, "p4": 1}
    assert [e["kind"] for e in events(state_dir, run_id)].count("run_claimed") == 1
