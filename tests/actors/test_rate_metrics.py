"""The `piwf_runs_rate_held{limiter}` gauge of a real host's exporter: runs held by a workflow's rate
limit and runs parked before a node under a named limiter, per limiter, as the database has them."""

from __future__ import annotations

from pathlib import Path

import pytest
from actors.test_metrics import HOST, LOOPBACK_ANY_PORT, Scrape, metrics_url
from testsupport import rows, wait_for

pytestmark = pytest.mark.timeout(120, method="thread")

WORKFLOWS = '''
from piwf_actors.workflows import action, compute, define_workflow, rate_limit, rate_limiter

smtp = rate_limiter("smtp", 1, per_s=3600)

paced = define_workflow(name="paced", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[],
                        rate=rate_limit(1, per_s=3600))
mailer = define_workflow(name="mailer", start_at="m", nodes={"m": action(run=lambda ctx: 1, rate=smtp)}, edges=[])
'''


def test_the_gauge_counts_held_runs_per_limiter(hosts, state_dir: Path) -> None:
    flows = state_dir / "rate_flows.py"
    flows.write_text(WORKFLOWS)
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    paced = [host.start_run(f"{flows}:paced")["receipt"]["run_id"] for _ in range(3)]
    mailed = [host.start_run(f"{flows}:mailer")["receipt"]["run_id"] for _ in range(3)]
    assert host.wait_for_run(paced[0])["status"] == "done"

    def held() -> dict[str, int]:
        found = rows(state_dir, "SELECT held_by, count(*) AS n FROM run WHERE held_by IS NOT NULL GROUP BY held_by")
        return {row["held_by"]: row["n"] for row in found}

    wait_for(lambda: held() == {"rate_key:paced": 2, "rate_node:smtp": 2}, 30, lambda: f"the runs to be held: {held()}")
    assert sum(host.get_run(run_id)["status"] == "done" for run_id in mailed) == 1
    scrape = Scrape(metrics_url(host))
    assert scrape.value("piwf_runs_rate_held", limiter="paced") == 2
    assert scrape.value("piwf_runs_rate_held", limiter="smtp") == 2
