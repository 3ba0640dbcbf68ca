"""The README's "Started by an event, waiting for another" runs as written: its workflow file in a
project, a host with `projects=` (what `piwf-host --project` sets), the `piwf emit` commands of its
console block run as `bin/piwf`: the order starts once (also when its emit is sent again), takes its
own payment — emitted after the order — and ships; an order with a zero total is filtered out; and
`piwf event list` shows each event with what it started and woke."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

from test_readme_python import python_block, write_workflow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _piwf(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "bin" / "piwf"), *args, "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _commands() -> list[list[str]]:
    """The `$ piwf …` lines of the README's console block that follows the example."""
    text = README.read_text()
    block = text[text.index("### Started by an event"):]
    console = re.search(r"```console\n(.*?)```", block, flags=re.S)
    assert console is not None
    return [shlex.split(line[2:]) for line in console.group(1).splitlines() if line.startswith("$ piwf ")]


def test_the_order_example_starts_once_per_event_and_takes_its_payment(hosts, state_dir, tmp_path) -> None:
    source = python_block("def fulfil(")
    assert "# myproject/.piwf/workflows/orders.py" in source
    project = tmp_path / "myproject"
    write_workflow(project, "orders", source)
    host = hosts(state_dir, projects=(str(project),), max_workers=2)
    deadline = time.monotonic() + 30
    while not host.list_event_subscriptions():
        assert time.monotonic() < deadline, "the event keeper did not record the README's workflow"
        time.sleep(0.05)
    commands = _commands()
    assert [command[:2] for command in commands] == [["piwf", "emit"], ["piwf", "emit"], ["piwf", "event"]]
    for command in commands[:2] + commands[:1]:  # the order's emit twice: one event, one run
        done = _piwf(state_dir, *command[1:])
        assert done.returncode == 0, done.stderr
    zero = host.emit_event("order.created", {"order_id": "o-0", "total": 0})
    runs = []
    while len(runs) != 1 or runs[0].status != "done":
        assert time.monotonic() < deadline + 60, [(run.workflow, run.status) for run in runs]
        runs = host.list_runs()
        time.sleep(0.05)
    view = host.get_run(runs[0].run_id)
    assert view.workflow == "fulfil" and view.input == {"order_id": "o-17", "total": 42}
    assert view.output == "shipped o-17"
    while not host.get_event(zero["event_id"])["deliveries"]:  # the keeper decides it on its next tick
        assert time.monotonic() < deadline + 60
        time.sleep(0.05)
    assert [d["outcome"] for d in host.get_event(zero["event_id"])["deliveries"]] == ["filtered"]
    listed = _piwf(state_dir, *commands[2][1:], "--json")
    assert listed.returncode == 0, listed.stderr
    events = {event["name"]: event for event in json.loads(listed.stdout)}
    assert len(json.loads(listed.stdout)) == 3  # the order (emitted twice under its key), the payment, o-0
    assert events["payment"]["woke"] == 1
    shown = _piwf(state_dir, "event", "show", events["payment"]["event_id"])
    assert shown.returncode == 0 and f"woke {view.run_id}" in shown.stdout, shown.stdout


def test_the_workflows_page_example_waits_for_its_payment_and_counts_clicks_in_batches(
        hosts, state_dir, tmp_path) -> None:
    """docs/workflows.md "Events and batches": the order graph takes the payment of its own order (not
    another's) and outputs it; 100 clicks of one page start one batch run that counts them all."""
    project = tmp_path / "project"
    write_workflow(project, "events", python_block('batch=batch(max_items=100, max_wait_s=60'))
    host = hosts(state_dir, projects=(str(project),), max_workers=2)
    deadline = time.monotonic() + 60
    while len(host.list_event_subscriptions()) < 2:
        assert time.monotonic() < deadline, "the event keeper did not record the page's workflows"
        time.sleep(0.05)
    host.emit_event("order.created", {"order_id": "o-1", "total": 5})
    host.emit_event("order.created", {"order_id": "o-2", "total": 0})  # filtered out
    for n in range(100):
        host.emit_event("click", {"page": "home", "n": n})
    while len([run for run in host.list_runs() if run.status == "parked" or run.workflow == "clicks"]) < 2:
        assert time.monotonic() < deadline, [(run.workflow, run.status) for run in host.list_runs()]
        time.sleep(0.05)
    host.emit_event("payment", {"order_id": "o-9", "amount": 1})  # another order's
    paid = host.emit_event("payment", {"order_id": "o-1", "amount": 5})
    assert len(paid["woke"]) == 1
    order = host.wait_for_run(paid["woke"][0], timeout=30)
    assert order.status == "done" and order.output["event_id"] == paid["event_id"]
    assert order.output["data"] == {"order_id": "o-1", "amount": 5}
    [clicks] = [run for run in host.list_runs() if run.workflow == "clicks"]
    assert host.wait_for_run(clicks.run_id, timeout=30).output == {"page": "home", "clicks": 100}
    assert {run.workflow for run in host.list_runs()} == {"order", "clicks"} and len(host.list_runs()) == 2
