"""The console's pages that read more than one operation's worth: the effects page (one indexed read of
the ambiguous effects, `effect.list`), the host page (no walk of every table), a running node's live
output on the run page, and the resources page's buttons. A real host, real HTTP, real workers."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest
from http_support import Door
from test_console import csrf, pending, signed_in, start
from testsupport import wait_for

from piwf_actors.http.console import views


def ambiguous(door: Door, marker: Path) -> tuple[str, dict]:
    """A run parked on an ambiguous effect: its shell step's worker killed while the step runs."""
    run_id = start(door, "effectful", input={"oracle": str(marker)})
    wait_for(marker.exists, 15, "the shell node to start")

    def worker_pid() -> int | None:
        for active in door.host.status()["scheduler"]["active"]:
            if active["run_id"] == run_id and active.get("pid"):
                return int(active["pid"])
        return None

    os.kill(wait_for(worker_pid, 10, "the run's worker"), signal.SIGKILL)
    parked = door.wait_status(run_id, ("parked",))
    assert parked["park_reason"] == "ambiguous_effect", parked
    (effect,) = [e for e in parked["effects"] if e["status"] == "ambiguous"]
    return run_id, effect


def test_the_effects_page_finds_an_ambiguous_effect_behind_newer_parked_runs(
        door: Door, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The page used to look through the newest EFFECT_SCAN (500) parked runs only; a smaller scan shows
    # with few runs what 500 runs waiting on decisions did to an older ambiguous effect.
    monkeypatch.setattr(views, "EFFECT_SCAN", 2, raising=False)
    run_id, effect = ambiguous(door, state_dir / "effect-marker")
    for version in ("1", "2", "3"):
        pending(door, start(door, "decides", input={"version": version}))
    browser = signed_in(door, door.tokens["ops"])
    page = browser.get("/console/effects")
    assert page.status_code == 200
    assert effect["effect_id"] in page.text and run_id in page.text and "Retry" in page.text
    # The API lists the same effect, with its run and the attempt the kill cut off.
    listed = door.viewer.get("/api/v1/effects").json()
    (item,) = listed["receipt"]["effects"]
    assert item["effect_id"] == effect["effect_id"] and item["status"] == "ambiguous"
    assert item["run"]["run_id"] == run_id and item["run"]["park_reason"] == "ambiguous_effect"
    assert item["run"]["input"] == {"oracle": str(state_dir / "effect-marker")}
    assert item["node_id"] == "act" and item["attempt"]["attempt_no"] == 1
    assert door.viewer.get("/api/v1/effects?status=applied").status_code == 422


def test_the_host_page_reads_the_state_without_counting_every_table(door: Door) -> None:
    counted = door.viewer.get("/api/v1/state").json()["receipt"]
    uncounted = door.viewer.get("/api/v1/state?counts=false").json()["receipt"]
    assert counted["tables"]["run"] == 0 and "tables" not in uncounted
    assert uncounted["schema_version"] == counted["schema_version"] and uncounted["engine"] == counted["engine"]
    assert door.viewer.get("/api/v1/state?counts=maybe").status_code == 422
    page = signed_in(door, door.tokens["eye"]).get("/console/host").text
    assert f"schema v{counted['schema_version']}" in page


PRINTS = '''
import shlex

from piwf_actors.workflows import define_workflow, shell


def _command(ctx):
    gate, started = shlex.quote(ctx.input["gate"]), shlex.quote(ctx.input["started"])
    return (f"echo 'first line'; echo 'to stderr' >&2; touch {started}; "
            f"while [ ! -e {gate} ]; do sleep 0.05; done; echo 'second line'")


prints = define_workflow(name="prints", start_at="talk", edges=[],
                         nodes={"talk": shell(command=_command, shell=True)})
'''


def test_a_running_nodes_output_shows_live_on_the_run_page(door: Door, state_dir: Path) -> None:
    flows = state_dir / "prints.py"
    flows.write_text(PRINTS)
    gate, started = state_dir / "gate", state_dir / "started"
    answer = door.operator.post("/api/v1/runs", json={"workflow": f"{flows}:prints",
                                                      "input": {"gate": str(gate), "started": str(started)}})
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["receipt"]["run_id"]
    wait_for(started.exists, 30, "the shell node to print its first lines")
    browser = signed_in(door, door.tokens["eye"])
    page = browser.get(f"/console/runs/{run_id}").text
    # The page has the panel the script fills, and subscribes to the run's stream.
    assert 'id="node-output"' in page and f'data-stream="/console/streams/runs/{run_id}"' in page
    seen: dict[str, str] = {"stdout": "", "stderr": ""}
    with browser.stream("GET", f"/console/streams/runs/{run_id}", timeout=httpx.Timeout(30.0)) as stream:
        assert stream.status_code == 200
        name = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name == "node_output":
                chunk = json.loads(line[6:])
                assert chunk["run_id"] == run_id and chunk["node_id"] == "talk"
                seen[chunk["stream"]] += chunk["data"]
                if "first line" in seen["stdout"] and "to stderr" in seen["stderr"] and not gate.exists():
                    gate.touch()  # printed before the stream opened: replayed; now the rest, live
            elif line.startswith("data: ") and name == "run" and json.loads(line[6:])["status"] == "done":
                break
    assert seen["stdout"] == "first line\nsecond line\n", seen
    assert seen["stderr"] == "to stderr\n", seen
    finished = browser.get(f"/console/runs/{run_id}").text
    assert 'id="node-output"' not in finished and "second line" in finished  # the stored output now
