"""Host SIGKILL mid-run: a later host on the same state directory finishes the run.

A host runs in a subprocess of its own (`tests/host_script.py`, its own session)
and starts a six-node run (`six`: compute nodes and idempotent actions) whose
nodes log every execution to an oracle file outside the database. Node k
hangs on its first execution, so when k lines are in the oracle the kill lands
inside node k. The test SIGKILLs the host's process group — its worker leads
a session of its own and survives, still executing node k — reads what was
committed before the kill straight from the database, starts a new host on
the same directory and waits for the run to end `done`. (On its own state.db
the new host is active at once; on PostgreSQL it is a standby until the dead
host's short lease ran out: `ProcessGuard.start_successor`.)

Counted: every node ran; every node committed before the kill ran exactly
once; only the node in flight at a kill ran twice; the new host's epoch is
higher; the old host's worker processes are gone (reaped by pid +
create_time) and their records are settled. Variants: two kills in one run
(three hosts), and a kill during a non-idempotent shell node, whose orphaned
command the next host reaps before parking the run on the ambiguous effect.
"""

from __future__ import annotations

import logging
from pathlib import Path

import psutil
import pytest
from wf import harness
from wf.harness import (
    Oracle,
    alive,
    committed_nodes,
    events,
    flow,
    rows,
    wait_for,
    wait_for_oracle,
    wait_for_status,
)

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]
IDEMPOTENT_ACTIONS = {"n2", "n3", "n5"}


def _kill_host_at(guard, state_dir: Path, oracle: Oracle, node_id: str, *, workflow_input=None,
                  workflow: str = "six", before_kill=None):
    """Start a host script (with a run when `workflow_input` is given), wait until `node_id`
    executes, SIGKILL the host; returns (run_id or None, epoch, old worker processes)."""
    script = guard.host_script(state_dir, workflow=flow(workflow) if workflow_input else None, input=workflow_input)
    epoch = int(script.value("EPOCH"))
    run_id = script.value("RUN") if workflow_input else None
    wait_for_oracle(oracle, node_id, timeout=20)
    if before_kill is not None:
        before_kill(run_id)
    workers = script.descendants()
    assert workers, "the host script has no worker processes"
    assert script.sigkill() < 0
    return run_id, epoch, workers


def _assert_executions(oracle: Oracle, run_id: str, kills: list[tuple[set[str], int]]) -> None:
    """`kills` holds, per kill, the nodes committed before it and the oracle length at it."""
    nodes = oracle.nodes(run_id)
    counts = oracle.counts(run_id)
    assert set(counts) == set(NODES), f"not every node ran: {nodes}"
    for committed, seen in kills:
        rerun = [node for node in nodes[seen:] if node in committed]
        assert not rerun, f"{rerun} ran again although committed before the kill (oracle: {nodes})"
    assert all(count <= 2 for count in counts.values()), counts
    twice = [node for node, count in counts.items() if count == 2]
    assert len(twice) <= len(kills), f"more nodes ran twice than there were kills: {counts}"


def _assert_old_workers_settled(state_dir: Path, run_id: str, old_epochs: set[int]) -> None:
    workers = rows(state_dir, "SELECT host_epoch, status, outcome FROM run_worker WHERE run_id = ?", (run_id,))
    old = [w for w in workers if w["host_epoch"] in old_epochs]
    assert old and all(w["status"] == "orphaned" for w in old), workers
    marks = ",".join("?" * len(old_epochs))
    unreleased = rows(state_dir, "SELECT pid, kind, host_epoch FROM child_process WHERE released_at IS NULL "
                                 f"AND host_epoch IN ({marks})", tuple(old_epochs))
    assert unreleased == []


@pytest.mark.parametrize("k", [1, 3, 5])
def test_host_sigkill_mid_run_resumes_from_last_committed_node(guard, state_dir, k, caplog) -> None:
    caplog.set_level(logging.INFO, logger="piwf_actors.actors.host")
    oracle = Oracle(state_dir / "oracle")
    hang = f"n{k}"
    run_id, old_epoch, old_workers = _kill_host_at(
        guard, state_dir, oracle, hang, workflow_input={"oracle": str(oracle.path), "hang": [hang], "sleep": 0.05})

    # What was committed before the kill, read from the database before any new host starts.
    committed_before = set(committed_nodes(state_dir, run_id))
    assert committed_before == set(NODES[:k - 1])
    assert oracle.nodes(run_id) == NODES[:k]
    seen_at_kill = len(oracle.nodes(run_id))
    # The worker executing node k outlived its host (own session): a new host must reap it.
    in_flight = [w for w in old_workers if alive(w)]
    assert in_flight, "expected the hanging worker to outlive the SIGKILLed host"

    host = guard.start_successor(state_dir)
    assert host.epoch > old_epoch
    # Reaping happens before the scheduler starts (inside start_host, or at a standby's takeover).
    wait_for(lambda: not any(alive(w) for w in old_workers), 5,
             lambda: f"old workers {[w.pid for w in old_workers if alive(w)]} to be reaped")
    reaped = " ".join(r.getMessage() for r in caplog.records if "reaped orphan" in r.getMessage())
    for worker in in_flight:
        assert f"reaped orphan worker pid {worker.pid}" in reaped

    view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"))
    assert view["status"] == "done", view
    assert view["output"]["node"] == "n6"
    _assert_executions(oracle, run_id, [(committed_before, seen_at_kill)])
    assert oracle.counts(run_id)[hang] == 2  # the node in flight at the kill is simply run again
    assert {n["node_id"]: n["status"] for n in view["nodes"]} == dict.fromkeys(NODES, "succeeded")

    trace = events(state_dir, run_id)
    requeued = [e for e in trace if e["kind"] == "run_requeued"]
    assert requeued and requeued[0]["payload"]["runner_outcome"] == "orphaned"
    assert not any(e["kind"] == "run_parked" for e in trace)
    if hang in IDEMPOTENT_ACTIONS:
        # The idempotent effect left `applying` was abandoned, and the re-run applied a new one.
        effects = [(e["node_id"], e["status"], e["resolution"]) for e in view["effects"] if e["node_id"] == hang]
        assert effects == [(hang, "failed", "abandoned"), (hang, "applied", None)]
    _assert_old_workers_settled(state_dir, run_id, {old_epoch})


