"""Values that cannot be stored or shown are refused where they enter (docs/protocol.md, "Values").

Every payload field that carries a value — run.start's input, message.send's payload, the answers
(checkpoint.answer's input, decision.answer's response), interaction.submit's value, effect.resolve's
output, resource.apply's spec — takes JSON only: no binary, no NaN or infinity, nested at most
`MAX_VALUE_DEPTH` containers deep. A value that breaks a rule is answered `rejected` in one line naming
the field, reaches no writer and leaves no traceback in the host's log; what it was sent to is still
there to answer. A node's output and what a node sends obey the same rules in the worker: a node that
breaks them fails with a clear error (never a crashed worker), and a run stays viewable — by run.get,
run.events, a watch, `piwf show` and `piwf graph` — whatever was accepted into it. Identifiers in
payloads (`*_id`) are at most 200 characters, as in the envelope.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import start_host
from piwf_actors.json_values import MAX_VALUE_DEPTH

VALUES = Path(__file__).resolve().parent / "wf" / "values.py"
PIWF = Path(__file__).resolve().parents[2] / "bin" / "piwf"


def wf(attr: str) -> str:
    return f"{VALUES}:{attr}"


def nested(depth: int, leaf: Any = "leaf") -> Any:
    """A value `depth` containers deep (maps and lists in turn, the outermost a map)."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


