"""The SQL statements a trivial run costs the writer: a budget, counted, so that a statement added
back to the hot path fails here (counts, never timings).

A trivial run is a graph workflow of one compute node: started, claimed, run by a warm worker,
finished. Each run is measured alone (started after the previous one is done) as the growth of
the writer's own statement counter (`WriterStats.statements`, store/statement_count.py), and the
smallest of a few runs is compared with the budget: what else the host writes meanwhile (a lease
renewal, a claim renewal) can only add to a run's count, and the steady state of a run alone is
the same each time. BEGIN and COMMIT count: a run alone takes several transactions (its start, its
claim, its worker's messages), where a burst shares them among many runs (bench/throughput.py
prints that figure, bench/statements.py lists the statements by command).
"""

from __future__ import annotations

from pathlib import Path

from testsupport import HOST_DEFAULTS, both_engines, hosts_on_postgres, wait_for

TRIVIAL = '''\
from piwf_actors.workflows import compute, define_workflow

trivial = define_workflow(name="trivial1", start_at="a", nodes={"a": compute(run=lambda ctx: {"n": 1})}, edges=[])
'''

#: Statements of one trivial run alone, per engine (they were 31 and 37): what the commands send (the
#: run's start, its claim, the worker's ready, node and end messages), the lease read of each
#: transaction, the held-back rows' inserts, BEGIN and COMMIT; on PostgreSQL also the server clock
#: read once in each transaction and the lease check sent with its COMMIT (store/batch.py). (On
#: PostgreSQL it was 30 before the batch's events were numbered by their insert: no seq reads.)
BUDGET = {"sqlite": 24, "postgresql": 28}
RUNS = 5


@both_engines
def test_a_trivial_run_costs_at_most_its_budget_of_statements(hosts, state_dir: Path) -> None:
    flow = state_dir / "trivial.py"
    flow.write_text(TRIVIAL)
    # Long leases: no renewal falls into most runs' windows (one that does only adds to that run).
    host = hosts(state_dir, **{**HOST_DEFAULTS, "max_workers": 1, "warm_workers": 1, "lease_s": 60.0,
                               "claim_lease_s": 120.0, "schedules": False})
    assert host.wait_active(30)
    workflow = f"{flow}:trivial"
    host.wait_for_run(host.start_run(workflow, {"warm": True}).run_id, timeout=60)
    counts = []
    for i in range(RUNS):
        before = host.writer.stats().statements
        run_id = host.start_run(workflow, {"i": i}).run_id
        assert host.wait_for_run(run_id, timeout=60).status == "done"
        # The run's last writes (its end) are committed when it reads done; the writer has answered them.
        wait_for(lambda: host.writer.stats().queue_depth == 0, 10, "the writer's queue to empty")
        counts.append(host.writer.stats().statements - before)
    engine = "postgresql" if hosts_on_postgres() else "sqlite"
    assert min(counts) > 0, counts
    assert min(counts) <= BUDGET[engine], (
        f"a trivial run alone cost {min(counts)} SQL statements on {engine} (runs: {counts}), over its budget of "
        f"{BUDGET[engine]}: list them with bench/statements.py")
