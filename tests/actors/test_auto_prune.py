from __future__ import annotations

import time

from testsupport import both_engines

from piwf_actors import HostConfig, start_host

WORKFLOW = '''
from piwf_actors.workflows import compute, define_workflow
quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": True})}, edges=[])
'''


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_idle_host_prunes_runs_past_retention(state_dir, tmp_path):
    (tmp_path / "quick.py").write_text(WORKFLOW)
    # Retention of ~0.2 s and a check every 0.3 s: the finished run is pruned once the host is idle.
    config = HostConfig(state_dir=state_dir, max_workers=1, retention_days=0.2 / 86400, prune_every_s=0.3)
    with start_host(config) as host:
        run_id = host.start_run(str(tmp_path / "quick.py"))["receipt"]["run_id"]
        assert host.wait_for_run(run_id, timeout=20)["status"] == "done"
        deadline = time.monotonic() + 15
        while host.get_run(run_id) is not None:
            assert time.monotonic() < deadline, "run was not pruned"
            time.sleep(0.1)
        assert host.list_runs() == []


def test_retention_zero_keeps_runs(state_dir, tmp_path):
    (tmp_path / "quick.py").write_text(WORKFLOW)
    config = HostConfig(state_dir=state_dir, max_workers=1, retention_days=0, prune_every_s=0.2)
    with start_host(config) as host:
        run_id = host.start_run(str(tmp_path / "quick.py"))["receipt"]["run_id"]
        assert host.wait_for_run(run_id, timeout=20)["status"] == "done"
        # Several prune intervals pass while idle; with retention 0 nothing is removed.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert host.get_run(run_id) is not None
            time.sleep(0.1)
