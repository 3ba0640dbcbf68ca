"""Resource managers on a real host: a manager that ensures one workflow per resource and cleans up
through a finalizer; a reconcile whose worker is SIGKILLed inside an effect (the effect becomes
ambiguous and never runs again); runs and reconciles alternating on one worker slot; a stale digest.

The manager and the workflows live in a project written by the test; their effects append to an oracle
file outside the database, which counts executions."""

from __future__ import annotations

import hashlib
import os
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from wf import harness
from wf.harness import rows, wait_for

from piwf_actors.client.connection import Client

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

WORKFLOWS = '''
import os, time
from piwf_actors.workflows import compute, define_workflow

def _wait_for_gate(ctx):
    while not os.path.exists(ctx.input["gate"]):
        time.sleep(0.02)
    return {"opened": True}

shout = define_workflow(name="shout", start_at="up", nodes={
    "up": compute(run=lambda ctx: {"text": ctx.input["text"].upper()})}, edges=[])
quick = define_workflow(name="quick", start_at="q", nodes={"q": compute(run=lambda ctx: {"ok": True})}, edges=[])
gate = define_workflow(name="gate", start_at="g", nodes={"g": compute(run=_wait_for_gate, timeout_s=60)}, edges=[])
'''

MANAGER = '''
import os, time
from piwf_actors.workflows import define_resource_manager

ORACLE = {oracle!r}

def _note(line):
    with open(ORACLE, "a") as handle:
        handle.write(line + "\\n")

def reconcile(ctx):
    if ctx.spec.get("quick"):
        return {{"result": "done"}}
    if ctx.spec.get("deploy"):
        def deploy():
            _note("deploy " + ctx.key)
            while os.path.exists(ctx.spec["block"]):  # the test kills the worker here
                time.sleep(0.02)
            return {{"url": "https://example.test/" + ctx.key}}
        result = ctx.effect("deploy", deploy)
        return {{"result": "done", "status_patch": {{"url": result["url"]}}}}
    run = ctx.workflows.ensure("shout", {{"text": ctx.spec["text"]}}, key=f"shout-{{ctx.generation}}")
    if run["status"] != "done":
        return {{"result": "requeue_after", "after_s": 60, "finalizers": ["shouter/announced"],
                "status_patch": {{"phase": run["status"], "run_id": run["run_id"]}}}}
    ctx.effect(f"announce-{{ctx.generation}}", lambda: _note("announce " + ctx.key))
    return {{"result": "done", "status_patch": {{"phase": "shouted", "text": run["output"]["text"]}}}}

def finalize(ctx):
    ctx.effect("cleanup", lambda: _note("cleanup " + ctx.key))
    return {{"result": "done", "finalizers": []}}

shouter = define_resource_manager("shouter", reconcile=reconcile, finalize=finalize, timeout_s=30)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "resource-managers").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "flows.py").write_text(WORKFLOWS)
    oracle = tmp_path / "oracle.txt"
    (root / ".piwf" / "resource-managers" / "shouter.py").write_text(textwrap.dedent(MANAGER.format(oracle=str(oracle))))
    return root


def _oracle(project: Path) -> list[str]:
    path = project.parent / "oracle.txt"
    return path.read_text().splitlines() if path.exists() else []


def _digest(project: Path) -> str:
    return hashlib.sha256((project / ".piwf" / "resource-managers" / "shouter.py").read_bytes()).hexdigest()


def _call(client: Client, operation: str, payload: dict[str, Any]) -> Any:
    answer = client.request(operation, payload)
    assert answer.ok, (operation, answer.outcome, answer.error)
    return answer.receipt


def _apply(client: Client, project: Path, key: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _call(client, "resource.apply", {"manager": "shouter", "key": key, "spec": spec,
                                            "project_path": str(project), "digest": _digest(project)})


def _get(client: Client, key: str) -> dict[str, Any] | None:
    answer = client.request("resource.get", {"manager": "shouter", "key": key})
    return answer.receipt if answer.ok else None


def _kinds(client: Client, key: str) -> list[str]:
    return [event["kind"] for event in _call(client, "resource.events", {"manager": "shouter", "key": key})["events"]]


def test_a_manager_ensures_a_workflow_keeps_its_output_in_status_and_cleans_up_on_delete(guard, state_dir,
                                                                                          project) -> None:
    guard.start_host(state_dir)
    with Client(state_dir) as client:
        stale = client.request("resource.apply", {"manager": "shouter", "key": "a", "spec": {"text": "hi"},
                                                  "project_path": str(project), "digest": "0" * 64})
        assert stale.outcome == "conflict" and "changed" in stale.error
        for key in ("a", "b"):
            _apply(client, project, key, {"text": f"hello {key}"})
        for key in ("a", "b"):
            done = wait_for(lambda k=key: (_get(client, k) or {}).get("status", {}).get("phase") == "shouted"
                            and not _get(client, k)["reconciling"] and _get(client, k), 30, f"resource {key} shouted")
            assert done["status"]["text"] == f"HELLO {key.upper()}"
            assert done["finalizers"] == ["shouter/announced"] and done["observed_generation"] == 1
            assert [run["workflow"] for run in done["runs"]] == ["shout"]  # one workflow per resource
        # A new spec is a new generation: a new run, announced once more.
        changed = _apply(client, project, "a", {"text": "again"})
        assert (changed["generation"], changed["changed"]) == (2, True)
        wait_for(lambda: (_get(client, "a") or {}).get("status", {}).get("text") == "AGAIN", 30, "generation 2")
        assert len(_get(client, "a")["runs"]) == 2
        _call(client, "resource.delete", {"manager": "shouter", "key": "a"})
        wait_for(lambda: _get(client, "a") is None, 30, "resource a deleted")
        kinds = _kinds(client, "a")
        assert kinds[-1] == "resource_deleted" and "deletion_requested" in kinds
        assert _get(client, "b")["status"]["phase"] == "shouted"
    assert sorted(_oracle(project)) == ["announce a", "announce a", "announce b", "cleanup a"]


def test_a_reconcile_killed_inside_an_effect_leaves_it_ambiguous_and_never_runs_it_again(guard, state_dir,
                                                                                         project) -> None:
    host = guard.start_host(state_dir)
    block = project.parent / "block"
    block.write_text("")
    with Client(state_dir) as client:
        _apply(client, project, "d", {"deploy": True, "block": str(block)})
        wait_for(lambda: _oracle(project) == ["deploy d"], 30, "the deploy effect to start")
        worker = wait_for(lambda: next((a["pid"] for a in host.status()["scheduler"]["active"]
                                        if a["kind"] == "reconcile"), None), 10, "the reconcile's worker")
        os.kill(worker, signal.SIGKILL)
        block.unlink()
        wait_for(lambda: "effect_ambiguous" in _kinds(client, "d"), 30, "the effect to become ambiguous")
        # Later reconciles (back-off 1 s, 2 s …) end with an error naming the effect, and do not run it.
        wait_for(lambda: _kinds(client, "d").count("reconcile_finished") >= 2, 30, "a reconcile after the kill")
        resource = _get(client, "d")
        effect = resource["effects"][0]
        assert effect["status"] == "ambiguous" and resource["last_result"] == "error"
        assert "ambiguous" in resource["last_error"] and effect["effect_id"] in resource["last_error"]
        assert _oracle(project) == ["deploy d"]
        # A person confirms it happened: the next reconcile uses the given result, still without running it.
        _call(client, "effect.resolve", {"effect_id": effect["effect_id"], "action": "confirm",
                                         "output": {"url": "https://example.test/confirmed"}})
        wait_for(lambda: (_get(client, "d") or {}).get("status", {}).get("url") == "https://example.test/confirmed",
                 30, "the confirmed result in the status")
    assert _oracle(project) == ["deploy d"]
    finished = rows(state_dir, "SELECT payload FROM resource_event WHERE kind = 'reconcile_finished' "
                               "ORDER BY seq LIMIT 1")
    assert "SIGKILL" in finished[0]["payload"]


def test_runs_and_reconciles_take_turns_on_one_worker_slot(guard, state_dir, project) -> None:
    host = guard.start_host(state_dir, max_workers=1, warm_workers=1)
    gate = project.parent / "gate"
    flows = str(project / ".piwf" / "workflows" / "flows.py")
    host.start_run(f"{flows}:gate", {"gate": str(gate)})
    wait_for(lambda: host.status()["scheduler"]["active"], 10, "the gate run to hold the only slot")
    with Client(state_dir) as client:
        for index in range(3):
            host.start_run(f"{flows}:quick", {"n": index})
            _apply(client, project, f"q{index}", {"quick": True})
        gate.write_text("")
        wait_for(lambda: all((_get(client, f"q{i}") or {}).get("last_result") == "done" for i in range(3))
                 and all(r["status"] == "done" for r in rows(state_dir, "SELECT status FROM run")), 60,
                 "every run and reconcile")
    launches = sorted(
        [(row["created_at"], "run") for row in rows(state_dir, "SELECT e.created_at FROM run_event e JOIN run r "
                                                               "ON r.run_id = e.run_id WHERE e.kind = 'run_claimed' "
                                                               "AND r.workflow = 'quick'")]
        + [(row["created_at"], "reconcile") for row in rows(state_dir, "SELECT created_at FROM resource_event "
                                                                       "WHERE kind = 'reconcile_started'")])
    # After the gate (a run) the slot goes to a reconcile, then a run, and so on.
    assert [kind for _, kind in launches] == ["reconcile", "run"] * 3


MAILER = '''
from piwf_actors.workflows import define_resource_manager

