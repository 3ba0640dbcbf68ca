"""The "Waiting, fan-out and flow control" examples of docs/workflows.md run as written, on a real host.

The review example's one-minute cool-off and one-day timeout are the page's too: the test kit
(`piwf_actors.testing`) skips its host's timer clock over them instead of waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from test_readme_python import python_block, write_workflow
from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.testing import Piwf


def test_batch_example_counts_every_file_in_child_runs_then_asks(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "files", python_block('name="batch"'))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for n in range(9):
        (inbox / f"f{n}.txt").write_text("line\n" * (n + 1))
    host = hosts(state_dir, max_workers=4)

    run_id = host.start_run("batch", {"dir": str(inbox)}, project_path=str(project)).run_id
    # It parks twice: for its children, then for the checkpoint.
    wait_for(lambda: host.pending_interactions(), 60, lambda: str(host.get_run(run_id)))
    parked = host.get_run(run_id)
    assert parked.status == "parked", parked
    assert parked.node("total").output == {"files": 9, "lines": sum(range(1, 10))}
    assert [item["file"] for item in parked.node("each").output] == sorted(str(p) for p in inbox.glob("*.txt"))
    assert parked.children["total"] == 9 and parked.children["by_status"] == {"done": 9}
    assert {child.workflow for child in host.list_children(run_id)} == {"count-lines"}
    [ok] = host.pending_interactions()
    assert ok.contract["prompt"] == "45 lines in all: publish?"
    host.answer_checkpoint(ok.request_id, {"publish": True})
    assert host.wait_for_run(run_id, timeout=30).status == "done"


def test_review_example_reminds_after_its_timeout_and_takes_the_verdict_message(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "reminders", python_block('name="review"'))
    with Piwf(project=project) as piwf:
        run_id = piwf.start("review", {"pr": 1234})
        [cool_off] = piwf.wait_parked(run_id, "waiting").waits
        # A minute of timer time, less the real time this machine took to get here (at most that minute).
        assert cool_off["kind"] == "sleep" and 0 < cool_off["remaining_s"] <= 60
        piwf.skip(60)
        # Then a day without a review: the answer wait times out, the run reminds and waits again.
        piwf.wait_until(run_id, lambda view: [w["kind"] for w in view.waits] == ["message"], "to wait for the review")
        piwf.skip(86400)
        piwf.wait_for_event(run_id, "node_finished", "remind")
        again = piwf.wait_until(run_id, lambda view: view.waits and view.node("remind") is not None,
                                "to wait again")
        assert again.node("remind").output == {"message": "nobody has reviewed 1234 for a day"}
        receipt = piwf.host.send_message(run_id, "review", {"verdict": "approved"}, client_id="t",
                                         idempotency_key="v1")
        done = piwf.wait(run_id)
        assert done.status == "done", done
        assert done.output == {"pr": 1234, "verdict": "approved"}
        assert receipt.status in ("consumed", "pending")
        assert piwf.host.send_message(run_id, "review", {"verdict": "approved"}, client_id="t",
                                      idempotency_key="v1").outcome == "adopted"


def test_ci_gate_example_deploys_on_green(hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "ci", python_block('name="ci-gate"'))
    host = hosts(state_dir)

    green = host.start_run("ci-gate", project_path=str(project)).run_id
    red = host.start_run("ci-gate", project_path=str(project)).run_id
    wait_for(lambda: host.get_run(green).waits and host.get_run(red).waits, 30, "both runs wait for a message")
    host.send_message(green, "ci", {"status": "green"}, client_id="ci", idempotency_key="build-4711")
    host.send_message(red, "ci", {"status": "red"}, client_id="ci", idempotency_key="build-4712")
    assert host.wait_for_run(green, timeout=30).node("deploy").output["stdout"] == "deploying\n"
    assert host.wait_for_run(red, timeout=30).output == {"stopped": {"status": "red"}}


def test_deploy_example_runs_at_most_two_per_cluster(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "deploys", python_block('name="deploy"'))
    host = hosts(state_dir, max_workers=4)

    eu = [host.start_run("deploy", {"cluster": "eu"}, project_path=str(project)).run_id for _ in range(3)]
    us = host.start_run("deploy", {"cluster": "us"}, project_path=str(project)).run_id
    reasons = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # One statement, so one snapshot: the statuses of all of them at one instant.
        statuses = {row.run_id: row.status for row in host.list_runs(limit=10) if row.run_id in eu}
        assert sum(status in ("starting", "running") for status in statuses.values()) <= 2, statuses
        queued = [run_id for run_id, status in statuses.items() if status == "queued"]
        reasons |= {reason for run_id in queued if (reason := host.get_run(run_id).queue_reason)}
        if all(status == "done" for status in statuses.values()):
            break
        time.sleep(0.02)
    assert reasons == {"waiting for a concurrency slot of deploy[eu] (2 of 2 in use)"}
    assert all(host.get_run(run_id).status == "done" for run_id in eu)
    assert host.wait_for_run(us, timeout=30).status == "done"  # another key: never held by eu's