def test_two_host_kills_in_one_run(guard, state_dir) -> None:
    """Host 1 dies inside n2, host 2 (which only recovers) dies inside n4, host 3 finishes."""
    oracle = Oracle(state_dir / "oracle")
    run_id, epoch1, workers1 = _kill_host_at(
        guard, state_dir, oracle, "n2", workflow_input={"oracle": str(oracle.path), "hang": ["n2", "n4"]})
    committed_first = set(committed_nodes(state_dir, run_id))
    assert committed_first == {"n1"}
    seen_first = len(oracle.nodes(run_id))

    script2 = guard.host_script(state_dir)
    epoch2 = int(script2.value("EPOCH"))
    assert epoch2 > epoch1
    wait_for_oracle(oracle, "n4", timeout=20)
    assert not any(alive(w) for w in workers1)
    workers2 = script2.descendants()
    assert script2.sigkill() < 0
    committed_second = set(committed_nodes(state_dir, run_id))
    assert committed_second == {"n1", "n2", "n3"}
    seen_second = len(oracle.nodes(run_id))

    host = guard.start_successor(state_dir)
    assert host.epoch > epoch2
    wait_for(lambda: not any(alive(w) for w in workers2), 5, "the second host's workers to be reaped")
    view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"))
    assert view["status"] == "done", view
    _assert_executions(oracle, run_id, [(committed_first, seen_first), (committed_second, seen_second)])
    assert oracle.counts(run_id) == {"n1": 1, "n2": 2, "n3": 1, "n4": 2, "n5": 1, "n6": 1}
    _assert_old_workers_settled(state_dir, run_id, {epoch1, epoch2})


def test_host_sigkill_during_a_shell_node_parks_ambiguous_and_reaps_the_command(guard, state_dir) -> None:
    """The worker and its shell command lead sessions of their own, so both outlive the host; the
    next host reaps both (pid + create_time), parks the run on the ambiguous effect, and a person's
    confirmation lets it finish without running the command again."""
    oracle = Oracle(state_dir / "oracle")
    commands: list[psutil.Process] = []

    def registered(run_id: str) -> None:
        found = wait_for(lambda: rows(state_dir, "SELECT pid FROM child_process WHERE run_id = ? AND kind = 'shell' "
                                                 "AND released_at IS NULL", (run_id,)), 10, "the shell registration")
        shell = psutil.Process(found[0]["pid"])
        commands.extend([shell, *wait_for(lambda: shell.children(recursive=True), 5, "the shell's sleep")])

    run_id, old_epoch, old_workers = _kill_host_at(
        guard, state_dir, oracle, "s2", workflow="shell_effect", workflow_input={"oracle": str(oracle.path)},
        before_kill=registered)
    for process in commands:
        guard.track(process.pid)
    assert sorted(p.name() for p in commands) == ["sh", "sleep"]
    assert all(alive(p) for p in commands), "the command should outlive its host"

    host = guard.start_successor(state_dir)
    assert host.epoch > old_epoch
    wait_for(lambda: not any(alive(p) for p in commands + old_workers), 5, "the orphaned worker and command to go")
    view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"))
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    effect_id = view["park_detail"]
    assert [(e["effect_id"], e["node_id"], e["status"]) for e in view["effects"]] == [(effect_id, "s2", "ambiguous")]
    assert rows(state_dir, "SELECT pid FROM child_process WHERE released_at IS NULL AND host_epoch = ?",
                (old_epoch,)) == []

    output = {"stdout": "it did happen\n", "stderr": "", "exit_code": 0, "duration_ms": 5}
    host.resolve_effect(effect_id, "confirm", output=output)
    view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"))
    assert view["status"] == "done", view
    assert {n["node_id"]: n["output"] for n in view["nodes"]}["s2"] == output
    assert oracle.counts(run_id) == {"s1": 1, "s2": 1, "s3": 1}
