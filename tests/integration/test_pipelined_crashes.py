"""Crashes in the middle of pipelined pure nodes (issue 11, item 1).

A worker sends a pure node's result and goes straight on to the next pure
node; the host commits the results in order; the worker settles every
outstanding answer before an effect. These tests kill real processes with
real SIGKILLs at every point of such a chain and count executions in an
oracle file outside the database (workflows in `wf/pipelined_flows.py`):

- a worker killed by each node of `c1..c6, act, c7, c8` in turn (and by the
  non-idempotent action before and after it acts): the run ends `done` with
  one succeeded attempt per node and a clean run's outputs; the action ran
  once, and when it ran every node before it was committed (it looked, in
  the database, read-only); only pure nodes that were not committed when
  the worker died ran again;
- hosts killed at several moments while four runs of a 21-node chain run:
  every run ends `done` (a run whose action was in flight is parked on the
  ambiguous effect and confirmed), nothing committed ran again, results are
  committed in chain order, the effect happened at most once per run;
- a pause of a fast pure chain with results in flight parks the run at a
  node boundary: nothing after it is committed, and after the resume every
  node has exactly one succeeded attempt.

A pure node may run more than once here, and that is allowed: its result
was sent but not committed when the process died (or the launch was
stopped), and the design's answer to that is to run it again after recovery
— it is pure, so a second execution changes nothing outside the run. What
must never happen is that a committed node runs again, a committed result
is lost, or an effect is repeated.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from testsupport import state_database_url
from wf import harness
from wf.harness import (
    WF,
    Oracle,
    alive,
    committed_nodes,
    events,
    rows,
    wait_for,
    wait_for_status,
)
from wf.pipelined_flows import CHAIN, LONG, PURE, clean_outputs

from piwf_actors.client import Client
from piwf_actors.worker.supervisor_link import PIPELINE_WINDOW

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")
PURE_BEFORE_ACT = CHAIN[:CHAIN.index("act")]


def pflow(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/pipelined_flows.py."""
    return f"{WF / 'pipelined_flows.py'}:{attr}"


def _files(state_dir: Path) -> dict[str, str]:
    return {"oracle": str(state_dir / "oracle"), "seen": str(state_dir / "seen"),
            "effects": str(state_dir / "effects"), "db": state_database_url(state_dir)}


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def _seen(state_dir: Path, run_id: str) -> list[set[str]]:
    """Per execution of the run's action: the nodes it saw committed when it was about to act."""
    found = []
    for line in _lines(state_dir / "seen"):
        run, _, nodes = line.partition(" ")
        if run == run_id:
            found.append(set(filter(None, nodes.split(","))))
    return found


def _effects(state_dir: Path, run_id: str) -> int:
    return _lines(state_dir / "effects").count(run_id)


def _succeeded_attempts(state_dir: Path, run_id: str) -> dict[str, int]:
    return {row["node_id"]: row["n"] for row in rows(
        state_dir, "SELECT node_id, count(*) AS n FROM node_attempt WHERE run_id = ? AND status = 'succeeded' "
                   "GROUP BY node_id", (run_id,))}


def _assert_finished_like_a_clean_run(view, state_dir: Path, order: list[str]) -> None:
    run_id = view["run_id"]
    assert view["status"] == "done", view
    assert _succeeded_attempts(state_dir, run_id) == dict.fromkeys(order, 1)
    outputs = {node["node_id"]: node["output"] for node in view["nodes"]}
    assert outputs == clean_outputs(order)
    assert view["output"] == clean_outputs(order)[order[-1]]
    finished = committed_nodes(state_dir, run_id)
    assert finished == order, f"results not committed once each, in chain order: {finished}"


# --- 1. a worker SIGKILLed by each node of the chain in turn ------------------------------------

CRASH_POINTS = [None, *PURE_BEFORE_ACT, "act", "act+", "c7", "c8"]


