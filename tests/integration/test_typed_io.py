"""Typed inputs and outputs with a real host and real workers.

- `run.start` refuses an input without the workflow's `input=` shape: one line naming the field,
  outcome `rejected`, no run written — through the embedding handle (with and without an
  idempotency key) and through the socket; a valid input runs.
- A node's `output=` shape is checked in its worker: a mismatch fails a compute node's attempt
  `output_invalid` (retries apply), counted by an oracle file outside the database.
- An action whose function returned has acted, whatever it returned: an output without its shape
  (or not a wire value) settles the effect `applied` and fails the node once, never retried —
  the oracle file shows one execution despite `retries=2`, also when the failure is routed.
- A fan-out whose child input lacks the child's shape fails the parent node before any child
  starts; a restart onto code whose input shape the old input lacks is refused.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from testsupport import events, rows

from piwf_actors import HostHandle
from piwf_actors.client import Client
from piwf_actors.errors import Rejected

FLOWS = textwrap.dedent('''
    from __future__ import annotations

    import dataclasses

    from piwf_actors.workflows import action, compute, define_workflow, map_workflow, switch


    @dataclasses.dataclass
    class Deploy:
        version: str
        count: int = 1
        dry_run: bool = False


    deploy = define_workflow(
        name="deploy", start_at="plan", input=Deploy,
        nodes={"plan": compute(run=lambda ctx: {"version": ctx.input["version"], "count": ctx.input.get("count", 1)})},
        edges=[],
    )


    def make(ctx):
        with open(ctx.input["oracle"], "a") as oracle:  # counts executions outside the database
            oracle.write("make\\n")
        return {"count": ctx.input.get("count", "three")}


    counted = define_workflow(
        name="counted", start_at="make",
        nodes={"make": compute(run=make, retries=1, output={
            "type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})},
        edges=[],
    )

    def ship(ctx):
        with open(ctx.input["oracle"], "a") as oracle:  # the side effect, counted outside the database
            oracle.write("ship\\n")
        return {"receipt": {1, 2}} if ctx.input.get("opaque") else "shipped"


    # A side effect that returned (it happened) with an output it may not have: `retries` must not
    # run it again.
    shipped = define_workflow(
        name="shipped", start_at="ship",
        nodes={"ship": action(run=ship, retries=2, output=int)},
        edges=[],
    )

    shipped_routed = define_workflow(
        name="shipped_routed", start_at="ship",
        nodes={"ship": action(run=ship, retries=2, output=int),
               "done": compute(run=lambda ctx: "done"), "recover": compute(run=lambda ctx: "recovered")},
        edges=[switch("ship", on="$result.outcome", cases={"ok": "done", "failed": "recover"})],
    )

    fanout = define_workflow(
        name="fanout", start_at="each",
        nodes={"each": map_workflow(deploy, items=lambda ctx: ctx.input["items"])},
        edges=[],
    )
''')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project" / ".piwf" / "workflows"
    folder.mkdir(parents=True)
    (folder / "typed.py").write_text(FLOWS)
    return tmp_path / "project"


def test_a_missing_or_mistyped_field_is_refused_in_one_line_and_nothing_is_written(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path) -> None:
    host = hosts(state_dir)
    before = host.list_runs()
    with pytest.raises(Rejected) as missing:
        host.start_run("deploy", {"count": 2}, project_path=str(project))
    assert str(missing.value) == ("input: missing required property 'version'; "
                                  "expected input: {version: string, count?: integer, dry_run?: boolean}")
    # Recorded under the key (a replay meets the same refusal): still no run.
    with pytest.raises(Rejected, match=r"^input.count: expected integer, got string; expected input: "):
        host.start_run("deploy", {"version": "1.0", "count": "3"}, project_path=str(project),
                       client_id="typed-test", idempotency_key="k1")
    with pytest.raises(Rejected, match=r"^input.count: expected integer, got string"):
        host.start_run("deploy", {"version": "1.0", "count": "3"}, project_path=str(project),
                       client_id="typed-test", idempotency_key="k1")
    with pytest.raises(Rejected, match=r"^input: unexpected property 'verison'"):
        host.start_run("deploy", {"version": "1.0", "verison": "1.1"}, project_path=str(project))

    with Client(state_dir) as client:
        answer = client.request("run.start", {"workflow": "deploy", "input": {"version": 7},
                                              "project_path": str(project)})
    assert answer.outcome == "rejected"
    assert answer.error is not None and answer.error.startswith("input.version: expected string, got integer; ")
    assert "\n" not in answer.error
    assert host.list_runs() == before

    run_id = host.start_run("deploy", {"version": "1.0", "count": 2}, project_path=str(project)).run_id
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    assert done.output == {"version": "1.0", "count": 2}
    assert [run.run_id for run in host.list_runs()] == [run_id]


def test_an_output_without_its_shape_fails_the_attempt_output_invalid_and_is_retried(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    host = hosts(state_dir)
    oracle = tmp_path / "oracle"
    run_id = host.start_run("counted", {"oracle": str(oracle)}, project_path=str(project)).run_id
    failed = host.wait_for_run(run_id, timeout=60)
    assert failed.status == "failed", failed
    [node] = failed.nodes
    assert node.attempts == 2 and oracle.read_text() == "make\nmake\n"  # retries=1: ran twice
    assert node.error is not None and node.error.code == "output_invalid"
    assert node.error.message == "output.count: expected integer, got string"
    assert node.output is None
    assert failed.error is not None and "output.count: expected integer, got string" in (failed.error.message or "")

    good = host.start_run("counted", {"oracle": str(oracle), "count": 3}, project_path=str(project)).run_id
    done = host.wait_for_run(good, timeout=60)
    assert done.status == "done" and done.output == {"count": 3}, done


APPLIED = "; the effect was applied, so the node is not retried"


def test_an_action_whose_output_lacks_its_shape_ran_once_its_effect_is_applied_and_it_is_not_retried(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    host = hosts(state_dir)
    oracle = tmp_path / "oracle"
    run_id = host.start_run("shipped", {"oracle": str(oracle)}, project_path=str(project)).run_id
    failed = host.wait_for_run(run_id, timeout=60)
    assert failed.status == "failed", failed
    assert oracle.read_text() == "ship\n"  # retries=2, and the effect happened exactly once
    [node] = failed.nodes
    assert node.attempts == 1 and node.output is None
    assert node.error is not None and node.error.code == "output_invalid"
    assert node.error.message == "output: expected integer, got string" + APPLIED
    assert failed.error is not None and failed.error.code == "node_failed"
    assert [(e.node_id, e.status) for e in failed.effects] == [("ship", "applied")]
    # What it returned is kept with its effect, for the person who looks into it; not as the node's output.
    [effect] = rows(state_dir, "SELECT b.data FROM effect e JOIN blob b ON b.sha256 = e.output_sha256 "
                               "WHERE e.run_id = ?", (run_id,))
    assert json.loads(bytes(effect["data"])) == "shipped"
    assert [(e["kind"], e["payload"]["status"]) for e in events(state_dir, run_id)
            if e["kind"] == "effect_settled"] == [("effect_settled", "applied")]

    # An output that is no wire value at all: the same, with nothing to keep.
    opaque = host.start_run("shipped", {"oracle": str(oracle), "opaque": True}, project_path=str(project)).run_id
    failed = host.wait_for_run(opaque, timeout=60)
    assert failed.status == "failed", failed
    assert oracle.read_text() == "ship\nship\n"
    [node] = failed.nodes
    assert node.attempts == 1
    assert node.error is not None and node.error.code == "output_invalid"
    assert node.error.message == ("output.receipt holds a value of type set; values are JSON: text, finite "
                                  "numbers, true/false, null, lists and maps with text keys" + APPLIED)
    assert rows(state_dir, "SELECT status, output_sha256 FROM effect WHERE run_id = ?", (opaque,)) == [
        {"status": "applied", "output_sha256": None}]


def test_an_action_failed_after_its_effect_is_routed_on_its_outcome_without_running_again(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    host = hosts(state_dir)
    oracle = tmp_path / "oracle"
    run_id = host.start_run("shipped_routed", {"oracle": str(oracle)}, project_path=str(project)).run_id
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    assert done.output == "recovered"
    assert oracle.read_text() == "ship\n"
    nodes = {node.node_id: node for node in done.nodes}
    assert nodes["ship"].attempts == 1 and nodes["ship"].status == "failed"
    assert nodes["ship"].error is not None and nodes["ship"].error.code == "output_invalid"
    assert [(e.node_id, e.status) for e in done.effects] == [("ship", "applied")]


def test_a_child_input_without_the_child_shape_fails_the_parent_node_before_any_child_starts(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path) -> None:
    host = hosts(state_dir)
    bad = host.start_run("fanout", {"items": [{"version": "1"}, {"count": 2}]}, project_path=str(project)).run_id
    failed = host.wait_for_run(bad, timeout=60)
    assert failed.status == "failed", failed
    [node] = failed.nodes
    assert node.error is not None and node.error.code == "bad_request"
    assert ("child workflow 'deploy' (item 1): input: missing required property 'version'; expected input: "
            "{version: string, count?: integer, dry_run?: boolean}") in (node.error.message or "")
    assert host.list_children(bad) == []

    good = host.start_run("fanout", {"items": [{"version": "1"}, {"version": "2", "count": 5}]},
                          project_path=str(project)).run_id
    done = host.wait_for_run(good, timeout=60)
    assert done.status == "done", done
    assert done.output == [{"version": "1", "count": 1}, {"version": "2", "count": 5}]
    assert len(host.list_children(good)) == 2


def test_a_restart_onto_code_the_old_input_does_not_fit_is_refused(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path) -> None:
    host = hosts(state_dir)
    run_id = host.start_run("deploy", {"version": "1.0"}, project_path=str(project)).run_id
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    flows = project / ".piwf" / "workflows" / "typed.py"
    flows.write_text(FLOWS.replace("    version: str\n", "    version: str\n    region: str\n", 1))
    with pytest.raises(Rejected, match=rf"the input of run {run_id} does not fit the current code of 'deploy': "
                                       r"input: missing required property 'region'; expected input: .*same_code"):
        host.restart_run(run_id, expected_revision=done.revision, idempotency_key=uuid.uuid4().hex,
                         client_id="typed-test")
    again = host.restart_run(run_id, expected_revision=done.revision, same_code=True)
    assert host.wait_for_run(again.run_id, timeout=60).status == "done"
