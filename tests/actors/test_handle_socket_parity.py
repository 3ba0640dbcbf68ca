"""The embedding API and the socket write the same command for the same call.

For each recorded operation both doors offer, the call is made once on the
socket (`Client`) and once through `HostHandle` with the same client id and
idempotency key. Both commands are caught on their way to the writer: they
must have the same name, the same fingerprint and the same arguments but for
who sent them (the request id, the peer). And the handle's call is the
socket's replayed: `adopted` (or the same recorded refusal), never the
`conflict` of a key reused for another request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostHandle
from piwf_actors.actors import writer as writer_module
from piwf_actors.client import Client
from piwf_actors.errors import NotFound, Rejected
from piwf_actors.store.command_records import args_fingerprint

FLOWS = '''
from piwf_actors.workflows import checkpoint, compute, define_workflow, edge

ask = define_workflow(name="parity-ask", start_at="q", nodes={
    "q": checkpoint(prompt="how many?"),
    "echo": compute(run=lambda ctx: {"got": ctx.outputs["q"]}),
}, edges=[edge("q", "echo")])
'''
CLIENT = "parity"
#: What differs between the two doors by design: the request id (the socket's own, the key for the
#: handle) and who sent it (the socket's peer, the embedding process).
SENDER = {"client_request_id", "peer"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    return root


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """(command name, args) of every write queued for the writer, from any thread."""
    seen: list[tuple[str, dict[str, Any]]] = []
    real = writer_module.WriterHandle.submit

    def submit(self, command, reply_to=None):
        seen.append((command.name, dict(command.args)))
        return real(self, command, reply_to)

    monkeypatch.setattr(writer_module.WriterHandle, "submit", submit)
    return seen


@pytest.fixture
def host(state_dir: Path, hosts: Callable[..., HostHandle], submitted) -> HostHandle:
    return hosts(state_dir, lease_s=5)


def commands_under(submitted: list[tuple[str, dict[str, Any]]], key: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, args) for name, args in submitted if args.get("idempotency_key") == key]


def assert_one_command(submitted: list[tuple[str, dict[str, Any]]], key: str, operation: str) -> None:
    (socket_name, socket_args), (handle_name, handle_args) = commands_under(submitted, key)
    assert socket_name == handle_name == operation
    assert args_fingerprint(handle_name, handle_args) == args_fingerprint(socket_name, socket_args)
    assert {k: v for k, v in handle_args.items() if k not in SENDER} == {
        k: v for k, v in socket_args.items() if k not in SENDER}


def test_run_start_and_control_through_either_door_are_one_command(host: HostHandle, project: Path,
                                                                   submitted) -> None:
    with Client(host.paths.root, client_id=CLIENT) as client:
        started = client.request("run.start", {"workflow": "parity-ask", "input": {"n": 1},
                                               "project_path": str(project)}, idempotency_key="start")
        assert started.outcome == "accepted", started
        again = host.start_run("parity-ask", {"n": 1}, project_path=str(project), client_id=CLIENT,
                               idempotency_key="start")
        assert (again.outcome, again.run_id) == ("adopted", started.receipt["run_id"])
        assert_one_command(submitted, "start", "run.start")

        run_id = started.receipt["run_id"]
        revision = host.wait_for_run(run_id, ("parked",), timeout=20).revision
        calls = (("run.pause", host.pause_run), ("run.resume", host.resume_run), ("run.cancel", host.cancel_run))
        for operation, through_handle in calls:
            answer = client.request(operation, run_id=run_id, expected_revision=revision, idempotency_key=operation)
            assert answer.outcome == "accepted", answer
            replay = through_handle(run_id, expected_revision=revision, client_id=CLIENT, idempotency_key=operation)
            assert (replay.outcome, replay.revision) == ("adopted", answer.revision)
            assert_one_command(submitted, operation, operation)
            revision = answer.revision


@pytest.mark.parametrize("operation, payload, envelope, through_handle", [
    ("run.restart", {"same_code": False}, {"run_id": "run_missing", "expected_revision": 3},
     lambda host, **key: host.restart_run("run_missing", expected_revision=3, **key)),
    ("run.restart", {"from_node": "b", "same_code": True}, {"run_id": "run_missing", "expected_revision": 3},
     lambda host, **key: host.restart_run("run_missing", expected_revision=3, from_node="b", same_code=True, **key)),
    ("effect.resolve", {"effect_id": "eff_missing", "action": "retry"}, {},
     lambda host, **key: host.resolve_effect("eff_missing", "retry", **key)),
    ("effect.resolve", {"effect_id": "eff_missing", "action": "confirm", "output": {"sent": True}}, {},
     lambda host, **key: host.resolve_effect("eff_missing", "confirm", {"sent": True}, **key)),
    ("decision.answer", {"request_id": "req_missing", "response": {"choice": "ship"}}, {"expected_revision": 2},
     lambda host, **key: host.answer_decision("req_missing", "ship", expected_revision=2, **key)),
    ("decision.answer", {"request_id": "req_missing", "response": {"choice": "fix", "input": {"why": "x"}},
                         "session_id": "s1"}, {},
     lambda host, **key: host.answer_decision("req_missing", "fix", input={"why": "x"}, session_id="s1", **key)),
    ("checkpoint.answer", {"request_id": "req_missing", "input": {"k": 3}}, {},
     lambda host, **key: host.answer_checkpoint("req_missing", {"k": 3}, **key)),
    ("checkpoint.answer", {"request_id": "req_missing", "input": 7, "session_id": "s1"}, {},
     lambda host, **key: host.answer_checkpoint("req_missing", 7, session_id="s1", **key)),
], ids=["restart", "restart-same-code", "effect-retry", "effect-confirm", "decision", "decision-session",
        "checkpoint", "checkpoint-session"])
def test_answers_and_restarts_through_either_door_are_one_command(
        host: HostHandle, submitted, operation: str, payload: dict[str, Any], envelope: dict[str, Any],
        through_handle: Callable[..., Any]) -> None:
    # Nothing of these exists, so both are refused the same way; the commands are what this compares.
    key = f"{operation}-{len(submitted)}"
    with Client(host.paths.root, client_id=CLIENT) as client:
        answer = client.request(operation, payload, idempotency_key=key, **envelope)
    assert answer.outcome == "notFound", answer
    with pytest.raises(NotFound):
        through_handle(host, client_id=CLIENT, idempotency_key=key)
    assert_one_command(submitted, key, operation)


def test_the_handle_checks_a_call_as_the_socket_checks_its_request(host: HostHandle, project: Path) -> None:
    """A run id the socket refuses is refused through the handle too (before the writer, nothing
    recorded under the key); one it accepts starts the run."""
    with pytest.raises(Rejected, match="run_id must be 1-200 characters"):
        host.start_run("parity-ask", {}, project_path=str(project), run_id="order/1", client_id=CLIENT,
                       idempotency_key="bad-id")
    with Client(host.paths.root, client_id=CLIENT) as client:
        answer = client.request("run.start", {"workflow": "parity-ask", "input": {}, "project_path": str(project),
                                              "run_id": "order/1"}, idempotency_key="bad-id")
    assert answer.outcome == "rejected" and "run_id must be 1-200 characters" in (answer.error or "")
    receipt = host.start_run("parity-ask", {}, project_path=str(project), run_id="order:1")
    assert receipt.run_id == "order:1"
