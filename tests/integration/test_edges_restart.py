"""Restart rules: a restart never repeats a side effect and makes at most one child.

`run.restart` is for a terminal run only (done, failed, cancelled), at the
given `expected_revision`; it is refused, naming the effect ids, while any
effect of the run is `applying` or `ambiguous`; and there is one restart per
(source run, revision): the child's id derives from them, so a second
restart is `adopted` with the same receipt whatever its idempotency key.

The shell node of `shell_effect` writes one oracle line per execution from
inside the shell, so "the effect ran once" is counted outside the database.
"""

from __future__ import annotations

import pytest
from wf import harness
from wf.harness import Oracle, flow, rows, wait_for, wait_for_oracle, wait_for_status

from piwf_actors.errors import Rejected

guard = harness.guard

SETTLED = ("done", "failed", "cancelled", "parked")


def _parked_on_ambiguous_effect(guard, state_dir, oracle: Oracle) -> tuple[object, str, str]:
    """A host dies (SIGKILL) inside the non-idempotent shell node; the next host parks the run."""
    script = guard.host_script(state_dir, workflow=flow("shell_effect"), input={"oracle": str(oracle.path)})
    run_id = script.value("RUN")
    wait_for_oracle(oracle, "s2", timeout=20)
    wait_for(lambda: rows(state_dir, "SELECT 1 FROM effect WHERE run_id = ? AND status = 'applying'", (run_id,)),
             10, "the shell's effect reservation")
    for process in script.descendants():
        guard.track(process.pid)
    script.sigkill()
    host = guard.start_host(state_dir)
    view = wait_for_status(host, run_id, SETTLED)
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    # On a shared database the new host starts as a standby until the killed host's lease runs out;
    # it parks the run while it takes over, a moment before it is active and takes writes.
    assert host.wait_active(30)
    return host, run_id, view["park_detail"]


def test_restart_of_a_run_parked_on_an_ambiguous_effect_is_refused(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host, run_id, effect_id = _parked_on_ambiguous_effect(guard, state_dir, oracle)
    view = host.get_run(run_id)
    with pytest.raises(Rejected) as refused:
        host.restart_run(run_id, expected_revision=view["revision"])
    assert "parked" in str(refused.value)
    assert rows(state_dir, "SELECT run_id FROM run WHERE parent_run_id = ?", (run_id,)) == []

    # Cancelling the parked run keeps its ambiguous effect; a restart is still refused, naming it.
    host.cancel_run(run_id)
    view = wait_for_status(host, run_id, ("cancelled",))
    assert [(e["effect_id"], e["status"]) for e in view["effects"]] == [(effect_id, "ambiguous")]
    with pytest.raises(Rejected) as refused:
        host.restart_run(run_id, expected_revision=view["revision"])
    assert effect_id in str(refused.value)
    assert rows(state_dir, "SELECT run_id FROM run WHERE parent_run_id = ?", (run_id,)) == []
    assert oracle.counts(run_id) == {"s1": 1, "s2": 1}
    assert oracle.counts()["s2"] == 1  # one line in the oracle: the command never ran again

    # Once a person settles the effect, the cancelled run may be restarted.
    host.resolve_effect(effect_id, "retry")
    view = host.get_run(run_id)
    child = host.restart_run(run_id, expected_revision=view["revision"])
    assert child["outcome"] == "accepted"
    assert host.get_run(child["receipt"]["run_id"])["parent_run_id"] == run_id


def test_restart_of_a_running_run_is_refused(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("long_shell"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "sh")
    view = host.get_run(run_id)
    assert view["status"] == "running", view
    with pytest.raises(Rejected) as refused:
        host.restart_run(run_id, expected_revision=view["revision"])
    assert "running" in str(refused.value)
    assert host.get_run(run_id)["status"] == "running"
    assert not host.get_run(run_id)["cancel_requested"]
    assert rows(state_dir, "SELECT run_id FROM run WHERE parent_run_id = ?", (run_id,)) == []
    host.cancel_run(run_id)
    wait_for_status(host, run_id, ("cancelled",))


def test_two_restarts_of_one_revision_make_one_child(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("four"), {"oracle": str(oracle.path), "sleep": 0})["receipt"]["run_id"]
    view = wait_for_status(host, run_id, ("done",))
    first = host.restart_run(run_id, expected_revision=view["revision"], client_id="c1", idempotency_key="k1")
    second = host.restart_run(run_id, expected_revision=view["revision"], client_id="c2", idempotency_key="k2")
    third = host.restart_run(run_id, expected_revision=view["revision"])
    assert first["outcome"] == "accepted"
    assert second["outcome"] == "adopted" and third["outcome"] == "adopted"
    assert second["receipt"] == first["receipt"] == third["receipt"]
    children = rows(state_dir, "SELECT run_id FROM run WHERE parent_run_id = ?", (run_id,))
    assert [c["run_id"] for c in children] == [first["receipt"]["run_id"]]
    wait_for_status(host, first["receipt"]["run_id"], ("done",))
    assert oracle.counts(first["receipt"]["run_id"]) == {"p1": 1, "p2": 1, "p3": 1, "p4": 1}
