"""A deadline that passes while the waiting run is paused settles the request, but
the run stays parked (paused) until someone resumes it."""

from __future__ import annotations

import time
from pathlib import Path

from piwf_actors import HostConfig, start_host

RELEASE = str(Path(__file__).resolve().parents[2] / "examples" / "workflows" / "release.py") + ":release_quick"


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_deadline_on_a_paused_run_keeps_it_parked_until_resume(state_dir):
    with start_host(HostConfig(state_dir=state_dir, max_workers=1)) as host:
        run_id = host.start_run(RELEASE, {"version": "3.0"})["receipt"]["run_id"]
        _wait(lambda: (host.get_run(run_id) or {}).get("park_reason") == "waiting")
        host.pause_run(run_id)
        # The 2 s deadline passes while paused: parked as paused, not resumed.
        view = _wait(lambda: (v := host.get_run(run_id)) and v["park_reason"] == "paused" and v)
        assert view["status"] == "parked"
        kinds = [e["kind"] for e in host.run_events(run_id)]
        assert "interaction_settled" in kinds and "run_requeued" not in kinds
        time.sleep(0.5)  # a few scheduler ticks: still parked
        assert host.get_run(run_id)["status"] == "parked"
        host.resume_run(run_id)
        done = host.wait_for_run(run_id, timeout=30)
        assert done["status"] == "done"
        assert done["output"] == {"status": "stopped"}  # the default response's branch
