"""The registered client operations, without a host: dispatch, the standby refusal, and the builders.

The gateway is driven here by hand (not started): its dispatch gets frames
as the socket thread would hand them over, each operation's function is
swapped for a recorder, and its answers are caught from a stand-in for the
socket loop. The builders are called the way both the gateway and the
embedding API call them (`catalog.write_command`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from piwf_actors.actors.gateway import ClientGateway, ClientRequest
from piwf_actors.board import HostBoard
from piwf_actors.errors import StandbyHost, WorkflowNotFound
from piwf_actors.protocol.catalog import OPERATIONS, TOPICS, BuildEnv, registry, write_command
from piwf_actors.protocol.catalog.registry import GatewayServices, Operation
from piwf_actors.protocol.doors import DoorPosts
from piwf_actors.protocol.envelope import SCHEMA, BadRequest, Request
from piwf_actors.store.command_records import args_fingerprint, request_fingerprint
from piwf_actors.workflows.resolver import WorkflowResolver

#: A value of each payload type (see payloads.check_payload).
SAMPLE = {"str": "x", "int": 1, "num": 1.5, "bool": True, "map": {"choice": "ship"}, "any": {"k": [1, 2]},
          "bin": b"x"}
#: Write operations whose builders read files or the database (run.start and run.restart resolve
#: a workflow, state.backup copies the database, resource.apply hashes a file): tested on a host.
BUILT_FROM_FILES = {"run.start", "run.restart", "state.backup", "resource.apply"}


def minimal_payload(operation: Operation) -> dict[str, Any]:
    return {name: SAMPLE[kind] for name, (kind, required) in operation.payload.items() if required}


def envelope(operation: Operation) -> dict[str, Any]:
    return {**({"run_id": "run_1"} if operation.needs_run else {}),
            **({"expected_revision": 4} if operation.needs_revision else {})}


def frame(name: str, payload: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "type": "request", "request_id": f"r-{name}", "client_id": "ops-tests",
            "idempotency_key": f"k-{name}", "operation": name, "payload": payload, **fields}


class Loop:
    """Stands in for the socket loop: keeps what the gateway posts."""

    def __init__(self) -> None:
        self.posted: list[tuple[int, dict[str, Any]]] = []

    def post(self, conn_id: int, posted: dict[str, Any], *, is_response: bool = True) -> None:
        self.posted.append((conn_id, posted))


@pytest.fixture
def gateway() -> tuple[ClientGateway, Loop]:
    """A gateway that is never started: services without a database, a loop that only records."""
    gateway = ClientGateway(None, Path("/nonexistent/state.db"), Path("/nonexistent/host.sock"),  # type: ignore[arg-type]
                            host_epoch=1, supervisor=None, board=HostBoard())
    loop = Loop()
    env = BuildEnv(WorkflowResolver(), Path("/nonexistent/state.db"))
    gateway._loop = loop  # type: ignore[assignment]
    gateway._posts = DoorPosts(loop)  # type: ignore[arg-type]
    gateway._services = GatewayServices(port=gateway, gateway=None, reader=None, board=HostBoard(),  # type: ignore[arg-type]
                                        views=None, env=env, cached_env=env, connections=lambda: 0)  # type: ignore[arg-type]
    return gateway, loop


@pytest.fixture
def called(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Every operation's function swapped for one that records (its name, the payload it got)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, entry in OPERATIONS.items():
        def record(ctx: Any, payload: dict[str, Any], name: str = name) -> None:
            assert ctx.operation.name == name and ctx.request.operation == name and ctx.conn_id == 7
            calls.append((name, payload))

        monkeypatch.setitem(registry._OPERATIONS, name, dataclasses.replace(entry, fn=record))
    return calls


def test_every_topic_module_registered_its_operations_and_each_has_a_function() -> None:
    # The table is filled by the topic modules the package names: each contributes, nothing is left out.
    by_module = {op.fn.__module__ for op in OPERATIONS.values()} | {
        op.build.__module__ for op in OPERATIONS.values() if op.build is not None}
    assert {topic.__name__ for topic in TOPICS} == by_module - {registry.__name__}
    for operation in OPERATIONS.values():
        assert callable(operation.fn), operation.name
    # Every recorded operation builds its own write command (the one the embedding API builds too),
    # but schedule.trigger, whose run the schedule keeper resolves; nothing else builds one.
    assert {name for name, op in OPERATIONS.items() if op.recorded and op.build is None} == {"schedule.trigger"}
    assert all(op.recorded for op in OPERATIONS.values() if op.build is not None)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_dispatch_finds_each_operation_and_calls_its_function_once(gateway, called, name: str) -> None:
    gateway_, loop = gateway
    operation = OPERATIONS[name]
    payload = minimal_payload(operation)
    gateway_._request(ClientRequest(7, frame(name, payload, **envelope(operation))))
    assert called == [(name, payload)]
    assert loop.posted == []  # the (recording) function answered nothing, and dispatch added nothing


def test_dispatch_checks_the_payload_before_any_function(gateway, called) -> None:
    gateway_, loop = gateway
    gateway_._request(ClientRequest(7, frame("run.restart", {"same_code": True}, run_id="run_1")))
    gateway_._request(ClientRequest(7, frame("run.get", {"bogus": 1}, run_id="run_1")))
    gateway_._request(ClientRequest(7, frame("no.such", {})))
    assert called == []
    assert [(posted["outcome"], posted["error"]) for _conn, posted in loop.posted] == [
        ("rejected", "run.restart needs expected_revision in the request envelope"),
        ("rejected", "run.get: unknown payload field(s): bogus"),
        ("rejected", "operation 'no.such' is not available")]


def test_a_standby_refuses_every_mutation_in_dispatch_and_serves_the_rest(gateway, called, monkeypatch) -> None:
    gateway_, loop = gateway
    gateway_._standby = True
    monkeypatch.setattr(gateway_, "_standby_refusal", lambda: StandbyHost("host-a", 3, True))
    for name, operation in sorted(OPERATIONS.items()):
        gateway_._request(ClientRequest(7, frame(name, minimal_payload(operation), **envelope(operation))))
    served = {name for name, op in OPERATIONS.items() if op.read_only or name == "host.stop"}
    assert {name for name, _payload in called} == served
    refused = [posted for _conn, posted in loop.posted]
    assert len(refused) == len(OPERATIONS) - len(served)
    assert {posted["outcome"] for posted in refused} == {"unavailable"}
    assert {posted["request_id"] for posted in refused} == {f"r-{name}" for name in set(OPERATIONS) - served}


def request(name: str, payload: dict[str, Any], **fields: Any) -> Request:
    return Request(f"r-{name}", "c1", f"k-{name}", name, payload, **fields)


ENV = BuildEnv(WorkflowResolver(), Path("/nonexistent/state.db"))


@pytest.mark.parametrize("name", sorted(name for name, op in OPERATIONS.items()
                                        if op.build is not None and name not in BUILT_FROM_FILES))
def test_a_write_command_is_named_for_its_operation_and_fingerprints_what_the_client_sent(name: str) -> None:
    operation = OPERATIONS[name]
    payload = {name_: SAMPLE[kind] for name_, (kind, _required) in operation.payload.items()}
    if "action" in payload:
        payload["action"] = "retry"
    sent = request(name, payload, **envelope(operation))
    command = write_command(sent, ENV)
    assert command.name == name
    assert args_fingerprint(command.name, command.args) == request_fingerprint(
        name, sent.run_id, sent.expected_revision, payload)
    assert (command.args["client_id"], command.args["idempotency_key"]) == ("c1", f"k-{name}")


def test_a_dry_run_prune_carries_no_key_and_an_applied_one_does() -> None:
    dry = write_command(request("state.prune", {"before": 10}), ENV)
    applied = write_command(request("state.prune", {"before": 10, "apply": True}), ENV)
    assert (dry.args["client_id"], dry.args["idempotency_key"]) == (None, None)
    assert (applied.args["client_id"], applied.args["idempotency_key"]) == ("c1", "k-state.prune")
    assert (dry.args["before"], dry.args["apply"], applied.args["apply"]) == (10.0, False, True)


def test_run_start_fingerprints_the_normalised_request_and_records_a_workflow_it_cannot_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    command = write_command(request("run.start", {"workflow": "nowhere.py:flow", "project_path": "proj"}), ENV)
    assert command.name == "run.start"
    assert command.args["payload"] == {"workflow": "nowhere.py:flow", "input": None,
                                       "project_path": str(tmp_path / "proj"), "session_id": None, "run_id": None}
    assert command.args["refusal"]["code"] == "workflow_not_found" and "spec" not in command.args
    # Without a key nothing is recorded, so the refusal is raised at once.
    with pytest.raises(WorkflowNotFound, match="nowhere"):
        write_command(Request("r", None, None, "run.start", {"workflow": "nowhere.py:flow"}), ENV)


def test_write_command_refuses_what_the_gateway_refuses() -> None:
    with pytest.raises(BadRequest, match="run.get is not a write operation"):
        write_command(request("run.get", {}, run_id="run_1"), ENV)
    with pytest.raises(BadRequest, match="unknown payload field"):
        write_command(request("run.cancel", {"x": 1}, run_id="run_1"), ENV)
    with pytest.raises(BadRequest, match="needs run_id"):
        write_command(request("run.cancel", {}), ENV)
    with pytest.raises(BadRequest, match="action must be confirm or retry"):
        write_command(request("effect.resolve", {"effect_id": "eff_1", "action": "maybe"}), ENV)
    with pytest.raises(BadRequest, match="action must be confirm or retry"):
        write_command(request("channel.recover", {"profile": "p", "message_id": "m", "action": "maybe"}), ENV)


def test_an_operation_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        registry.operation("run.get")(lambda ctx, payload: None)
