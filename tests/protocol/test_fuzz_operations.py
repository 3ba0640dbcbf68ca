"""A fuzz of every client operation over the real socket of a real host (`bin/piwf-host`).

Hypothesis builds requests for every operation of the catalog (`protocol.catalog.OPERATIONS`, read
here, so a new operation is fuzzed without a change to this file): payloads with the right fields of
the right types (real run and request ids among them, so requests reach past the door),
wrong types, unknown and missing fields, binary, NaN, deep nesting up to what a frame holds, huge
strings, odd envelopes. Every frame is well-formed, so the host must answer each one — with a
response of the protocol's shape (`conftest.Conn` checks every frame: keys, outcome, a one-line
error of at most 1,000 characters) whose error is not a Python exception of the host's own — keep
serving, log no error and no traceback (the host's JSON log is read after every request), and stop
cleanly on SIGTERM at the end.

What is never sent: `host.stop` with a payload it would obey (it would stop the host under test), a
`state.backup` destination outside the test's directory, and a workflow spec naming a Python module
(`module:attr` would import whatever installed module the fuzz happened to name).

Each run draws new requests (no example database); `PIWF_FUZZ_PER_OPERATION=200` fuzzes longer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import psutil
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from testsupport import BIN_PIWF_HOST, HostScript, host_script_args, wait_for

from piwf_actors.json_values import MAX_VALUE_DEPTH
from piwf_actors.protocol.catalog import OPERATIONS
from piwf_actors.wire.codec import MAX_DEPTH, MAX_FRAME_BYTES

VALUES = Path(__file__).resolve().parent / "wf" / "values.py"
#: Exceptions whose names in an answer mean the host failed on the request, not that it refused it.
HOST_FAILURE = re.compile(r"\b(TypeError|KeyError|AttributeError|IndexError|AssertionError|RecursionError|"
                          r"UnboundLocalError|NameError|UnicodeEncodeError|OverflowError|ZeroDivisionError)\b")
#: Requests the fuzz sends per operation (Hypothesis examples): the whole fuzz takes tens of seconds.
PER_OPERATION = int(os.environ.get("PIWF_FUZZ_PER_OPERATION", "25"))
#: Requests between two top-ups of the targets (`Targets.top_up`).
TOP_UP_EVERY = 25


class HostLog:
    """The host's stderr (one JSON object per line): what it logged since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def assert_quiet(self, after: str) -> None:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        loud = []
        for line in complete.decode(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                # Not a log record: something wrote to stderr directly (an unhandled thread exception).
                if line.strip():
                    loud.append(line)
                continue
            if entry.get("level") in ("ERROR", "CRITICAL") or "traceback" in entry:
                loud.append(f"{entry.get('level')} {entry.get('logger')}: {entry.get('message')}\n"
                            f"{entry.get('traceback', '')}")
        assert not loud, f"after {after} the host logged:\n" + "\n".join(loud)


@pytest.fixture
def fuzzed_host(state_dir: Path, proto) -> Iterator[tuple[HostScript, Any, HostLog]]:
    """`bin/piwf-host` in a process of its own, its JSON log in a file; a connection to it. Teardown
    sends SIGTERM and requires a clean exit."""
    script = HostScript(host_script_args(state_dir, max_workers=2, log_format="json"), state_dir, 0,
                        command=[BIN_PIWF_HOST])
    conn = None
    try:
        socket_path = state_dir / "host.sock"

        def connected() -> Any:
            if script.proc.poll() is not None:
                pytest.fail(f"piwf-host exited with {script.proc.returncode}:\n{script.log()[-3000:]}")
            try:
                return proto.Conn(socket_path, client_id="fuzz", timeout=30.0)
            except OSError:
                return None

        conn = wait_for(connected, 30, "piwf-host to serve its socket")
        yield script, conn, HostLog(script.err_path)
    finally:
        if conn is not None:
            conn.close()
        if script.proc.poll() is None:
            workers = script.descendants()
            script.proc.send_signal(signal.SIGTERM)
            try:
                code = script.proc.wait(30)
            except Exception:
                script.sigkill()
                for worker in workers:  # they lead sessions of their own: the group kill misses them
                    with contextlib.suppress(psutil.Error):
                        worker.kill()
                raise
            assert code == 0, f"piwf-host exited with {code} on SIGTERM:\n{script.log()[-3000:]}"


class Targets:
    """Real things for requests to name, kept alive through the fuzz: parked runs waiting for a message,
    a checkpoint, a decision and an agent, and finished ones. The fuzz ends runs (cancels them, answers
    them, sends them their message): `top_up` starts new ones, and the id strategies read the lists
    as they are when a request is drawn."""

    KINDS = {"checkpoint": ("asks", None), "decision": ("decides", {"version": "1.0"}),
             "agent": ("asks_agent", None)}

    def __init__(self, conn: Any, proto: Any) -> None:
        self.conn, self.proto = conn, proto
        self.run_ids: list[str] = []
        self.request_ids: list[str] = []
        self.revisions: list[int] = [1]
        self.waiting: list[str] = []

    def _start(self, spec: str, input: Any) -> str:
        run_id: str = self.conn.ok("run.start", {"workflow": spec, "input": input})["receipt"]["run_id"]
        self.run_ids.append(run_id)
        return run_id

    def top_up(self) -> None:
        """At least two runs waiting for a message on `go`, and one pending request of each kind."""
        conn = self.conn
        parked = {run["run_id"] for run in conn.ok("run.list", {"status": "parked", "limit": 1000})["receipt"]["runs"]}
        self.waiting[:] = [run_id for run_id in self.waiting if run_id in parked]
        while len(self.waiting) < 2:
            self.waiting.append(self._start(f"{VALUES}:waits", None))
        listed = conn.ok("interaction.list")["receipt"]["requests"]
        for kind, (workflow, input) in self.KINDS.items():
            if not any(request["kind"] == kind for request in listed):
                self._start(self.proto.flow(workflow), input)

        def requests() -> list[dict[str, Any]] | None:
            found = conn.ok("interaction.list")["receipt"]["requests"]
            return found if set(self.KINDS) <= {request["kind"] for request in found} else None

        for request in wait_for(requests, 20, "a pending request of each kind"):
            if request["request_id"] not in self.request_ids:
                self.request_ids.append(request["request_id"])
                self.revisions.append(request["revision"])
        self.proto.wait_for(lambda: all(run_id in {run["run_id"] for run in conn.ok(
            "run.list", {"status": "parked", "limit": 1000})["receipt"]["runs"]} for run_id in self.waiting),
            20, "the message takers to wait")

    def pick(self, name: str) -> st.SearchStrategy[Any]:
        """One of the named list's items as it is when drawn (the list grows during the fuzz)."""
        items = {"run_id": self.run_ids, "waiting": self.waiting, "request_id": self.request_ids,
                 "revision": self.revisions}[name]
        return st.integers(0, 2**16).map(lambda index: items[index % len(items)])


# --- strategies ------------------------------------------------------------------------------------


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def _frame_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_frame_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_frame_depth(v) for v in value), default=0)
    return 0


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.integers(-3, 1000),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), st.binary(max_size=30))
HUGE = st.sampled_from([1_000, 70_000, 1_100_000, 3_000_000]).map(lambda n: "x" * n)
#: Values a run may hold (small JSON).
PLAIN = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=20)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                     max_leaves=8)
#: Values no run may hold: binary or NaN somewhere in them, or nested past MAX_VALUE_DEPTH (up to what a
#: frame holds: the value of a payload field starts 3 deep).
BAD = st.one_of(
    st.builds(lambda value, bad: {"ok": value, "bad": [bad]}, PLAIN,
              st.one_of(st.binary(max_size=20), st.binary(min_size=1, max_size=3),
                        st.sampled_from([float("nan"), float("inf"), float("-inf")]))),
    st.builds(_nested, st.integers(MAX_VALUE_DEPTH + 1, MAX_DEPTH - 3), PLAIN.filter(lambda v: not isinstance(
        v, (list, dict)))),
)
#: Any value a frame may carry.
VALUES_ANY = st.one_of(
    PLAIN, BAD, HUGE,
    st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                  st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                 max_leaves=12),
    st.builds(_nested, st.integers(0, MAX_DEPTH - 3), SCALARS),
)


