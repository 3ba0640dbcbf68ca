"""The scheduler's launch records and its one launch-or-settle path, against a real writer on a
temporary SQLite store: a claimed launch that cannot reach its runner is settled with the command
`unlaunched_exit` builds (a run back to the queue or parked, a reconcile due again at once); and the
scheduler's own safety net settles a claim whose runner left without a recorded exit."""

from __future__ import annotations

from typing import Any

import pytest
from testsupport import wait_for
from writer_store import WriterStore

from piwf_actors.actors.base import Ping
from piwf_actors.actors.launches import reconcile_launch, run_launch, unlaunched_exit
from piwf_actors.actors.scheduler import Scheduler
from piwf_actors.board import HostBoard, Section
from piwf_actors.canonical import token_hash
from piwf_actors.store.requests import WriteResult

REF = {"manager": "builds", "key": "repo-a"}


@pytest.mark.parametrize(("stopping", "status"), [(True, "queued"), (False, "parked")])
def test_a_run_that_could_not_be_launched_is_settled_launch_failed(writer_store: WriterStore, stopping: bool,
                                                                    status: str) -> None:
    token = "launch-token"
    claimed = writer_store.claimed_run("r1", claim_token_hash=token_hash(token))
    launch = run_launch(claimed, token)
    assert (launch.run_id, launch.generation, launch.launch_id, launch.kind) == ("r1", 1, "re-r1", "run")
    name, args = unlaunched_exit(launch, stopping=stopping)
    assert name == "runner.exit" and args["outcome"] == "launchFailed" and args["requeue"] is stopping
    assert writer_store.writer.call(name, args)["settled"]
    # A stopping host hands the run back; otherwise it made no progress since its launch and parks.
    assert writer_store.status("r1") == status
    assert writer_store.reader.one("SELECT count(*) FROM run_claim")[0] == 0


def test_a_reconcile_that_could_not_be_launched_is_due_again_at_once(writer_store: WriterStore) -> None:
    writer_store.writer.call("resource.apply", {**REF, "spec": {"n": 1}, "initial_status": {"phase": "new"},
                                         "project_path": "/p", "manager_path": "/p/.piwf/resource-managers/builds.py",
                                         "manager_digest": "d1"})
    claimed = writer_store.writer.call("reconcile.claim", {"token_hash": "d" * 64, "launch_id": "re-1",
                                                    "claim_lease_s": 120})
    launch = reconcile_launch(claimed, worker_pid=4242)
    assert (launch.kind, launch.fence, launch.worker_pid) == ("reconcile", REF, 4242)
    name, args = unlaunched_exit(launch, stopping=False)
    assert name == "reconcile.exit" and args["outcome"] == "launchFailed" and args["requeue"] is True
    assert writer_store.writer.call(name, args)["settled"]
    row = writer_store.reader.one("SELECT claim_token_hash, available_at, consecutive_errors FROM resource "
                           "WHERE manager = ? AND resource_key = ?", (REF["manager"], REF["key"]))
    assert row == (None, writer_store.now(), 0)  # not the manager's error: no back-off


def _start(writer_store: WriterStore, board: HostBoard) -> Any:
    # No slots: only the ticks run (renewals and the safety net every claim_lease_s / 3 = 0.1 s).
    scheduler = Scheduler.start(writer_store.writer, writer_store.database, max_workers=0, supervisor=None, claim_lease_s=0.3,
                                tick_s=0.05, board=board)
    assert scheduler.ask(Ping(), timeout=10)  # on_start has run (it published the board section)
    return scheduler


def test_a_claim_whose_runner_left_is_settled_once_its_lease_ran_out(writer_store: WriterStore) -> None:
    writer_store.claimed_run("r1", claim_lease_s=60.0)
    writer_store.worker("r1", "ready", {})
    board = HostBoard()
    scheduler = _start(writer_store, board)
    try:
        assert board.snapshot(Section.SCHEDULER)["active"] == []
        writer_store.time += 61  # the writer's clock: the claim's lease has run out, and no slot serves it
        wait_for(lambda: writer_store.status("r1") == "parked", 10, "the abandoned claim to be settled")
        assert writer_store.reader.one("SELECT park_reason FROM run WHERE run_id = 'r1'")[0] == "no_progress"
    finally:
        scheduler.stop()


def test_answers_the_scheduler_did_not_ask_for_are_ignored(writer_store: WriterStore) -> None:
    scheduler = _start(writer_store, HostBoard())
    try:
        for token in ("claim", "renew", "settle", None, "scheduler.claim_next:0123456789ab"):
            scheduler.ask(WriteResult(True, [], correlation_id=token))
        assert scheduler.is_alive()
    finally:
        scheduler.stop()
