"""`cli.live.WatchLines`: successive watch views → the plain lines `piwf watch` prints off a terminal
(pure: no host). One line per change of a run, oldest run first; a run's node lines come before its end."""

from __future__ import annotations

from piwf_actors.cli.live import WatchLines


def _run(run_id: str, status: str, **extra: object) -> dict[str, object]:
    return {"run_id": run_id, "workflow": "wf", "status": status, **extra}


def words(lines: list[str]) -> list[list[str]]:
    return [line.split()[1:] for line in lines]  # without the time


def test_runs_views_print_each_run_once_per_change_oldest_first() -> None:
    lines = WatchLines()
    first = words(lines.runs({"runs": [_run("run_b", "queued"), _run("run_a", "done")]}))  # newest first
    assert first == [["run_a", "wf", "done"], ["run_b", "wf", "queued"]]
    assert lines.runs({"runs": [_run("run_b", "queued"), _run("run_a", "done")]}) == []  # nothing changed
    later = words(lines.runs({"runs": [_run("run_b", "parked", park_reason="waiting"), _run("run_a", "done")]}))
    assert later == [["run_b", "wf", "parked", "(waiting)"]]
    failed = words(lines.runs({"runs": [_run("run_b", "failed", error_code="node_failed")]}))
    assert failed == [["run_b", "wf", "failed", "(node_failed)"]]


def test_a_run_view_prints_its_status_changes_and_node_starts_and_ends() -> None:
    lines = WatchLines()
    running = {**_run("run_a", "running"), "nodes": [{"node_id": "n", "attempt_id": "a1", "status": "running"}]}
    assert words(lines.run(running)) == [["run_a", "wf", "running"], ["node", "n", "started"]]
    done = {**_run("run_a", "done"), "nodes": [{"node_id": "n", "attempt_id": "a1", "status": "succeeded"}]}
    assert words(lines.run(done)) == [["node", "n", "succeeded"], ["run_a", "wf", "done"]]
    assert words(lines.run(None)) == [["the", "run", "is", "gone", "(pruned)"]]


def test_a_long_watch_remembers_only_the_runs_of_the_last_view() -> None:
    lines = WatchLines()
    for n in range(200):  # one new run a view; the view holds the newest three
        view = {"runs": [_run(f"run_{m:03d}", "done") for m in range(n, max(-1, n - 3), -1)]}
        assert words(lines.runs(view)) == [[f"run_{n:03d}", "wf", "done"]]  # the others were printed before
    assert len(lines._states) == 3  # not 200: a finished run that left the view is forgotten
    assert lines.runs(None) == [] and len(lines._states) == 3  # no view (host gone): nothing forgotten
