"""Scheduling order: a run woken by an answer goes before fresh runs that queued earlier; and a
fresh run on an idle host is claimed in the very commit that starts it.

The order is: submissions waiting for validation, then runs woken by an
answer, a deadline or a resume, then fresh runs in creation order. With one
worker slot, a flood of fresh runs is queued while a run waits at a
checkpoint; once the checkpoint is answered, the woken run must be the next
one claimed, not the last.
"""

from __future__ import annotations

from wf import harness
from wf.harness import Oracle, edge_flow, wait_for, wait_for_oracle, wait_for_status

from piwf_actors.client import Client

guard = harness.guard

FLOOD = 20



def test_a_fresh_run_flood_does_not_delay_a_woken_run(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, max_workers=1, warm_workers=1)
    waiting = host.start_run(edge_flow("waits"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    view = wait_for_status(host, waiting, ("parked", "failed", "done"))
    assert view["park_reason"] == "waiting", view
    flood = [host.start_run(edge_flow("fresh"), {"oracle": str(oracle.path), "sleep": 0.2})["receipt"]["run_id"]
             for _ in range(FLOOD)]
    wait_for_oracle(oracle, "work")  # the first fresh run holds the only slot
    with Client(state_dir) as client:
        answer = client.request("checkpoint.answer", {"request_id": view["park_detail"], "input": "go"})
        assert answer.outcome == "accepted", answer
    assert wait_for_status(host, waiting, ("done", "failed"), timeout=30)["status"] == "done"
    order = [node for node, _run in oracle.entries()]
    fresh_before = order[:order.index("after")].count("work")
    # The fresh run holding the slot when the answer came finishes first (and at most one more
    # may have been claimed in the same instant); the other fresh runs wait for the woken run.
    assert fresh_before <= 2, f"{fresh_before} fresh runs went before the woken run: {order}"
    for run_id in flood:
        wait_for_status(host, run_id, ("done", "failed"), timeout=30)
    wait_for(lambda: oracle.counts()["work"] == FLOOD, 5, "every fresh run")


def test_a_fresh_run_on_an_idle_host_is_claimed_in_the_commit_that_starts_it(guard, state_dir) -> None:
    """The scheduler leaves its claim for idle slots with the writer (WriterQueue.offer), which applies
    it in the transaction of the next run.start: `run_created` and `run_claimed` share that
    transaction's `now`. (Without the standing claim the claim is a commit of its own, later.)
    The scheduler takes the claim back for a moment whenever it looks at the queue, so a start may
    meet it away: most of the starts, not every one, must be claimed at once."""
    host = guard.start_host(state_dir, max_workers=1, warm_workers=1)
    at_once = 0
    for _ in range(6):
        run_id = host.start_run(edge_flow("quick"))["receipt"]["run_id"]
        assert wait_for_status(host, run_id, ("done", "failed"))["status"] == "done"
        times = {event.kind: event.created_at for event in host.run_events(run_id)}
        at_once += times["run_created"] == times["run_claimed"]
    assert at_once >= 4, f"only {at_once} of 6 fresh runs were claimed in the commit that started them"