def _strings(targets: Targets, name: str, aimed: bool) -> st.SearchStrategy[str]:
    """Strings for a str field: real ids for id fields, plausible words, and (unless `aimed`) odd and
    huge ones."""
    words = ["", " ", "\n", "run", "runs", "run.get", "confirm", "retry", "go", "operator", "checkpoint",
             "prefix", "r" * 201, "/tmp", "../x", "é", "\x00"]
    odd = st.one_of(st.sampled_from(words), st.text(max_size=40), HUGE)
    if name == "run_id":
        real = st.one_of(targets.pick("waiting"), targets.pick("run_id"))
    elif name == "request_id":
        real = targets.pick("request_id")
    elif name in ("workflow", "project_path", "destination"):
        real = st.sampled_from([f"{VALUES}:echo", f"{VALUES}:waits", f"{VALUES}:nothing", str(VALUES),
                                "/nonexistent/flow.py:x", "echo", "quick"])
    elif name == "topic":
        real = st.just("go")
    else:
        real = st.one_of(targets.pick("run_id"), st.sampled_from(words))
    return real if aimed else st.one_of(real, odd)


def _field(targets: Targets, name: str, kind: str, aimed: bool) -> st.SearchStrategy[Any]:
    right = {
        "str": _strings(targets, name, aimed),
        "int": st.one_of(st.integers(0, 50), targets.pick("revision"), st.integers(-2**63, 2**64 - 1)),
        "signed": st.one_of(st.integers(-50, 50), st.integers(-2**63, 2**64 - 1)),
        "num": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**63, 2**64 - 1)),
        "bool": st.booleans(),
        # content.upload's chunk: empty, small, and up to just under a chunk of content
        "bin": st.one_of(st.binary(max_size=64), st.just(b"x" * 1_000_000)),
        "any": st.one_of(BAD, PLAIN) if aimed else VALUES_ANY,
        "map": st.one_of(st.dictionaries(st.text(max_size=8), st.one_of(BAD, PLAIN), max_size=3),
                         st.fixed_dictionaries({"choice": st.sampled_from(["ship", "fix", "nope"])},
                                               optional={"input": st.one_of(BAD, PLAIN)})),
    }[kind]
    return right if aimed else st.one_of(right, right, right, VALUES_ANY)  # sometimes of any type