def reconcile(ctx):
    run = ctx.workflows.ensure("mail", {{"to": ctx.key, "oracle": {oracle!r}}}, key="welcome")
    if run["status"] != "done":
        return {{"result": "requeue_after", "after_s": 60, "status_patch": {{"phase": run["status"]}}}}
    return {{"result": "done", "status_patch": {{"phase": "sent", "run_id": run["run_id"]}}}}

mailer = define_resource_manager("mailer", reconcile=reconcile, timeout_s=30)
'''

MAIL_FLOW = '''
from piwf_actors.workflows import action, define_workflow

def _send(ctx):
    with open(ctx.input["oracle"], "a") as handle:
        handle.write("mail " + ctx.input["to"] + "\\n")
    return {"sent_to": ctx.input["to"]}

mail = define_workflow(name="mail", start_at="send", nodes={"send": action(run=_send)}, edges=[])
'''


def test_prune_spares_the_runs_a_resource_owns_so_a_later_reconcile_does_not_start_them_again(
        guard, state_dir, project) -> None:
    """A resource's `ensure` finds its run by a derived id: pruning a finished run its resource still
    owns would make the next reconcile start the workflow, and its effects, again. Prune keeps such
    runs while the resource exists and takes them like any other once it is deleted."""
    (project / ".piwf" / "resource-managers" / "mailer.py").write_text(
        textwrap.dedent(MAILER.format(oracle=str(project.parent / "oracle.txt"))))
    (project / ".piwf" / "workflows" / "mail.py").write_text(MAIL_FLOW)
    digest = hashlib.sha256((project / ".piwf" / "resource-managers" / "mailer.py").read_bytes()).hexdigest()
    guard.start_host(state_dir)
    ref = {"manager": "mailer", "key": "ada"}
    with Client(state_dir) as client:
        _call(client, "resource.apply", {**ref, "spec": {}, "project_path": str(project), "digest": digest})

        def sent() -> dict | None:
            answer = client.request("resource.get", ref)
            resource = answer.receipt if answer.ok else {}
            return resource if resource.get("status", {}).get("phase") == "sent" and not resource["reconciling"] \
                else None

        run_id = wait_for(sent, 30, "the welcome mail to be sent")["status"]["run_id"]
        assert _oracle(project) == ["mail ada"]
        pruned = _call(client, "state.prune", {"before": time.time() + 60, "apply": True})
        assert run_id not in pruned["runs"], pruned
        assert rows(state_dir, "SELECT status FROM run WHERE run_id = ?", (run_id,)) == [{"status": "done"}]
        # The next reconcile finds the run it owns, done, and sends nothing again.
        reconciles = _kinds_of(client, ref).count("reconcile_finished")
        _call(client, "resource.reconcile", ref)
        wait_for(lambda: _kinds_of(client, ref).count("reconcile_finished") > reconciles, 30, "another reconcile")
        assert sent()["status"]["run_id"] == run_id
        assert _oracle(project) == ["mail ada"]
        # Once the resource is gone its runs are pruned like any other.
        _call(client, "resource.delete", ref)
        wait_for(lambda: not client.request("resource.get", ref).ok, 30, "the resource to be deleted")
        pruned = _call(client, "state.prune", {"before": time.time() + 60, "apply": True})
        assert run_id in pruned["runs"], pruned
    assert _oracle(project) == ["mail ada"]


def _kinds_of(client: Client, ref: dict[str, str]) -> list[str]:
    return [event["kind"] for event in _call(client, "resource.events", ref)["events"]]
