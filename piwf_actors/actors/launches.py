"""The launches the scheduler hands its slots, built from what the claim commands answered.

Pure functions (no read, no actor): `claim_offer` and `reconcile_offer` are
what a claim of runs for some slots, or of a reconcile, is sent with (the
tokens and launch ids are drawn here, never in the step function), `run_launch` and `reconcile_launch` turn a
claim's answer into the `Launch` a runner supervisor runs, and
`unlaunched_exit` is the command that settles a claimed launch that never
reached its runner, as if the runner had exited at once.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from piwf_actors.actors.worker_link import Launch
from piwf_actors.canonical import token_hash


def claim_offer(slots: Sequence[Any], active: Iterable[str],
                claim_lease_s: float) -> tuple[list[tuple[Any, str, str]], dict[str, Any]]:
    """For `scheduler.claim_next` on `slots` (each with its `worker`, pid and create_time or None): the
    (slot, token, launch id) of each offered slot, which the answer is matched to by launch id, and
    the command's arguments (only the token's hash travels; runs in `active` are not claimed)."""
    offered = [(slot, secrets.token_urlsafe(24), uuid.uuid4().hex) for slot in slots]
    wire = [{"token_hash": token_hash(token), "launch_id": launch_id,
             **({"pid": slot.worker.pid, "create_time": slot.worker.create_time} if slot.worker else {})}
            for slot, token, launch_id in offered]
    return offered, {"exclude": list(active), "slots": wire, "claim_lease_s": claim_lease_s}


def reconcile_offer(active: Iterable[str], claim_lease_s: float) -> dict[str, Any]:
    """The arguments of `reconcile.claim` (its answer carries the token's hash and launch id back; runs in
    `active` are not claimed)."""
    return {"token_hash": token_hash(secrets.token_urlsafe(24)), "launch_id": uuid.uuid4().hex,
            "claim_lease_s": claim_lease_s, "exclude": list(active)}


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