@st.composite
def requests(draw: st.DrawFn, name: str, targets: Targets, state_dir: Path) -> tuple[dict[str, Any],
                                                                                   dict[str, Any]]:
    """A payload and envelope fields for operation `name`: half of them aimed (every field of its type,
    ids of real things, values that are JSON or break one rule: past the door's first checks), half wild
    (missing, unknown and mistyped fields, odd and huge strings, any value)."""
    operation = OPERATIONS[name]
    aimed = draw(st.booleans())
    payload: dict[str, Any] = {}
    for field, (kind, required) in operation.payload.items():
        if required or draw(st.integers(0, 3)) < 3:
            payload[field] = draw(_field(targets, field, kind, aimed))
    if not aimed and draw(st.integers(0, 9)) == 0:
        payload[draw(st.text(min_size=1, max_size=10))] = draw(VALUES_ANY)
    if not aimed and payload and draw(st.integers(0, 9)) == 0:
        del payload[draw(st.sampled_from(sorted(payload)))]
    fields: dict[str, Any] = {}
    if operation.needs_run or draw(st.integers(0, 9)) == 0:
        fields["run_id"] = draw(targets.pick("run_id") if aimed else st.one_of(
            targets.pick("run_id"), st.text(min_size=1, max_size=20), st.sampled_from(["x" * 201, 5, b"run"])))
    if operation.needs_revision or draw(st.integers(0, 9)) == 0:
        fields["expected_revision"] = draw(targets.pick("revision") if aimed else st.one_of(
            targets.pick("revision"), st.integers(-5, 2**64 - 1), st.sampled_from([True, 1.5, "1"])))
    # Never stop the host under test, nor write a backup outside the test's directory, nor import a
    # module by name.
    if name == "host.stop" and not payload:
        payload["not_a_field"] = True
    destination = payload.get("destination")
    if isinstance(destination, str) and destination.startswith("/"):  # under the test's directory, however long
        payload["destination"] = str(state_dir / "backups") + "/" + destination.replace("..", "__").lstrip("/")
    workflow = payload.get("workflow")
    if isinstance(workflow, str) and ":" in workflow and not workflow.startswith("/"):
        payload["workflow"] = "/nonexistent/" + workflow
    return payload, fields