class LogTrap(logging.Handler):
    """Every record of WARNING or above that the host process logs while it is installed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def assert_no_traceback(self) -> None:
        loud = [f"{r.levelname} {r.name}: {r.getMessage()[:300]}" for r in self.records
                if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()]
        assert not loud, "the host logged a traceback or an error:\n" + "\n".join(loud)


@pytest.fixture(scope="module")
def module_trap() -> Iterator[LogTrap]:
    handler = LogTrap()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.WARNING) or logging.WARNING)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def trap(module_trap: LogTrap) -> LogTrap:
    """The host log of this test alone."""
    module_trap.records.clear()
    return module_trap


@pytest.fixture(scope="module")
def targets(proto, module_trap) -> Iterator[dict[str, Any]]:
    """One host with something real behind every value field: a run waiting for a message, a pending
    checkpoint, decision and agent request, and an ambiguous effect."""
    state_dir = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    host = start_host(proto.host_config(state_dir))
    conn = proto.Conn(host.paths.socket, client_id="bad-values")
    try:
        found: dict[str, Any] = {"host": host, "conn": conn, "state_dir": state_dir}
        found["waiting_run"] = conn.ok("run.start", {"workflow": wf("waits")})["receipt"]["run_id"]
        for workflow, input in (("asks", None), ("decides", {"version": "1.2.0"}), ("asks_agent", None)):
            conn.ok("run.start", {"workflow": proto.flow(workflow), "input": input})
        marker = state_dir / "effect-marker"
        effect_run = conn.ok("run.start", {"workflow": proto.flow("effectful"),
                                           "input": {"oracle": str(marker)}})["receipt"]["run_id"]
        proto.wait_for(marker.exists, 15, "the shell node to start")

        def worker_pid() -> int | None:
            for active in host.status()["scheduler"]["active"]:
                if active["run_id"] == effect_run and active.get("pid"):
                    return int(active["pid"])
            return None

        os.kill(proto.wait_for(worker_pid, 10, "the effect run's worker"), signal.SIGKILL)
        view = proto.wait_run(conn, effect_run, ("parked",))
        assert view["park_reason"] == "ambiguous_effect", view
        found["effect_run"] = effect_run
        found["effect_id"] = next(e["effect_id"] for e in view["effects"] if e["status"] == "ambiguous")

        def requests() -> dict[str, dict[str, Any]] | None:
            listed = conn.ok("interaction.list")["receipt"]["requests"]
            kinds = {request["kind"]: request for request in listed}
            return kinds if {"checkpoint", "decision", "agent"} <= set(kinds) else None

        found["requests"] = proto.wait_for(requests, 15, "the checkpoint, decision and agent requests")
        proto.wait_run(conn, found["waiting_run"], ("parked",))
        yield found
    finally:
        conn.close()
        host.stop("test teardown")
        shutil.rmtree(state_dir, ignore_errors=True)


# --- values refused at the door -----------------------------------------------------------------

#: The bad values, each as a field's whole value.
BAD = {
    "binary": lambda: {"note": "fine", "blob": b"\x00\xff"},
    "too_deep": lambda: nested(MAX_VALUE_DEPTH + 1),
    "nan": lambda: {"ratio": float("nan")},
}
#: What each refusal must say.
SAYS = {"binary": "binary", "too_deep": f"deeper than {MAX_VALUE_DEPTH}", "nan": "NaN"}


def _payloads(t: dict[str, Any], value: Any) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """operation → (operation, payload, envelope fields) carrying `value` to a real target."""
    requests = t["requests"]
    return {
        "run.start": ("run.start", {"workflow": wf("echo"), "input": value}, {}),
        "message.send": ("message.send", {"run_id": t["waiting_run"], "topic": "go", "payload": value}, {}),
        "checkpoint.answer": ("checkpoint.answer", {"request_id": requests["checkpoint"]["request_id"],
                                                    "input": value}, {}),
        "decision.answer": ("decision.answer", {"request_id": requests["decision"]["request_id"],
                                                "response": {"choice": "fix", "input": {"instructions": value}}},
                            {"expected_revision": requests["decision"]["revision"]}),
        "interaction.submit": ("interaction.submit", {"request_id": requests["agent"]["request_id"],
                                                      "value": {"summary": "done", "detail": value}}, {}),
        "effect.resolve": ("effect.resolve", {"effect_id": t["effect_id"], "action": "confirm", "output": value}, {}),
        "resource.apply": ("resource.apply", {"manager": "disks", "key": "d1", "spec": value,
                                              "project_path": str(t["state_dir"]), "digest": "0" * 64}, {}),
    }


FIELDS = {"run.start": "payload.input", "message.send": "payload.payload", "checkpoint.answer": "payload.input",
          "decision.answer": "payload.response", "interaction.submit": "payload.value",
          "effect.resolve": "payload.output", "resource.apply": "payload.spec"}


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("operation", list(FIELDS))
def test_a_value_that_is_not_json_is_refused_in_one_line_and_leaves_no_traceback(
        operation: str, kind: str, targets: dict[str, Any], trap: LogTrap) -> None:
    conn = targets["conn"]
    name, payload, fields = _payloads(targets, BAD[kind]())[operation]
    answer = conn.request(name, payload, **fields)  # Conn checks the envelope and the one-line error
    assert answer["outcome"] == "rejected", answer
    assert FIELDS[operation] in answer["error"] and SAYS[kind] in answer["error"], answer
    assert "Error" not in answer["error"], f"a Python exception reached the client: {answer['error']}"
    trap.assert_no_traceback()
    assert conn.request("host.status")["outcome"] == "accepted"


#: Identifiers in payloads (fields named `*_id`) are at most 200 characters, like the envelope's: a
#: 3 MB submission id crashed the worker that was to validate it (the run parked `no_progress`, the
#: client waited forever), a 3 MB session id the first worker of its run (found by the fuzz).
LONG_IDS = {
    "interaction.submit": lambda t: ("interaction.submit", {"request_id": t["requests"]["agent"]["request_id"],
                                                            "submission_id": "s" * 3_000_000}, "payload.submission_id"),
    "checkpoint.answer": lambda t: ("checkpoint.answer", {"request_id": t["requests"]["checkpoint"]["request_id"],
                                                          "submission_id": "s" * 201, "input": 1},
                                    "payload.submission_id"),
    "run.start": lambda t: ("run.start", {"workflow": wf("echo"), "session_id": "s" * 3_000_000}, "payload.session_id"),
    "interaction.list": lambda t: ("interaction.list", {"session_id": "s" * 201}, "payload.session_id"),
}


@pytest.mark.parametrize("operation", list(LONG_IDS))
def test_an_identifier_longer_than_200_characters_is_refused_at_the_door(
        operation: str, targets: dict[str, Any], trap: LogTrap) -> None:
    conn = targets["conn"]
    name, payload, field = LONG_IDS[operation](targets)
    answer = conn.request(name, payload)
    assert answer["outcome"] == "rejected", answer
    assert field in answer["error"] and "200 characters" in answer["error"], answer
    trap.assert_no_traceback()


def test_what_bad_values_were_sent_to_is_still_there_and_takes_values_at_the_limit(
        targets: dict[str, Any], trap: LogTrap, proto) -> None:
    """After a refusal of each bad value, each target still waits: values at the limit are accepted, the
    runs end with them as outputs, and every view shows them."""
    conn, requests = targets["conn"], targets["requests"]
    for kind, bad in BAD.items():
        for name, payload, fields in _payloads(targets, bad()).values():
            assert conn.request(name, payload, **fields)["outcome"] == "rejected", (kind, name)
    at_limit = nested(MAX_VALUE_DEPTH)
    submitted = {"summary": "done", "detail": nested(MAX_VALUE_DEPTH - 1)}
    conn.ok("message.send", {"run_id": targets["waiting_run"], "topic": "go", "payload": at_limit})
    conn.ok("checkpoint.answer", {"request_id": requests["checkpoint"]["request_id"], "input": at_limit})
    conn.ok("interaction.submit", {"request_id": requests["agent"]["request_id"], "value": submitted})
    conn.ok("decision.answer", {"request_id": requests["decision"]["request_id"], "response": {"choice": "ship"}},
            expected_revision=requests["decision"]["revision"])
    conn.ok("effect.resolve", {"effect_id": targets["effect_id"], "action": "confirm", "output": at_limit})
    started = conn.ok("run.start", {"workflow": wf("echo"), "input": at_limit})["receipt"]["run_id"]
    expected = {targets["waiting_run"]: at_limit, requests["checkpoint"]["run_id"]: at_limit,
                requests["agent"]["run_id"]: submitted, requests["decision"]["run_id"]: {"choice": "ship"},
                started: at_limit}
    for run_id, output in expected.items():
        view = proto.wait_run(conn, run_id)
        assert view["status"] == "done" and view["output"] == output, view
        _assert_viewable(conn, targets["state_dir"], run_id, proto)
    effect_run = next(e for e in conn.ok("run.get", run_id=targets["effect_run"])["receipt"]["effects"])
    assert effect_run["status"] == "applied", effect_run
    trap.assert_no_traceback()


# --- nodes whose values break the rules ---------------------------------------------------------


def _assert_viewable(conn: Any, state_dir: Path, run_id: str, proto: Any) -> None:
    """Every view of the run can be shown: run.get, run.events, a run watch, `piwf show`, `piwf graph`."""
    assert conn.request("run.get", run_id=run_id)["outcome"] == "accepted"
    assert conn.request("run.events", {"limit": 1000}, run_id=run_id)["outcome"] == "accepted"
    subscription = f"sub-{run_id}"
    assert conn.request("watch", {"subscription_id": subscription, "topic": "run", "run_id": run_id},
                        )["outcome"] == "accepted"
    assert conn.event(subscription)["payload"]["run_id"] == run_id
    assert conn.request("unwatch", {"subscription_id": subscription})["outcome"] == "accepted"
    for command in (["show", run_id], ["graph", run_id]):
        shown = subprocess.run([str(PIWF), *command, "--state-dir", str(state_dir)], capture_output=True,
                               text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert shown.returncode == 0, (command, shown.stdout[-2000:], shown.stderr[-2000:])


@pytest.fixture
def host_and_conn(make_host, connect) -> tuple[Any, Any]:
    host = make_host()
    return host, connect(host, client_id="bad-nodes")


def test_a_node_output_nested_deeper_than_the_limit_fails_the_node_and_the_run_stays_viewable(
        host_and_conn, trap: LogTrap, proto, state_dir: Path) -> None:
    host, conn = host_and_conn
    run_id = conn.ok("run.start", {"workflow": wf("wrap"), "input": nested(MAX_VALUE_DEPTH)})["receipt"]["run_id"]
    view = proto.wait_run(conn, run_id)
    assert view["status"] == "failed", view
    (node,) = view["nodes"]
    assert node["status"] == "failed" and node["error"]["code"] == "output_invalid", node
    assert f"deeper than {MAX_VALUE_DEPTH}" in node["error"]["message"], node
    _assert_viewable(conn, state_dir, run_id, proto)
    trap.assert_no_traceback()


def test_an_input_nested_as_deep_as_the_issue_found_is_refused(host_and_conn, trap: LogTrap, proto) -> None:
    """The reported case: an input 29 levels deep was accepted, and a node returning it inside one more
    map made run.get, piwf show and piwf graph fail with "nesting deeper than 32"."""
    _host, conn = host_and_conn
    answer = conn.request("run.start", {"workflow": wf("wrap"), "input": nested(29)})
    assert answer["outcome"] == "rejected" and "payload.input" in answer["error"], answer
    assert conn.ok("run.list")["receipt"]["runs"] == []
    trap.assert_no_traceback()


def test_a_fan_out_whose_gathered_outputs_nest_too_deep_fails_its_node_clearly(
        host_and_conn, trap: LogTrap, proto, state_dir: Path) -> None:
    """Each child outputs a value at the limit; the list of them is one level deeper: the parent's node
    fails with a clear error instead of holding an output no view can show."""
    _host, conn = host_and_conn
    run_id = conn.ok("run.start", {"workflow": wf("fan"), "input": nested(MAX_VALUE_DEPTH)})["receipt"]["run_id"]
    view = proto.wait_run(conn, run_id)
    assert view["status"] == "failed", view
    node = next(n for n in view["nodes"] if n["node_id"] == "each")
    assert node["error"]["code"] == "output_invalid", node
    assert f"deeper than {MAX_VALUE_DEPTH}" in node["error"]["message"], node
    children = conn.ok("run.list", {"parent": run_id})["receipt"]["runs"]
    assert [child["status"] for child in children] == ["done", "done"], children
    _assert_viewable(conn, state_dir, run_id, proto)
    trap.assert_no_traceback()


@pytest.mark.parametrize("workflow, says", [("returns_bytes", "binary"), ("sends_bytes", "binary")])
def test_a_node_that_returns_or_sends_binary_fails_with_a_clear_error(
        workflow: str, says: str, host_and_conn, trap: LogTrap, proto, state_dir: Path) -> None:
    """Not a crashed worker and a run parked `no_progress`, not a traceback in the host's log."""
    _host, conn = host_and_conn
    run_id = conn.ok("run.start", {"workflow": wf(workflow)})["receipt"]["run_id"]
    view = proto.wait_run(conn, run_id, ("done", "failed", "cancelled", "parked"))
    assert view["status"] == "failed", view
    (node,) = view["nodes"]
    assert says in node["error"]["message"] and "TypeError" not in node["error"]["message"], node
    _assert_viewable(conn, state_dir, run_id, proto)
    trap.assert_no_traceback()


