"""Restart that helps: the current code by default, the stored snapshot on request, or a fork from a node.

- A run that failed on a bug is restarted after the workflow file is fixed:
  by default the workflow is resolved again, so the new run runs the fixed
  code (`digest_changed`); `same_code` runs the stored snapshot and fails the
  same way.
- `from_node` starts the new run at that node with the parent's outputs of
  the nodes that ran before it copied (recorded with the parent's attempt
  ids): the oracle file shows they, a side effect among them, did not run
  again.
- A node that is not in the definition is refused with a clear error.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from wf import harness
from wf.harness import Oracle, rows, wait_for_status

from piwf_actors.client import Client

guard = harness.guard

BUGGY = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge

    def _read(ctx):
        return {"value": ctx.input["missing"]}  # the bug: the input has no "missing"

    flow = define_workflow(name="buggy", start_at="read", nodes={"read": compute(run=_read)}, edges=[])
''')
FIXED = BUGGY.replace('ctx.input["missing"]', 'ctx.input.get("missing", 42)')

STAGED = textwrap.dedent('''
    import os
    from piwf_actors.workflows import action, compute, define_workflow, edge

    def _record(ctx):
        fd = os.open(ctx.input["oracle"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{ctx.node_id} {ctx.run_id}\\n".encode())
        os.close(fd)
        with open(ctx.input["oracle"]) as handle:
            return sum(1 for line in handle if line.split(" ")[0] == ctx.node_id)

    def _step(ctx):
        return {"node": ctx.node_id, "execution": _record(ctx)}

    def _flaky(ctx):
        if _record(ctx) == 1:
            raise RuntimeError("first time fails")
        return {"sum": ctx.outputs["load"]["node"] + "+" + ctx.outputs["charge"]["node"]}

    staged = define_workflow(
        name="staged", start_at="load",
        nodes={"load": compute(run=_step), "charge": action(run=_step), "flaky": compute(run=_flaky),
               "report": compute(run=_step)},
        edges=[edge("load", "charge"), edge("charge", "flaky"), edge("flaky", "report")],
    )
''')


def _restart(state_dir: Path, run_id: str, revision: int, **payload):
    with Client(state_dir) as client:
        return client.request("run.restart", payload, run_id=run_id, expected_revision=revision)


def test_a_restart_after_fixing_the_workflow_runs_the_fixed_code(guard, state_dir, tmp_path) -> None:
    path = tmp_path / "buggy.py"
    path.write_text(BUGGY)
    host = guard.start_host(state_dir)
    run_id = host.start_run(f"{path}:flow", {})["receipt"]["run_id"]
    failed = wait_for_status(host, run_id, ("done", "failed"))
    assert failed["status"] == "failed" and "KeyError" in failed["error"]["message"]

    same = _restart(state_dir, run_id, failed["revision"], same_code=True)
    assert same.outcome == "accepted" and same.receipt["digest_changed"] is False, same
    assert wait_for_status(host, same.receipt["run_id"], ("done", "failed"))["status"] == "failed"

    path.write_text(FIXED)
    fixed = _restart(state_dir, run_id, failed["revision"])
    assert fixed.outcome == "accepted" and fixed.receipt["digest_changed"] is True, fixed
    view = wait_for_status(host, fixed.receipt["run_id"], ("done", "failed"))
    assert (view["status"], view["output"]) == ("done", {"value": 42})
    assert view["parent_run_id"] == run_id


def _staged_run_that_failed(guard, state_dir, tmp_path):
    """A host, the oracle, and a run of STAGED that failed at `flaky` (its view)."""
    path = tmp_path / "staged.py"
    path.write_text(STAGED)
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(f"{path}:staged", {"oracle": str(oracle.path)})["receipt"]["run_id"]
    return host, oracle, run_id, wait_for_status(host, run_id, ("done", "failed"))


def test_a_restart_from_a_node_does_not_run_the_nodes_before_it_again(guard, state_dir, tmp_path) -> None:
    host, oracle, run_id, failed = _staged_run_that_failed(guard, state_dir, tmp_path)
    assert failed["status"] == "failed"
    assert oracle.counts(run_id) == {"load": 1, "charge": 1, "flaky": 1}

    forked = _restart(state_dir, run_id, failed["revision"], from_node="flaky")
    assert forked.outcome == "accepted" and forked.receipt["from_node"] == "flaky", forked
    child = forked.receipt["run_id"]
    view = wait_for_status(host, child, ("done", "failed"))
    assert view["status"] == "done", view
    assert view["output"] == {"node": "report", "execution": 1}
    # The action before the fork point did not run again; its output was copied.
    assert oracle.counts(child) == {"flaky": 1, "report": 1}
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["charge"]["output"] == {"node": "charge", "execution": 1}
    copied = rows(state_dir, "SELECT node_id, copied_from FROM node_attempt WHERE run_id = ? AND copied_from IS NOT NULL "
                             "ORDER BY step", (child,))
    parent_attempts = {r["node_id"]: r["attempt_id"] for r in rows(
        state_dir, "SELECT node_id, attempt_id FROM node_attempt WHERE run_id = ? AND status = 'succeeded'", (run_id,))}
    assert [(r["node_id"], r["copied_from"]) for r in copied] == [("load", parent_attempts["load"]),
                                                                 ("charge", parent_attempts["charge"])]
    assert [e["kind"] for e in harness.events(state_dir, child)].count("node_copied") == 2
    assert rows(state_dir, "SELECT count(*) AS n FROM effect WHERE run_id = ?", (child,))[0]["n"] == 0

    again = _restart(state_dir, run_id, failed["revision"], from_node="flaky")
    assert again.outcome == "adopted" and again.receipt == forked.receipt


def test_a_restart_from_an_unknown_node_is_refused(guard, state_dir, tmp_path) -> None:
    host, oracle, run_id, failed = _staged_run_that_failed(guard, state_dir, tmp_path)
    for same_code in (False, True):
        refused = _restart(state_dir, run_id, failed["revision"], from_node="nope", same_code=same_code)
        assert refused.outcome == "rejected" and "node 'nope' is not in workflow 'staged'" in refused.error
        assert "load, charge, flaky, report" in refused.error
