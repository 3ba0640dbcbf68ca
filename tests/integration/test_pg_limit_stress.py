"""A concurrency limit that holds while three hosts race for its slots on PostgreSQL.

A limit is checked in the claim transaction (DESIGN.md "Waiting, children and flow control" 4):
a claim counts the key's holders and takes a run if there is room. Two hosts claiming at the same
instant both count before either commits; only SERIALIZABLE isolation makes one of them fail and
count again (under READ COMMITTED or REPEATABLE READ both see room and both claim: write skew).

So the race must happen for the test to mean anything: an active host and two runner hosts, three
warm workers each (real `bin/piwf-host` processes), share one database and 150 runs of `limited`
(wf/flow_flows.py) of 10 ms each, all under one key of `limit(2)`. Nine workers keep claiming while
two runs execute, so the claims of the three hosts keep meeting. Checks, from the oracle file the
node appends to (outside the database): never more than two executions at once; both slots used;
each run's node executed once; at least two hosts executed runs; and the race did happen — the hosts'
writers retried transactions that conflicted.

With the writer's transactions downgraded to READ COMMITTED, three runs execute at once in every
run of this test; test_flow_crashes.py's gentler test of the same limit (one host and a runner,
50 runs of 100 ms) does not notice.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from testsupport import database_rows, wait_for
from wf import harness
from wf.flow_flows import LIMIT
from wf.harness import WF
from wf.piwf_hosts import max_overlap, oracle_lines, piwf_host

from piwf_actors.client import Client

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

HOSTS = ("host-a", "runner-1", "runner-2")
WORKERS = 3
RUNS = 150
NODE_S = 0.01


def _start_runs(client: Client, oracle: Path) -> list[str]:
    """RUNS starts of `limited`, one key; a start whose batch was given up for conflicts between the
    hosts (`unavailable`) is sent again under its idempotency key, as a client should."""
    run_ids = []
    for index in range(RUNS):
        deadline = time.monotonic() + 30
        while True:
            answer = client.request("run.start", {"workflow": f"{WF / 'flow_flows.py'}:limited",
                                                  "input": {"oracle": str(oracle), "cluster": "eu", "sleep": NODE_S}},
                                    idempotency_key=f"start-{index}")
            if answer.ok:
                run_ids.append(answer.receipt["run_id"])
                break
            if answer.outcome != "unavailable" or time.monotonic() > deadline:
                pytest.fail(f"run.start {index}: {answer.outcome}: {answer.error}")
    return run_ids


def _writer_stats(state_dir: Path) -> dict[str, Any]:
    with Client(state_dir, timeout=10) as client:
        return client.status()["writer"]


# A stress run of three hosts (soak-like, on PostgreSQL only): `make test-slow` (run by CI too) runs it.
@pytest.mark.slow
def test_a_limit_holds_while_three_hosts_race_for_its_slots(guard, state_dir, pg_database) -> None:
    url = pg_database.url
    oracle = state_dir / "oracle"
    scripts = {}
    for name in HOSTS:
        (state_dir / name).mkdir()
        role = () if name == "host-a" else ("--role", "runner")
        scripts[name] = piwf_host(guard, state_dir / name, *role, "--host-id", name, workers=WORKERS,
                                  database=url, lease_s=10)
    # Every host's workers warm before the first start: the runs take a second or two in all, and a
    # host still spawning its workers then (a loaded machine) would miss the race the test is about.
    def warm(name: str) -> bool:
        with Client(state_dir / name, timeout=10) as client:
            return client.status()["workers"]["idle"] >= WORKERS
    for name in HOSTS:
        wait_for(lambda name=name: warm(name), 60, f"{name}'s {WORKERS} workers to be warm", poll=0.1)
    with Client(state_dir / "host-a") as client:
        run_ids = _start_runs(client, oracle)

    def finished() -> int:
        for name, script in scripts.items():
            if script.proc.poll() is not None:
                pytest.fail(f"{name} exited with {script.proc.returncode}:\n{script.log()[-5000:]}")
        return database_rows(url, "SELECT count(*) AS n FROM run WHERE status IN ('done', 'failed', 'cancelled')")[0]["n"]

    wait_for(lambda: finished() == RUNS, 120, lambda: f"every run to finish ({finished()} of {RUNS})", poll=0.1)
    assert database_rows(url, "SELECT DISTINCT status FROM run") == [{"status": "done"}]

    records = oracle_lines(oracle)
    starts = {run_id: float(at) for word, run_id, at, _pid in records if word == "start"}
    ends = {run_id: float(at) for word, run_id, at, _pid in records if word == "end"}
    assert sorted(starts) == sorted(ends) == sorted(run_ids)
    assert len(records) == 2 * RUNS, "a run's node executed twice"
    most = max_overlap([(starts[run_id], ends[run_id]) for run_id in run_ids])
    assert most <= LIMIT, f"{most} runs of limited[cluster=eu] executed at once (limit {LIMIT})"
    assert most == LIMIT, f"the limit's slots were never both used ({most})"
    executors = Counter(row["executed_by"] for row in database_rows(
        url, "SELECT executed_by FROM node_attempt WHERE status = 'succeeded'"))
    # Hosts raced for the slots: at least two of them executed runs (on a loaded machine the third's
    # claims may all lose, which is no fault of the limit's).
    assert len(executors) >= 2 and set(executors) <= set(HOSTS), executors
    # The race happened: the hosts' claim transactions met, and the losers were run again.
    retries = {name: _writer_stats(state_dir / name)["conflict_retries"] for name in HOSTS}
    assert sum(retries.values()) > 0, f"no transaction of one host conflicted with another's: {retries}"
