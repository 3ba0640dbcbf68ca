"""`piwf send`, `start --priority`, `list --parent` and what `piwf show` says of waits, children and
limits, as real commands against a real host (its own short state directory, the `hosts` fixture).

The workflows are written into a temp project's `.piwf/workflows/flows.py` and started by name
from there. Every wait polls the host with a deadline. The last tests render hand-made run.get
views with a fixed-width capture console and a fixed clock (the `… and N more` of a large fan-out,
each kind of wait in words).
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ok_json, piwf, run_view, short_dir, wait_status, wait_until
from rich.console import Console
from testsupport import hosts_on_postgres

from piwf_actors import HostHandle
from piwf_actors.cli import render
from piwf_actors.client import Client
from piwf_actors.timefmt import clock_time
from piwf_actors.workflows.graph_run import wait_words

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge, limit, map_workflow, wait_message

    listener = define_workflow(name="listener", start_at="w", nodes={
        "w": wait_message("go", timeout_s=600),
        "done": compute(run=lambda ctx: {"got": ctx.outputs["w"]})}, edges=[edge("w", "done")])

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": True})}, edges=[])

    double = define_workflow(name="double", start_at="a", nodes={"a": compute(run=lambda ctx: {"x": ctx.input * 2})},
                             edges=[])

    fan = define_workflow(name="fan", start_at="m", nodes={
        "m": map_workflow(double, items=lambda ctx: list(range(ctx.input)))}, edges=[])

    # Four children that each wait for a message, two at a time: two park, two stay queued.
    held = define_workflow(name="held", start_at="m", nodes={
        "m": map_workflow(listener, items=lambda ctx: list(range(4)), max_parallel=2)}, edges=[])

    # One run per cluster at a time; it holds its slot while it waits for its message.
    gate = define_workflow(name="gate", start_at="w", nodes={"w": wait_message("go", timeout_s=600)}, edges=[],
                           concurrency=limit(1, key=lambda input: {"cluster": input["cluster"]}))
''')


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    path = short_dir("pfl-")
    (path / ".piwf" / "workflows").mkdir(parents=True)
    (path / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(hosts: Callable[..., HostHandle], state_dir: Path) -> HostHandle:
    return hosts(state_dir, max_workers=4)


def cli(state: Path, project: Path, *args: str) -> Any:
    """`piwf ARGS` run in the project directory (so `start NAME` finds its workflows)."""
    return piwf(state, *args, cwd=project)


def start(state: Path, project: Path, workflow: str, *args: str) -> str:
    return str(ok_json(cli(state, project, "start", workflow, *args, "--json"))["run_id"])


def waiting_on(state: Path, run_id: str, kind: str) -> dict[str, Any]:
    """The run's view once it is parked on an open wait of `kind`."""
    def ready() -> dict[str, Any] | None:
        view = run_view(state, run_id)
        return view if view["status"] == "parked" and any(w["kind"] == kind for w in view["waits"]) else None

    return wait_until(ready, 30, f"run {run_id} to park on a {kind} wait")


def message_events(state: Path, run_id: str) -> list[dict[str, Any]]:
    with Client(state) as client:
        events = client.request("run.events", {"after": 0}, run_id=run_id).receipt["events"]
    return [event for event in events if event["kind"] == "message_received"]


# --- piwf send ---------------------------------------------------------------------------------------