@pytest.mark.parametrize("crash_at", CRASH_POINTS, ids=lambda point: point or "clean")
def test_worker_sigkill_at_every_point_of_a_pipelined_chain(guard, state_dir, crash_at) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_input = {**_files(state_dir), "crash_at": crash_at}
    run_id = host.start_run(pflow("chain"), run_input)["receipt"]["run_id"]
    crashes = 0 if crash_at is None else 1

    parks: list[str] = []
    while True:
        view = wait_for_status(host, run_id, SETTLED)
        if view["status"] != "parked":
            break
        parks.append(view["park_reason"])
        assert len(parks) <= crashes, f"parked more often than it crashed: {parks}"
        if view["park_reason"] == "no_progress":
            assert "SIGKILL" in view["park_detail"], view
            assert host.resume_run(run_id)["outcome"] == "accepted"
        elif view["park_reason"] == "ambiguous_effect":
            (effect,) = [e for e in view["effects"] if e["effect_id"] == view["park_detail"]]
            assert (effect["node_id"], effect["status"]) == ("act", "ambiguous"), view["effects"]
            # The test plays the person: it confirms (with the output a clean run gives), so the
            # action must not run again. ("retry" would run it again, by the person's choice.)
            host.resolve_effect(effect["effect_id"], "confirm", output=clean_outputs(CHAIN)["act"])
        else:
            pytest.fail(f"parked for an unexpected reason: {view}")

    _assert_finished_like_a_clean_run(view, state_dir, CHAIN)
    trace = events(state_dir, run_id)
    settles = [e for e in trace if e["kind"] in ("run_requeued", "run_parked")]
    assert len(settles) == crashes, trace
    if crash_at is not None:
        exits = [r["exit_code"] for r in rows(state_dir, "SELECT exit_code FROM run_worker WHERE run_id = ?",
                                              (run_id,))]
        assert -signal.SIGKILL in exits, exits
    # Where a worker must park and where it must be requeued: a non-idempotent action in flight
    # parks the run whatever the progress; a crash after the action committed in the same
    # launch is progress; a crash in the first node of a launch is not. Between those, whether
    # pipelined results reached the database before the worker died decides (both are right).
    if crash_at in ("act", "act+"):
        assert parks == ["ambiguous_effect"]
    elif crash_at in ("c7", "c8"):
        assert parks == [] and settles[0]["payload"]["runner_outcome"] == "crashed", settles
    elif crash_at == "c1":
        assert parks == ["no_progress"]

    # The action ran once, and every node before it was committed when it did.
    counts = oracle.counts(run_id)
    assert counts["act"] == 1, counts
    assert _seen(state_dir, run_id) == [set(PURE_BEFORE_ACT)]
    # It acted once; when it died before acting, the person's confirmation stands for the effect.
    assert _effects(state_dir, run_id) == (0 if crash_at == "act" else 1)

    # Pure nodes ran again only if their result was not committed when the worker died: the
    # nodes after the last committed one, up to the crashing node itself. (Pipelined results in
    # flight at the SIGKILL are lost with the worker and the nodes simply run again.)
    committed_at_crash = [e["node_id"] for e in trace if e["kind"] == "node_finished"
                          and (not settles or e["seq"] < settles[0]["seq"])]
    assert committed_at_crash == CHAIN[:len(committed_at_crash)], trace
    rerun = set(CHAIN[len(committed_at_crash):CHAIN.index(crash_at) + 1]) if crash_at in CHAIN else set()
    rerun.discard("act")
    assert counts == {node: 2 if node in rerun else 1 for node in CHAIN}, (counts, committed_at_crash)
    assert max(counts.values()) <= 1 + crashes


# --- 2. hosts SIGKILLed while several pipelined chains run --------------------------------------

RUNS = 4


