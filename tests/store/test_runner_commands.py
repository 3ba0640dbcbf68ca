"""Runner hosts in the store (docs/runners.md), on both engines (`database`): the runner lease, the
fence of a command that carries a runner identity, the claim command shared with the active host,
the worker-message fence by the claim's owner, and the active host's recovery of a dead runner."""

from __future__ import annotations

import os
from typing import Any

import pytest
from test_store_regressions import TOKEN, Store

from piwf_actors.store.batch import apply_batch
from piwf_actors.store.engines.postgresql import POSTGRESQL
from piwf_actors.store.engines.sqlite import SQLITE
from piwf_actors.store.requests import WriteCommand


class Runners(Store):
    """A store with the active host's lease (`Store`) and commands sent as runner hosts."""

    def as_runner(self, runner_id: str, epoch: int, name: str, args: dict[str, Any], now: float = 1000.0):
        return apply_batch(self.db, [WriteCommand(name, args, runner_id=runner_id, runner_lease_epoch=epoch)],
                           now).results[0]

    def runner_lease(self, runner_id: str, now: float = 1000.0, lease_s: float = 10.0) -> int:
        return self.call("runner_lease.acquire", {"runner_id": runner_id, "token_hash": "r" * 64, "pid": os.getpid(),
                                                  "machine_id": "m", "max_workers": 2, "lease_s": lease_s}, now)["epoch"]

    def queue(self, count: int) -> list[str]:
        return [self.call("run.create", {"workflow": "w", "run_id": f"run_{next(self.ids):04d}"})["run_id"]
                for _ in range(count)]

    def claim_as(self, runner_id: str | None, epoch: int | None, slots: int, now: float = 1000.0) -> list[dict]:
        args = {"slots": [{"token_hash": TOKEN, "launch_id": f"re{next(self.ids)}"} for _ in range(slots)],
                "claim_lease_s": 60}
        if runner_id is None:
            return self.call("scheduler.claim_next", args, now)
        return self.as_runner(runner_id, epoch, "scheduler.claim_next", args, now).unwrap()

    def row(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        return self.db.execute_sql(sql, params).fetchone()


@pytest.fixture
def store(database):
    s = Runners(database)
    yield s
    s.db.close()


def test_the_runner_lease_grows_its_epoch_refuses_a_second_holder_and_renews_until_it_runs_out(store) -> None:
    assert store.runner_lease("r1", now=1000.0) == 1
    again = store.raw("runner_lease.acquire", {"runner_id": "r1", "token_hash": "x" * 64, "pid": 1, "max_workers": 1,
                                               "lease_s": 10}, now=1005.0)
    assert again.error_code == "runner_already_running"
    renewed = store.call("runner_lease.renew", {"runner_id": "r1", "epoch": 1, "token_hash": "r" * 64, "lease_s": 10},
                         now=1008.0)
    assert renewed["expires_at"] == 1018.0
    late = store.raw("runner_lease.renew", {"runner_id": "r1", "epoch": 1, "token_hash": "r" * 64, "lease_s": 10},
                     now=1018.0)
    assert late.error_code == "runner_lease_lost"
    # Once it has run out, the same id starts again at the next epoch.
    assert store.runner_lease("r1", now=1019.0) == 2


def test_a_runner_command_is_fenced_by_its_runner_lease_not_by_the_host_lease(store) -> None:
    epoch = store.runner_lease("r1", now=1000.0)
    store.queue(1)
    note = {"run_id": "run_0001"}
    assert store.as_runner("r1", epoch, "run.append_note", note, now=1001.0).ok
    assert store.as_runner("r1", epoch + 1, "run.append_note", note, now=1001.0).error_code == "runner_lease_lost"
    assert store.as_runner("r2", 1, "run.append_note", note, now=1001.0).error_code == "runner_lease_lost"
    assert store.as_runner("r1", epoch, "run.append_note", note, now=1010.0).error_code == "lease_expired"
    store.call("runner_lease.release", {"runner_id": "r1", "epoch": epoch, "token_hash": "r" * 64}, now=1002.0)
    assert store.as_runner("r1", epoch, "run.append_note", note, now=1003.0).error_code == "runner_lease_lost"


def test_a_runner_whose_lease_ran_out_mid_batch_commits_nothing(store) -> None:
    """The second reading of the clock before COMMIT covers a runner paused inside its batch."""
    epoch = store.runner_lease("r1", now=1000.0, lease_s=10.0)
    store.queue(1)
    readings = iter([1001.0, 1011.0])  # the fence, then just before COMMIT
    command = WriteCommand("run.append_note", {"run_id": "run_0001"}, runner_id="r1", runner_lease_epoch=epoch)
    outcome = apply_batch(store.db, [command], 1001.0, clock=lambda: next(readings, 1011.0))
    if store.db.connection().engine is POSTGRESQL:
        return  # there the database's clock is read instead (test_postgres covers the host's case)
    assert not outcome.committed and outcome.results[0].error_code == "lease_expired"
    assert store.row("SELECT count(*) FROM run_event WHERE run_id = 'run_0001' AND kind = 'note'") == (0,)


def test_the_claim_command_is_shared_and_records_who_claimed(store) -> None:
    store.runner_lease("r1")
    store.queue(5)
    by_host = store.claim_as(None, None, 2)
    by_runner = store.claim_as("r1", 1, 2)
    assert [c["run_id"] for c in by_host] == ["run_0001", "run_0002"]
    assert [c["run_id"] for c in by_runner] == ["run_0003", "run_0004"]
    rows = store.db.execute_sql("SELECT run_id, runner_id, runner_lease_epoch FROM run_claim ORDER BY run_id").fetchall()
    assert [tuple(r) for r in rows] == [("run_0001", None, None), ("run_0002", None, None), ("run_0003", "r1", 1),
                                        ("run_0004", "r1", 1)]
    assert [tuple(r) for r in store.db.execute_sql(
        "SELECT runner_id FROM run_worker ORDER BY run_id").fetchall()] == [(None,), (None,), ("r1",), ("r1",)]
    # The queue read locks what it takes on PostgreSQL and skips what others locked; SQLite needs no clause.
    assert POSTGRESQL.skip_locked == " FOR UPDATE SKIP LOCKED" and SQLITE.skip_locked == ""


def test_worker_messages_renewals_and_exits_check_the_claims_owner(store) -> None:
    store.runner_lease("r1")
    store.queue(2)
    (mine,) = store.claim_as("r1", 1, 1)
    (hosts,) = store.claim_as(None, None, 1)
    message = {"run_id": mine["run_id"], "launch_id": mine["launch_id"], "message_id": "m1",
               "generation": mine["generation"], "token_hash": TOKEN, "op": "ready", "payload": {}}
    # The active host cannot speak for the runner's claim, nor another runner lease.
    refused = store.raw("worker.message", message)
    assert refused.error_code == "claim_lost"
    store.runner_lease("r2")
    assert store.as_runner("r2", 1, "worker.message", message).error_code == "claim_lost"
    answer = store.as_runner("r1", 1, "worker.message", message).unwrap()
    assert answer["outcome"] == "accepted"
    renew = {"claims": [{"run_id": mine["run_id"], "generation": mine["generation"], "token_hash": TOKEN},
                        {"run_id": hosts["run_id"], "generation": hosts["generation"], "token_hash": TOKEN}],
             "claim_lease_s": 60}
    assert store.as_runner("r1", 1, "scheduler.renew_claims", renew).unwrap() == {mine["run_id"]: True,
                                                                                 hosts["run_id"]: False}
    assert store.call("scheduler.renew_claims", renew) == {mine["run_id"]: False, hosts["run_id"]: True}
    exit_args = {"run_id": mine["run_id"], "generation": mine["generation"], "launch_id": mine["launch_id"],
                 "token_hash": TOKEN, "outcome": "crashed"}
    assert store.call("runner.exit", exit_args)["settled"] is False
    assert store.as_runner("r1", 1, "runner.exit", exit_args).unwrap()["settled"] is True


def test_the_active_host_recovers_a_dead_runners_claims_and_children_and_leaves_live_ones_alone(store) -> None:
    store.runner_lease("r1", now=1000.0, lease_s=10.0)
    store.runner_lease("r2", now=1000.0, lease_s=100.0)
    store.queue(2)
    (dead,) = store.claim_as("r1", 1, 1)
    (live,) = store.claim_as("r2", 1, 1)
    child = {"pid": 4242, "create_time": 1.5, "kind": "worker", "run_id": dead["run_id"], "machine_id": "m"}
    assert store.as_runner("r1", 1, "child.register", child).ok
    # host.recover (a new active host's start) touches no runner's claim.
    assert store.call("host.recover", {}, now=1005.0) == {"runs": {}}
    assert store.call("runners.recover", {}, now=1005.0)["runs"] == {}  # r1's lease still runs
    recovered = store.call("runners.recover", {}, now=1011.0)
    assert recovered["runs"] == {dead["run_id"]: "queued"}  # a runner host's death is not the run's fault
    assert recovered["runners"] == ["r1#1"]
    assert [(c["pid"], c["runner_id"]) for c in recovered["children"]] == [(4242, "r1")]
    assert store.row("SELECT runner_id FROM run_claim WHERE run_id = ?", (live["run_id"],)) == ("r2",)
    assert store.row("SELECT status FROM run_worker WHERE worker_id = ?", (dead["launch_id"],)) == ("orphaned",)
    # A runner started again under the same id: its old epoch's leftovers are recovered all the same.
    assert store.runner_lease("r2", now=1200.0) == 2
    assert store.call("runners.recover", {}, now=1200.0)["runs"] == {live["run_id"]: "queued"}
    assert store.as_runner("r2", 2, "runners.recover", {}, now=1200.0).error_code == "rejected"  # the host's only


def test_a_requeued_run_resumes_elsewhere_and_records_who_executed_each_attempt(store) -> None:
    store.runner_lease("r1", now=1000.0, lease_s=10.0)
    store.queue(1)
    (claim,) = store.claim_as("r1", 1, 1, now=1000.0)
    base = {"run_id": claim["run_id"], "launch_id": claim["launch_id"], "generation": claim["generation"],
            "token_hash": TOKEN}
    store.as_runner("r1", 1, "worker.message", {**base, "message_id": "m1", "op": "ready", "payload": {}},
                    now=1001.0).unwrap()
    done = store.as_runner("r1", 1, "worker.message", {
        **base, "message_id": "m2", "op": "node_finished", "expected_revision": None,
        "payload": {"node_id": "a", "attempt_no": 1, "attempt_id": "att_1", "outcome": "ok", "output": 1, "new_attempt": True,
                    "next": {"node": "b"}}}, now=1002.0).unwrap()
    assert done["outcome"] == "accepted", done
    assert store.call("runners.recover", {}, now=1011.0)["runs"] == {claim["run_id"]: "queued"}
    (again,) = store.claim_as(None, None, 1, now=1012.0)
    assert again["run_id"] == claim["run_id"]
    assert store.row("SELECT executed_by FROM node_attempt WHERE attempt_id = 'att_1'") == ("r1",)
    again_base = {"run_id": again["run_id"], "launch_id": again["launch_id"],
                  "generation": again["generation"], "token_hash": TOKEN}
    store.call("worker.message", {**again_base, "message_id": "m3", "op": "ready", "payload": {}}, now=1013.0)
    finished = store.call("worker.message", {
        **again_base, "message_id": "m4", "op": "node_finished", "expected_revision": None,
        "payload": {"node_id": "b", "attempt_no": 1, "attempt_id": "att_2", "outcome": "ok", "output": 2, "new_attempt": True,
                    "next": {"finish": True}}}, now=1014.0)
    assert finished["outcome"] == "accepted", finished
    assert store.row("SELECT executed_by FROM node_attempt WHERE attempt_id = 'att_2'") == ("h",)


def test_wire_round_trip_of_a_runner_command() -> None:
    command = WriteCommand("x", {}, None, "c", "r1", 3)
    assert WriteCommand.from_wire(command.to_wire()) == command
