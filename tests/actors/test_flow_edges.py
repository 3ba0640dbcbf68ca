"""Edges of waits and limits on a real (embedded) host with real worker processes: a concurrency key
that raises, a node's message across a crash of its worker, a restart of changed code that adds a
limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.errors import Rejected

FLOWS = '''
import os, pathlib, signal, sys
from piwf_actors.workflows import action, compute, define_workflow, edge, limit, wait_message

exits = define_workflow(name="exits", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[],
                        concurrency=limit(1, key=lambda input: sys.exit(3)))

listener = define_workflow(name="listener", start_at="w", nodes={"w": wait_message("go")}, edges=[])


def _send_then_die_once(ctx):
    receipt = ctx.send_message(ctx.input["to"], "go", {"from": ctx.run_id})
    marker = pathlib.Path(ctx.input["marker"])
    if not marker.exists():
        marker.write_text("killed once")
        os.kill(os.getpid(), signal.SIGKILL)  # after the message, before the node's result
    return receipt


sender = define_workflow(name="sender", start_at="s", nodes={
    "s": action(run=_send_then_die_once, idempotent=True),
}, edges=[])
'''

LIMITED = '''
from piwf_actors.workflows import compute, define_workflow, limit

plain = define_workflow(name="plain", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[]{limit})
'''


def _project(tmp_path: Path, name: str, source: str) -> Path:
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True, exist_ok=True)
    (project / ".piwf" / "workflows" / f"{name}.py").write_text(source)
    return project


def test_a_concurrency_key_that_exits_refuses_the_start_and_the_host_goes_on(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "flows", FLOWS)
    host = hosts(state_dir)
    for _ in range(2):  # the first resolves the file, the second finds it cached
        with pytest.raises(Rejected, match="concurrency key raised SystemExit"):
            host.start_run("exits", project_path=str(project))
    run_id = host.start_run("listener", project_path=str(project)).run_id
    wait_for(lambda: host.get_run(run_id).waits, 30, "the host still runs workflows")


def test_a_message_a_node_sent_before_its_worker_died_is_sent_once(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "flows", FLOWS)
    host = hosts(state_dir)
    listener = host.start_run("listener", project_path=str(project)).run_id
    wait_for(lambda: host.get_run(listener).waits, 30, "the listener waits")
    host.pause_run(listener)  # so the message stays in its mailbox, where it can be counted
    sender = host.start_run("sender", {"to": listener, "marker": str(tmp_path / "marker")},
                            project_path=str(project)).run_id
    parked = host.wait_for_run(sender, statuses=("done", "failed", "cancelled", "parked"), timeout=60)
    # Its worker died before the run made a step: it parks, and a person retries it.
    assert (parked.status, parked.park_reason) == ("parked", "no_progress"), parked
    assert (tmp_path / "marker").exists()
    host.resume_run(sender)
    done = host.wait_for_run(sender, timeout=60)
    assert done.status == "done", done
    assert host.get_run(listener).mailbox == {"go": 1}


def test_a_restart_of_changed_code_takes_the_limit_of_the_new_code(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "plain", LIMITED.replace("{limit}", ""))
    host = hosts(state_dir)
    run_id = host.start_run("plain", project_path=str(project)).run_id
    done = host.wait_for_run(run_id, timeout=30)
    assert done.extra.get("concurrency_key") is None
    _project(tmp_path, "plain", LIMITED.replace("{limit}", ", concurrency=limit(3)"))
    restarted = host.restart_run(run_id, expected_revision=done.revision).run_id
    assert host.get_run(restarted).extra["concurrency_key"] == "plain"