def test_send_wakes_a_waiting_run_and_a_resend_under_its_key_is_the_same_message(
        host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = start(state_dir, project, "listener")
    wait = waiting_on(state_dir, run_id, "message")["waits"][0]
    assert wait["topic"] == "go"

    sent = cli(state_dir, project, "send", run_id[:16], "go", "--value", '{"a": 1}', "--key", "deploy-42")
    assert sent.returncode == 0, (sent.stdout, sent.stderr)
    match = re.fullmatch(rf"sent (msg_\w+) to {run_id} on go \(seq 1\): consumed by {wait['wait_id']}\n", sent.stdout)
    assert match, sent.stdout
    message_id = match.group(1)
    view = wait_status(state_dir, run_id, ("done",))
    assert view["output"] == {"got": {"a": 1}}

    again = cli(state_dir, project, "send", run_id, "go", "--value", '{"a": 1}', "--key", "deploy-42")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert again.stdout.startswith(f"already sent {message_id} to {run_id} on go (seq 1)"), again.stdout
    assert "no new message was sent" in again.stderr
    receipt = ok_json(cli(state_dir, project, "send", run_id, "go", "--value", '{"a": 1}', "--key", "deploy-42",
                          "--json"))
    assert receipt["message_id"] == message_id and receipt["seq"] == 1
    assert [event["payload"]["message_id"] for event in message_events(state_dir, run_id)] == [message_id]
    assert run_view(state_dir, run_id)["mailbox"] == {}

    # The same key for another payload is a conflict, not a message.
    other = cli(state_dir, project, "send", run_id, "go", "--value", '{"a": 2}', "--key", "deploy-42")
    assert other.returncode == 1 and other.stderr.startswith("piwf: conflict: "), other.stderr


def test_send_before_the_wait_stays_in_the_mailbox(host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = start(state_dir, project, "listener")
    waiting_on(state_dir, run_id, "message")
    sent = cli(state_dir, project, "send", run_id, "later")  # no --value: null
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.endswith(" on later (seq 1): pending in the mailbox\n"), sent.stdout
    shown = cli(state_dir, project, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"mailbox\s+later: 1 pending", shown.stdout), shown.stdout
    assert re.search(r"wait\s+w: waiting for a message on 'go' \(timeout \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ "
                     r"\(in (9m[0-5]\ds|10m00s)\)\)", shown.stdout), shown.stdout


def test_send_to_a_finished_run_is_refused_on_one_line(host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = start(state_dir, project, "quick")
    wait_status(state_dir, run_id, ("done",))
    refused = cli(state_dir, project, "send", run_id, "go", "--value", "1")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("piwf: rejected: ") and "is done" in refused.stderr, refused.stderr
    assert message_events(state_dir, run_id) == []


# --- children ------------------------------------------------------------------------------------------


def test_list_parent_lists_exactly_the_children_of_a_map(host: HostHandle, state_dir: Path, project: Path) -> None:
    first = start(state_dir, project, "fan", "--input", "3")
    second = start(state_dir, project, "fan", "--input", "2")
    for run_id in (first, second):
        wait_status(state_dir, run_id, ("done",))
    children = {child["run_id"] for child in run_view(state_dir, first)["children"]["runs"]}
    assert len(children) == 3
    listed = ok_json(cli(state_dir, project, "list", "--parent", first[:16], "--json"))["runs"]
    assert {run["run_id"] for run in listed} == children
    assert {run["workflow"] for run in listed} == {"double"}
    table = cli(state_dir, project, "list", "--parent", first)
    assert table.returncode == 0, table.stderr
    assert table.stdout.count("double") == 3 and "fan" not in table.stdout, table.stdout
    if not hosts_on_postgres():  # (the CLI's process reads the state directory's own file)
        host.stop("test: list --parent reads the state database without a host too")
        offline = ok_json(cli(state_dir, project, "list", "--parent", first, "--json"))["runs"]
        assert {run["run_id"] for run in offline} == children


def test_show_of_a_fan_out_lists_its_children(host: HostHandle, state_dir: Path, project: Path) -> None:
    parent = start(state_dir, project, "held")

    def settled() -> dict[str, Any] | None:
        view = run_view(state_dir, parent)
        children = view.get("children") or {}
        return view if children.get("by_status") == {"parked": 2, "queued": 2} else None

    view = wait_until(settled, 30, f"run {parent} to have two parked and two queued children")
    shown = cli(state_dir, project, "show", parent[:16])
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "children (4: parked 2  queued 2)" in out, out
    assert "waiting for children: 4 of 4 open" in out, out
    rows = [line for line in out.splitlines() if "listener" in line]
    assert len(rows) == 4, out
    assert sum("parked" in row for row in rows) == 2 and sum("queued" in row for row in rows) == 2, out

    queued = next(child for child in view["children"]["runs"] if child["status"] == "queued")
    child = cli(state_dir, project, "show", queued["run_id"])
    assert child.returncode == 0, child.stderr
    assert f"child {queued['child_index']} of {parent} node m" in child.stdout, child.stdout
    assert f"waiting for a slot of fan-out m of {parent}" in child.stdout, child.stdout


# --- limits and priorities ---------------------------------------------------------------------------------


def test_show_of_a_run_queued_by_a_concurrency_limit_says_why(host: HostHandle, state_dir: Path,
                                                              project: Path) -> None:
    holder = start(state_dir, project, "gate", "cluster=eu")
    waiting_on(state_dir, holder, "message")
    blocked = start(state_dir, project, "gate", "cluster=eu")
    wait_until(lambda: run_view(state_dir, blocked)["queue_reason"], 30, f"run {blocked} to have a queue reason")
    shown = cli(state_dir, project, "show", blocked)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r'status\s+queued — waiting for a concurrency slot of gate\[\{"cluster":"eu"\}\] \(1 of 1 in use\)',
                     shown.stdout), shown.stdout
    assert re.search(r'limit key\s+gate\[\{"cluster":"eu"\}\]', shown.stdout), shown.stdout

    assert cli(state_dir, project, "send", holder, "go").returncode == 0
    waiting_on(state_dir, blocked, "message")  # the slot is free: it started
    assert "queued —" not in cli(state_dir, project, "show", blocked).stdout


def test_start_priority_is_shown(host: HostHandle, state_dir: Path, project: Path) -> None:
    urgent = start(state_dir, project, "quick", "--priority", "5")
    assert ok_json(cli(state_dir, project, "show", urgent, "--json"))["priority"] == 5
    assert re.search(r"^priority\s+5\b", cli(state_dir, project, "show", urgent).stdout, flags=re.M)
    plain = start(state_dir, project, "quick")
    assert ok_json(cli(state_dir, project, "show", plain, "--json"))["priority"] == 0
    assert "priority" not in cli(state_dir, project, "show", plain).stdout
    refused = cli(state_dir, project, "start", "quick", "--priority", "2000000")
    assert refused.returncode == 1 and refused.stderr.startswith("piwf: rejected: priority"), refused.stderr


def test_a_negative_priority_starts_a_run_after_the_others(host: HostHandle, state_dir: Path, project: Path) -> None:
    """`--priority` is at most 1,000,000 either way (its help, docs/protocol.md): a negative one is taken at
    the door like any other, and one past the bound is refused by the same words."""
    later = start(state_dir, project, "quick", "--priority", "-5")
    assert ok_json(cli(state_dir, project, "show", later, "--json"))["priority"] == -5
    refused = cli(state_dir, project, "start", "quick", "--priority", "-2000000")
    assert refused.returncode == 1 and refused.stderr.startswith("piwf: rejected: priority must be an integer "
                                                                 "from -1000000 to 1000000"), refused.stderr


# --- rendering (no host) ----------------------------------------------------------------------------------

NOW = 1_800_000_000.0


def rendered(renderable: object, width: int = 120) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_large_fan_out_shows_its_first_children_and_how_many_more() -> None:
    runs = [{"run_id": f"run_{i:026d}", "workflow": "double", "status": "done" if i % 2 else "failed",
             "parent_node_id": "m", "child_index": i, "copied_from": None, "created_at": NOW, "finished_at": NOW,
             "error_code": None if i % 2 else "node_failed"} for i in range(100)]
    view = {"run_id": "run_parent", "workflow": "fan", "status": "running", "nodes": [], "effects": [],
            "children": {"total": 250, "by_status": {"done": 200, "failed": 50}, "runs": runs}}
    text = rendered(render.run_view(view), 140)
    assert "children (250: done 200  failed 50)" in text, text
    assert "… and 150 more (all of them: piwf list --parent run_parent --limit 250)" in text, text
    assert text.count("node_failed") == 50


def test_each_kind_of_wait_in_words() -> None:
    sleep = {"kind": "sleep", "node_id": "nap", "wake_at": NOW + 12, "remaining_s": 11.0}
    assert wait_words(sleep, NOW) == f"sleeping until {clock_time(NOW + 12, NOW)} (in 12s)"
    assert wait_words(sleep, NOW + 20).endswith("(due)")  # its wake-up passed: waking it is due
    assert wait_words(sleep, NOW, zoned=True) == f"sleeping until {render.moment(NOW + 12, NOW)}"
    assert wait_words(sleep, NOW + 20, zoned=True).endswith("(8s ago), waking it is due")
    message = {"kind": "message", "node_id": "w", "topic": "go", "deadline_at": NOW + 90, "clock": "running",
               "remaining_s": 89.0}
    assert wait_words(message, NOW) == "waiting for a message on 'go' (timeout in 1m30s)"
    forever = dict(message, deadline_at=None, clock="none", remaining_s=None)
    assert wait_words(forever, NOW) == "waiting for a message on 'go' (no timeout)"
    paused = dict(message, deadline_at=None, clock="paused", remaining_s=30.0)
    assert wait_words(paused, NOW) == "waiting for a message on 'go' (clock paused, 30s left)"
    assert wait_words(paused, NOW, zoned=True) == "waiting for a message on 'go' (clock paused, 30s left)"
    children = {"kind": "children", "node_id": "m", "children_total": 10, "children_open": 3}
    assert wait_words(children, NOW) == "waiting for children: 3 of 10 open"
    view = {"run_id": "run_x", "workflow": "w", "status": "parked", "nodes": [], "effects": [],
            "waits": [message, children], "mailbox": {"go": 2, "other": 1}, "priority": -3,
            "parent_run_id": "run_p", "parent_node_id": "m", "child_index": 7}
    text = rendered(render.run_view(view))
    zoned = wait_words(message, NOW, zoned=True)  # `piwf show` gives the deadline's zone and distance
    assert zoned == f"waiting for a message on 'go' (timeout {render.moment(NOW + 90, NOW)})", zoned
    for expected in (f"w: waiting for a message on 'go' (timeout {render.when(NOW + 90)} ", "m: waiting for children: 3 of 10 open",
                     "go: 2 pending, other: 1 pending", "child 7 of run_p node m"):
        assert expected in text, text
    assert re.search(r"priority\s+-3", text), text
    restart = {"run_id": "run_y", "workflow": "w", "status": "done", "nodes": [], "effects": [],
               "parent_run_id": "run_p", "parent_node_id": None}
    assert re.search(r"parent\s+run_p\s*$", rendered(render.run_view(restart)), flags=re.M)
    assert json.loads(render.to_json(view))["mailbox"] == {"go": 2, "other": 1}
