"""`piwf_runs_resumed_total` (issue 22, edge 8): a run begun under an earlier host (or before this
host's exporter started) and taken up again by a worker here is counted once as resumed, so every run
that `piwf_runs_finished_total` counts after running here was counted as started or as resumed;
`piwf_runs_started_total` keeps meaning first starts only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_metrics import HOST, LOOPBACK_ANY_PORT, WORKFLOWS, Scrape, metrics_url, start

from piwf_actors.metrics import RunFollower
from piwf_actors.store.metrics_queries import RunRow


@pytest.fixture
def flows(state_dir: Path) -> Path:
    path = state_dir / "metrics_flows.py"
    path.write_text(WORKFLOWS)
    return path


def test_the_follower_counts_an_inherited_run_taken_up_again_as_resumed_once() -> None:
    follower = RunFollower()
    # Run 1 began before the baseline (one launch); run 2 was queued and never began.
    follower.baseline(2, [RunRow(1, "parked", 1), RunRow(2, "queued", 0)])
    changes = follower.step([RunRow(1, "parked", 1), RunRow(2, "running", 1)], max_rowid=2)
    assert (changes.started, changes.resumed) == (1, 0)  # 2 began here; 1 still waits
    changes = follower.step([RunRow(1, "running", 2), RunRow(2, "parked", 1)], max_rowid=2)
    assert (changes.started, changes.resumed) == (0, 1)  # a worker took 1 up again
    # Launched again (an answer, a crash): neither a start nor a second resume.
    changes = follower.step([RunRow(1, "done", 3), RunRow(2, "running", 2), RunRow(3, "running", 2)], max_rowid=3)
    assert (changes.started, changes.resumed, changes.finished) == (1, 0, {"done": 1})


def test_a_run_answered_after_a_restart_is_counted_resumed_and_finished(hosts, state_dir, flows) -> None:
    first = hosts(state_dir, **HOST)
    run_id = start(flows, first, "ask")
    first.wait_for_run(run_id, ("parked",), timeout=30)
    first.stop("restart")

    second = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    [request] = second.pending_interactions()
    second.answer_checkpoint(request.request_id, {"fine": True})
    assert second.wait_for_run(run_id, timeout=30).status == "done"
    scrape = Scrape(metrics_url(second))
    assert scrape.value("piwf_runs_finished_total", status="done") == 1
    assert scrape.value("piwf_runs_started_total") == 0  # it began under the first host
    assert scrape.value("piwf_runs_resumed_total") == 1
    # A run that begins here is a start, not a resume.
    fresh = start(flows, second, "ok")
    assert second.wait_for_run(fresh, timeout=30).status == "done"
    again = Scrape(metrics_url(second))
    assert (again.value("piwf_runs_started_total"), again.value("piwf_runs_resumed_total")) == (1, 1)


def test_promtool_accepts_the_exposition(hosts, state_dir, flows) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install -y prometheus)")
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    assert host.wait_for_run(start(flows, host, "ok"), timeout=30).status == "done"
    import urllib.request

    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(metrics_url(host), timeout=10) as reply:
        text = reply.read()
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_watched_runs_launches_are_counted_from_its_new_events_only(hosts, state_dir, flows) -> None:
    from piwf_actors.store import metrics_queries as mq
    from piwf_actors.store.reader import StoreReader

    host = hosts(state_dir, **HOST)
    run_id = start(flows, host, "ask")
    host.wait_for_run(run_id, ("parked",), timeout=30)
    reader = StoreReader(host.paths.database)
    try:
        [row] = mq.live_runs(reader)
        assert row.launches == 1 and row.last_seq > 0
        assert mq.runs_by_rowid(reader, {row.rowid: (row.last_seq, 1)}) == [row]  # nothing new: the same
        # Counted from a seq: what lies above it, plus what was counted by then (here: from the start).
        assert mq.runs_by_rowid(reader, {row.rowid: (0, 0)})[0].launches == 1
        assert mq.runs_by_rowid(reader, {row.rowid: (row.last_seq, 5)})[0].launches == 5
    finally:
        reader.close()