# --- the fuzz ----------------------------------------------------------------------------------------


def test_every_operation_answers_every_request_in_one_line_and_the_host_logs_no_traceback(
        fuzzed_host, state_dir: Path, proto) -> None:
    script, conn, log = fuzzed_host
    (state_dir / "backups").mkdir()  # where state.backup may write (see `requests`)
    targets = Targets(conn, proto)
    targets.top_up()
    log.assert_quiet("seeding")
    bystander = proto.Bystander(state_dir / "host.sock", client_id="fuzz-bystander")
    sent = [0]

    def send(name: str, payload: dict[str, Any], fields: dict[str, Any]) -> None:
        frame = proto.request_frame(name, payload, client_id="fuzz", **fields)
        body = msgpack.packb(frame, use_bin_type=True)
        # Well-formed frames only: malformed ones close the connection by design (test_bad_input.py).
        assume(len(body) <= MAX_FRAME_BYTES and _frame_depth(frame) <= MAX_DEPTH)
        sent[0] += 1
        if sent[0] % TOP_UP_EVERY == 0:
            targets.top_up()
        conn.send(frame)
        try:
            answer = conn.response(frame["request_id"], timeout=60)  # checked against the protocol by Conn
        except proto.Closed:
            pytest.fail(f"the host closed the connection on {name} {payload!r:.300}")
        conn.events.clear()
        log.assert_quiet(f"{name} {payload!r:.300} {fields!r:.100}")
        error = answer.get("error") or ""
        assert not HOST_FAILURE.search(error), f"{name} failed inside the host: {error}"

    def fuzz(name: str) -> None:
        @settings(max_examples=PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(request=requests(name, targets, state_dir))
        def one_operation(request: tuple[dict[str, Any], dict[str, Any]]) -> None:
            send(name, *request)

        one_operation()

    for name in sorted(OPERATIONS):
        fuzz(name)
        bystander.assert_serving()
    assert conn.request("host.status")["outcome"] == "accepted"
    log.assert_quiet("the fuzz")
    bystander.close()
    assert script.proc.poll() is None, "the host exited"


#: Requests the fuzz found the host failing on, kept as fixed cases: (operation, payload, envelope fields).
FOUND = {
    # discovery stat()ed the project's workflow directory, and a name too long for the file system
    # raised OSError (ENAMETOOLONG) out of run.start: a traceback in the log, an OSError to the client.
    "project_path_too_long": ("run.start", {"workflow": "x" * 1000, "project_path": "x" * 1000}, {}),
    "project_path_too_long_absolute": ("run.start", {"workflow": "echo", "project_path": "/" + "y" * 5000}, {}),
    # the backup's is_dir() of the destination's directory raised OSError (ENAMETOOLONG) alike.
    "backup_path_too_long": ("state.backup", {"destination": "/tmp/piwf-no-such-dir/" + ("y" * 200 + "/") * 30
                                                             + "state.db"}, {}),
}


@pytest.mark.parametrize("case", list(FOUND))
def test_what_the_fuzz_found_is_answered_in_one_line_without_a_traceback(case: str, fuzzed_host, proto) -> None:
    _script, conn, log = fuzzed_host
    name, payload, fields = FOUND[case]
    answer = conn.request(name, payload, **fields)  # checked against the protocol by Conn
    log.assert_quiet(f"{name} {case}")
    assert answer["outcome"] == "rejected" and not HOST_FAILURE.search(answer["error"]), answer
    assert "OSError" not in answer["error"], answer
    assert conn.request("host.status")["outcome"] == "accepted"