def _kill_host(script, state_dir: Path, oracle: Oracle, run_ids: list[str]) -> dict:
    """SIGKILL the host script's group (its workers lead their own sessions and live on for a
    moment); returns what was committed at that moment, read before anything else starts."""
    workers = script.descendants()
    assert script.sigkill() < 0
    committed = {run_id: committed_nodes(state_dir, run_id) for run_id in run_ids}
    for run_id, nodes in committed.items():
        assert nodes == LONG[:len(nodes)], f"{run_id}: results not committed in chain order: {nodes}"
    return {"committed": committed, "oracle_at": len(oracle.entries()), "workers": workers}


def test_host_sigkill_in_the_middle_of_pipelined_chains(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    run_input = {**_files(state_dir), "sleep": 0.01, "act_sleep": 0.5}
    script = guard.host_script(state_dir)
    epochs = [int(script.value("EPOCH"))]
    with Client(state_dir) as client:
        run_ids = [client.start(pflow("long_chain"), run_input)["run_id"] for _ in range(RUNS)]

    # Each entry: how the kill is chosen, and whether the next host waits for the orphaned
    # workers to notice their host is gone and exit on their own (an action in flight then
    # finishes its effect, so confirming it is the truth) or reaps them at once.
    kills = [
        ("early in the first chains", lambda start: len(oracle.entries()) >= start + 9, False),
        ("inside an action", lambda start: oracle.counts()["act"] >= 1, True),
        ("later in the chains", lambda start: len(oracle.entries()) >= start + 25, False),
    ]
    at_kills = []
    host = None
    for index, (what, ready, wait_for_orphans) in enumerate(kills):
        start = len(oracle.entries())
        wait_for(lambda ready=ready, start=start: ready(start), 30,
                 lambda what=what: f"the moment to kill the host ({what}); oracle: {oracle.entries()}")
        at_kill = _kill_host(script, state_dir, oracle, run_ids)
        # Runs whose action was in flight at this kill (started, its effect not written yet).
        at_kill["in_action"] = {run_id for run_id in run_ids
                                if oracle.counts(run_id)["act"] > _effects(state_dir, run_id)}
        at_kill["waited"] = wait_for_orphans
        at_kills.append(at_kill)
        for worker in at_kill["workers"]:
            guard.track(worker.pid)
        if wait_for_orphans:
            wait_for(lambda at_kill=at_kill: not any(alive(w) for w in at_kill["workers"]), 20,
                     "the orphaned workers to exit on their own")
        if index < len(kills) - 1:
            script = guard.host_script(state_dir)
            epochs.append(int(script.value("EPOCH")))
        else:  # the last host runs in this process and finishes the runs
            host = guard.start_successor(state_dir)
            epochs.append(host.epoch)
        assert epochs[-1] > epochs[-2]
        wait_for(lambda at_kill=at_kill: not any(alive(w) for w in at_kill["workers"]), 10,
                 "the old host's workers to be reaped")
    unfinished = [run_id for run_id in run_ids if at_kills[-1]["committed"][run_id] != LONG]
    assert unfinished, "every run finished before the last kill: the kills landed nowhere"

    # The test plays the person for ambiguous effects: it confirms, with a clean run's output.
    ambiguous: set[str] = set()
    views = {}
    for run_id in run_ids:
        while True:
            view = wait_for_status(host, run_id, SETTLED, timeout=60)
            if view["status"] != "parked":
                break
            assert view["park_reason"] == "ambiguous_effect", view
            assert run_id not in ambiguous, f"{run_id} parked on an effect twice"
            ambiguous.add(run_id)
            (effect,) = [e for e in view["effects"] if e["effect_id"] == view["park_detail"]]
            assert (effect["node_id"], effect["status"]) == ("act", "ambiguous"), view["effects"]
            host.resolve_effect(effect["effect_id"], "confirm", output=clean_outputs(LONG)["act"])
        views[run_id] = view

    for run_id in run_ids:
        _assert_finished_like_a_clean_run(views[run_id], state_dir, LONG)
        counts = oracle.counts(run_id)
        # The action started at most once (an in-flight one is confirmed, never run again), its
        # effect happened at most once, and every time it started, all ten nodes before it were
        # committed.
        assert counts["act"] <= 1 and _effects(state_dir, run_id) <= counts["act"], (run_id, counts)
        if run_id not in ambiguous:
            assert counts["act"] == 1 and _effects(state_dir, run_id) == 1, (run_id, counts)
        assert _seen(state_dir, run_id) == [set(LONG[:LONG.index("act")])] * counts["act"]
        # A node committed before a kill never ran again after it; a pure node ran at most once
        # per host that ran it.
        for at_kill in at_kills:
            later = [node for node, run in oracle.entries()[at_kill["oracle_at"]:] if run == run_id]
            again = set(later) & set(at_kill["committed"][run_id])
            assert not again, f"{run_id}: {again} ran again after being committed ({oracle.nodes(run_id)})"
        assert max(counts.values()) <= 1 + len(kills), counts
    parked = [run_id for run_id in run_ids if any(e["kind"] == "run_parked" for e in events(state_dir, run_id))]
    assert sorted(parked) == sorted(ambiguous)
    # The kill inside an action lands there: that run is parked on its effect, and the orphaned
    # worker, left to finish, had applied it (so the confirmation was the truth). A later kill that
    # reaps its orphans at once may land inside an action too (on a loaded machine): that effect
    # may or may not have happened before the reaping.
    assert ambiguous, "no kill landed inside an action"
    reaped_in_action = set().union(*(k["in_action"] for k in at_kills if not k["waited"]))
    for run_id in ambiguous - reaped_in_action:
        assert _effects(state_dir, run_id) == 1, run_id


# --- 3. a pause of a fast pure chain with results in flight -------------------------------------


def test_pause_of_a_fast_pipelined_chain_lands_at_a_boundary(guard, state_dir) -> None:
    """test_run_control_pause.py pauses chains of slow nodes, where hardly any result is in flight;
    here the nodes are fast, so several results are outstanding when the pause arrives."""
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(pflow("pure_chain"), {**_files(state_dir), "sleep": 0.005})["receipt"]["run_id"]
    wait_for(lambda: len(oracle.nodes(run_id)) >= 8, 20, "eight nodes to run")
    assert host.pause_run(run_id)["receipt"]["status"] == "pausing"
    view = wait_for_status(host, run_id, SETTLED)
    assert (view["status"], view["park_reason"]) == ("parked", "paused"), view
    wait_for(lambda: host.status()["scheduler"]["active"] == [], 5, "the runner of the paused run to retire")

    trace = events(state_dir, run_id)
    parked_at = next(e["seq"] for e in trace if e["kind"] == "run_parked")
    assert not [e for e in trace if e["seq"] > parked_at], "something was committed after the park"
    committed = committed_nodes(state_dir, run_id)
    assert committed and committed == PURE[:len(committed)], committed
    assert len(committed) < len(PURE), "the run finished before the pause landed"
    assert set(_succeeded_attempts(state_dir, run_id)) == set(committed)
    ran_at_park = oracle.nodes(run_id)
    # Results sent but not yet committed when the pause landed were refused: those nodes ran for
    # nothing, and no more of them than the pipeline window allows.
    uncommitted = ran_at_park[len(committed):]
    assert uncommitted == PURE[len(committed):len(committed) + len(uncommitted)], ran_at_park
    assert len(uncommitted) <= PIPELINE_WINDOW, ran_at_park

    assert host.resume_run(run_id)["receipt"]["status"] == "queued"
    view = wait_for_status(host, run_id, SETTLED)
    _assert_finished_like_a_clean_run(view, state_dir, PURE)
    counts = oracle.counts(run_id)
    assert counts == Counter({node: 2 if node in uncommitted else 1 for node in PURE}), counts