BAD_MANAGER = '''
from piwf_actors.workflows import define_resource_manager

def reconcile(ctx):
    return {"result": "done", "status_patch": {"blob": b"\\x00\\x01"}}

binary = define_resource_manager("binary", reconcile=reconcile, timeout_s=30)
'''


def test_a_resource_manager_whose_status_is_binary_ends_its_reconcile_in_a_clear_error(
        host_and_conn, trap: LogTrap, proto, tmp_path: Path) -> None:
    """A reconcile's status patch is stored and shown like a run's values: a binary one is the reconcile's
    error, not a traceback in the writer."""
    _host, conn = host_and_conn
    managers = tmp_path / ".piwf" / "resource-managers"
    managers.mkdir(parents=True)
    (managers / "binary.py").write_text(BAD_MANAGER)
    digest = hashlib.sha256((managers / "binary.py").read_bytes()).hexdigest()
    conn.ok("resource.apply", {"manager": "binary", "key": "r1", "spec": {}, "project_path": str(tmp_path),
                               "digest": digest})

    def failed() -> dict[str, Any] | None:
        view = conn.ok("resource.get", {"manager": "binary", "key": "r1"})["receipt"]
        return view if view["last_error"] else None

    view = proto.wait_for(failed, 30, "the reconcile to end in an error")
    assert "status_patch.blob holds binary data" in view["last_error"], view
    trap.assert_no_traceback()


def test_docs_name_every_value_field_and_the_depth_limit() -> None:
    """docs/protocol.md "Values" lists the fields the door checks as values (the catalog's `any` and `map`
    fields) and states the limit the code holds."""
    from piwf_actors.protocol.catalog import OPERATIONS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    section = doc[doc.index("### Values"):doc.index("### Malformed frames")]
    assert f"nested at most **{MAX_VALUE_DEPTH}** lists and maps deep" in section
    fields = [(name, field) for name, operation in OPERATIONS.items()
              for field, (kind, _required) in operation.payload.items() if kind in ("any", "map")]
    assert fields
    missing = [f"{name} {field}" for name, field in fields if f"`{name}`" not in section or f"`{field}`" not in section]
    assert not missing, f"value fields docs/protocol.md does not name: {missing}"
    assert set(FIELDS) <= {name for name, _field in fields}  # the tests above send bad values to each
