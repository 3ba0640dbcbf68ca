"""The launches the scheduler hands its slots, built from what the claim commands answered.

Pure functions (no read, no actor): `run_launch` and `reconcile_launch`
turn a claim's answer into the `Launch` a runner supervisor runs, and
`unlaunched_exit` is the command that settles a claimed launch that never
reached its runner, as if the runner had exited at once.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.actors.runner_supervisor import Launch
from piwf_actors.canonical import token_hash


def run_launch(claimed: dict[str, Any], token: str) -> Launch:
    """The launch of a run `scheduler.claim_next` claimed under `token`."""
    envelope: dict[str, Any] = {
        "workflow": claimed["workflow"], "workflow_path": claimed["workflow_path"],
        "workflow_attr": claimed["workflow_attr"], "definition_digest": claimed["definition_digest"],
        "project_path": claimed["project_path"], "source": claimed["source"] or b"",
        "state": claimed.get("state")}
    if claimed["source"] is None and claimed["source_size"] >= 0:
        # A large snapshot travels as content the worker reads in chunks.
        envelope["source"] = None
        envelope["source_ref"] = {"digest": claimed["source_sha256"], "bytes": claimed["source_size"]}
    return Launch(run_id=claimed["run_id"], generation=claimed["generation"],
                  launch_id=claimed["launch_id"], token_hash=token_hash(token),
                  revision=claimed["revision"], envelope=envelope,
                  worker_pid=claimed.get("worker_pid"))


def reconcile_launch(claimed: dict[str, Any], worker_pid: int | None) -> Launch:
    """The launch of a reconcile `reconcile.claim` claimed, for the slot whose worker is `worker_pid`."""
    return Launch(run_id=claimed["reconcile_id"], generation=claimed["claim_generation"],
                  launch_id=claimed["launch_id"], token_hash=claimed["token_hash"], revision=0,
                  envelope={"launch_kind": "reconcile", "reconcile_id": claimed["reconcile_id"],
                            "manager": claimed["manager"], "key": claimed["key"], "uid": claimed["uid"],
                            "project_path": claimed["project_path"], "manager_path": claimed["manager_path"],
                            "state": claimed["resource"]},
                  worker_pid=worker_pid, kind="reconcile",
                  fence={"manager": claimed["manager"], "key": claimed["key"]})


def unlaunched_exit(launch: Launch, *, stopping: bool) -> tuple[str, dict[str, Any]]:
    """The command that settles a claimed launch that never reached its runner, as if its runner had
    exited at once (`launchFailed`): `runner.exit` for a run (back to the queue when the host is
    stopping), `reconcile.exit` for a reconcile (due again at once)."""
    diagnostic = "the slot's runner supervisor is gone"
    if launch.kind == "reconcile":
        assert launch.fence is not None
        return "reconcile.exit", {
            "manager": launch.fence["manager"], "key": launch.fence["key"], "claim_generation": launch.generation,
            "launch_id": launch.launch_id, "token_hash": launch.token_hash, "outcome": "launchFailed",
            "exit_code": None, "diagnostic": diagnostic, "requeue": True}
    return "runner.exit", {
        "run_id": launch.run_id, "generation": launch.generation, "launch_id": launch.launch_id,
        "token_hash": launch.token_hash, "outcome": "launchFailed", "exit_code": None, "requeue": stopping,
        "diagnostic": diagnostic}
