"""Every id a `piwf` table prints can be pasted back: it names that row's id among all of the host's ids,
not only among the rows the table happened to show (`piwf list --limit 1`, a fan-out's children, the
inbox, the active runs of `piwf status`). Runs made within a second share the time an id starts with,
and a fan-out's children share all of it, so a table that cut ids at the rows it showed printed
`run_01m94hem` for one run while `piwf show run_01m94hem` answered "ambiguous: it matches 2 runs"."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import ok_json, piwf, short_dir, wait_until
from rich.console import Console

from piwf_actors import HostConfig, start_host
from piwf_actors.cli import ids, render, render_flow
from piwf_actors.cli.inbox import inbox_view
from piwf_actors.cli.render_state import host_status
from piwf_actors.client import Client

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import action, checkpoint, compute, define_workflow, edge, map_workflow

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": 1})}, edges=[])
    fan = define_workflow(name="fan", start_at="m", nodes={
        "m": map_workflow(quick, items=lambda ctx: list(range(6)))}, edges=[])
    gate = define_workflow(name="gate", start_at="wait", nodes={"wait": checkpoint(prompt="a number?")}, edges=[])
    effectful = define_workflow(name="effectful", start_at="do", nodes={"do": action(run=lambda ctx: {"did": 1})},
                                edges=[])
''')

#: A cell of a Rich table: between two `│`, one id (with `…` before an end) and nothing else.
ID_CELL = re.compile(r"^(…?[a-z0-9_-]+)$")


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pti-")
    flows = state / "flows.py"
    flows.write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        # Runs started together share the time their ids start with (time-ordered ids).
        runs = [host.start_run(f"{flows}:quick", {"n": n}).run_id for n in range(12)]
        fan = host.start_run(f"{flows}:fan", {}).run_id
        gates = [host.start_run(f"{flows}:gate", {}, session_id="s-ti").run_id for _ in range(3)]
        effects = [host.start_run(f"{flows}:effectful", {}).run_id for _ in range(3)]
        told = [host.start_run(f"{flows}:quick", {}, session_id="s-told").run_id for _ in range(3)]
        for run_id in [*runs, fan, *effects, *told]:
            assert host.wait_for_run(run_id, timeout=60).status == "done"
        for run_id in gates:
            host.wait_for_run(run_id, ("parked",), timeout=60)
        yield {"state": state, "host": host, "runs": runs, "fan": fan, "gates": gates, "effects": effects}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)


def cells(text: str, column: int) -> list[str]:
    """The `column`-th cell of each row of a printed Rich table (box lines `│`)."""
    found = []
    for line in text.splitlines():
        parts = line.split("│")
        if len(parts) > column + 1 and line.startswith("│"):
            found.append(parts[column + 1].strip())
    return found


def printed(renderable: Any, width: int = 200) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def names(state: Any, kind: str, shown: str) -> str:
    """The full id `shown` names when pasted into `piwf` (cli/ids.py, asking the host)."""
    with Client(state) as client:
        return ids.resolve(client, kind, shown)


def test_a_one_row_listing_prints_an_id_that_names_its_run(env: dict[str, Any]) -> None:
    """The issue's case: `piwf list` showing one run of several made together. A fan-out's children share
    all of the time part, so `--parent FAN --limit 1` has a sibling sharing any start the row alone needs."""
    listed = piwf(env["state"], "list", "--parent", env["fan"], "--limit", "1")
    assert listed.returncode == 0, listed.stderr
    [shown] = [cell for cell in cells(listed.stdout, 0) if ID_CELL.match(cell) and cell != "run id"]
    expected = ok_json(piwf(env["state"], "list", "--parent", env["fan"], "--limit", "1", "--json"))["runs"][0]
    shown_run = piwf(env["state"], "show", shown, "--json")
    assert shown_run.returncode == 0, (shown, shown_run.stderr)
    assert json.loads(shown_run.stdout)["run_id"] == expected["run_id"]


def test_every_subset_of_runs_prints_ids_that_name_them(env: dict[str, Any]) -> None:
    """Whatever rows a run table shows (one, a few, all), each printed id names its own run."""
    with Client(env["state"]) as client:
        rows = client.request("run.list", {"limit": 100}).receipt["runs"]
    by_id = {row["run_id"]: row for row in rows}
    subsets = [[by_id[run_id]] for run_id in env["runs"]] + [[by_id[r] for r in env["runs"][::3]], rows]
    for subset in subsets:
        shown = [cell for cell in cells(printed(render.runs_table(subset)), 0) if cell and cell != "run id"]
        assert len(shown) == len(subset)
        for cell, row in zip(shown, subset, strict=True):
            assert names(env["state"], "run", cell) == row["run_id"], (cell, row["run_id"])


def test_children_effects_inbox_and_active_runs_print_ids_that_name_them(env: dict[str, Any]) -> None:
    state = env["state"]
    with Client(state) as client:
        fan = client.get(env["fan"])
        effect_runs = [client.get(run_id) for run_id in env["effects"]]
        requests = [r for r in client.request("interaction.list", {"session_id": "s-ti"}).receipt["requests"]
                    if r["run_id"] in env["gates"]]
    for child in fan["children"]["runs"]:  # one child alone, as `piwf show` of a parent with many children
        alone = {**fan, "children": {**fan["children"], "runs": [child]}}
        [cell] = [c for c in cells(printed(render_flow.children_table(alone)), 2) if c and c != "run id"]
        assert names(state, "run", cell) == child["run_id"]
    for view in effect_runs:  # each run's effects table shows one effect of three made together
        [cell] = [c for c in cells(printed(render.run_view(view)), 0) if c.startswith(("eff", "…"))]
        assert names(state, "effect", cell) == view["effects"][0]["effect_id"]
    assert len(requests) == 3
    for request in requests:  # the inbox showing one request: its id and its run's
        table = printed(inbox_view({"requests": [request], "messages": []}))
        [request_cell] = [c for c in cells(table, 0) if c and c != "request"]
        assert names(state, "request", request_cell) == request["request_id"]
        run_cell = next(c for c in cells(table, 2) if c.startswith(("run", "…")))
        assert names(state, "run", run_cell) == request["run_id"]
    for run_id in env["runs"][:3]:  # `piwf status` with one active worker
        status = {"workers": {"active": [{"run_id": run_id, "pid": 1, "generation": 1}], "max": 2, "idle": 1}}
        [cell] = [c for c in cells(printed(host_status(status)), 0) if c.startswith(("run", "…"))]
        assert names(state, "run", cell) == run_id


def test_inbox_messages_print_ids_that_name_them(env: dict[str, Any]) -> None:
    """A session message row names its message and its run (the end of each run started with a session)."""

    def told() -> list[dict[str, Any]]:
        with Client(env["state"]) as client:
            return client.request("interaction.list", {"session_id": "s-told"}).receipt["messages"]

    messages = wait_until(lambda: len(told()) == 3 and told(), 30, "the three runs' session messages")
    for message in messages:
        table = printed(inbox_view({"requests": [], "messages": [message]}))
        [message_cell] = [c for c in cells(table, 0) if c and c != "message"]
        assert names(env["state"], "message", message_cell) == message["message_id"]
        [run_cell] = [c for c in cells(table, 3) if c and c != "run"]
        assert names(env["state"], "run", run_cell) == message["run_id"]
