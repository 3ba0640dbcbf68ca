"""The console's pages that read more than one operation's worth: the effects page (one indexed read of
the ambiguous effects, `effect.list`), the host page (no walk of every table), a running node's live
output on the run page, and the resources page's buttons. A real host, real HTTP, real workers."""

from __future__ import annotations

import hashlib
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
    first = door.viewer.get("/api/v1/effects?limit=1").json()["receipt"]
    assert [e["effect_id"] for e in first["effects"]] == [effect["effect_id"]] and first["next_cursor"]
    after = door.viewer.get("/api/v1/effects", params={"cursor": first["next_cursor"]}).json()["receipt"]
    assert after == {"effects": []}
    assert door.viewer.get("/api/v1/effects?cursor=nope").status_code == 422


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


MANAGER = '''
from piwf_actors.workflows import define_resource_manager

ORACLE = {oracle!r}


def _note(line):
    with open(ORACLE, "a") as handle:
        handle.write(line + "\\n")


def reconcile(ctx):
    _note("reconcile " + ctx.key)
    return {{"result": "done", "finalizers": ["pages/kept"], "status_patch": {{"phase": "ready"}}}}


def finalize(ctx):
    _note("finalize " + ctx.key)
    return {{"result": "done", "finalizers": []}}


pages = define_resource_manager("pages", reconcile=reconcile, finalize=finalize, timeout_s=30)
'''


def test_an_operator_reconciles_and_deletes_a_resource_from_the_resources_page(door: Door, state_dir: Path) -> None:
    project, oracle = state_dir / "proj", state_dir / "oracle.txt"
    (project / ".piwf" / "resource-managers").mkdir(parents=True)
    manager = project / ".piwf" / "resource-managers" / "pages.py"
    manager.write_text(MANAGER.format(oracle=str(oracle)))

    def notes() -> list[str]:
        return oracle.read_text().splitlines() if oracle.exists() else []

    applied = door.socket.request("resource.apply", {
        "manager": "pages", "key": "home", "spec": {"title": "home"}, "project_path": str(project),
        "digest": hashlib.sha256(manager.read_bytes()).hexdigest()})
    assert applied.ok, applied
    wait_for(lambda: notes() == ["reconcile home"], 30, "the first reconcile")
    viewer = signed_in(door, door.tokens["eye"]).get("/console/resources")
    assert "home" in viewer.text and "/console/resources/pages/home/reconcile" not in viewer.text
    browser = signed_in(door, door.tokens["ops"])
    page = browser.get("/console/resources")
    assert 'action="/console/resources/pages/home/reconcile"' in page.text
    assert 'action="/console/resources/pages/home/delete"' in page.text
    # CSRF and roles, as for every console form.
    refused = browser.post("/console/resources/pages/home/reconcile", data={"back": "/console/resources"})
    assert refused.status_code == 403
    eye = signed_in(door, door.tokens["eye"])
    as_viewer = eye.post("/console/resources/pages/home/reconcile",
                         data={"csrf": csrf(eye.get("/console/resources")), "back": "/console/resources"})
    assert as_viewer.status_code == 403
    assert browser.post("/console/resources/pages/home/rename", data={"csrf": csrf(page)}).status_code == 404
    reconciled = browser.post("/console/resources/pages/home/reconcile",
                              data={"csrf": csrf(page), "back": "/console/resources"})
    assert reconciled.status_code == 303
    assert "resource.reconcile: accepted" in httpx.URL(reconciled.headers["location"]).params["note"]
    wait_for(lambda: notes() == ["reconcile home"] * 2, 30, "the reconcile asked for from the page")
    deleted = browser.post("/console/resources/pages/home/delete",
                           data={"csrf": csrf(page), "back": "/console/resources"})
    assert "resource.delete: accepted" in httpx.URL(deleted.headers["location"]).params["note"]
    wait_for(lambda: door.socket.request("resource.get", {"manager": "pages", "key": "home"}).outcome == "notFound",
             30, "the resource to be finalized and deleted")
    assert notes()[-1] == "finalize home"
    missing = browser.post("/console/resources/pages/home/reconcile", data={"csrf": csrf(page)})
    assert "notFound" in httpx.URL(missing.headers["location"]).params["note"]
