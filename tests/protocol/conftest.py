"""Client protocol v1 against a live host: raw-socket connections and hosts with chosen limits.

Every frame a `Conn` receives is checked against the normative envelope
(docs/protocol.md): a response has exactly the allowed keys, one outcome of
the spec list and at most a one-line `error` of <= 1,000 characters; an event
never repeats its subscription's previous payload. So every test checks
those rules for every answer it sees, whatever else it asserts.

Frames are written by hand (`struct.pack(">I", n)` + msgpack bytes) so that
tests can send exactly the bytes they mean, malformed ones included.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import psutil
import pytest
from testsupport import HOST_DEFAULTS, POLL_S, live_children, wait_for

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.wire.limits import Limits

SCHEMA = "piwf.client.v1"
OUTCOMES = ("accepted", "adopted", "rejected", "conflict", "notFound", "unavailable", "claimLost")
RESPONSE_KEYS = {"schema", "type", "request_id", "outcome", "revision", "receipt", "error"}
EVENT_KEYS = {"schema", "type", "subscription_id", "topic", "revision", "payload"}
HELLO_KEYS = {"schema", "type", "connection_id", "version", "host_epoch"}
FLOWS = Path(__file__).resolve().parent / "wf" / "flows.py"


def flow(attr: str) -> str:
    """The `run.start` workflow spec of a workflow in wf/flows.py."""
    return f"{FLOWS}:{attr}"


def frame_bytes(value: Any) -> bytes:
    """A frame holding `value` packed as msgpack (str as str, bytes as bin)."""
    return body_frame(msgpack.packb(value, use_bin_type=True))


def body_frame(body: bytes) -> bytes:
    """A frame around raw body bytes."""
    return struct.pack(">I", len(body)) + body


def request_frame(operation: str, payload: dict[str, Any] | None = None, /, **fields: Any) -> dict[str, Any]:
    """A valid request map; `fields` override or add envelope fields (value `...` removes one)."""
    frame: dict[str, Any] = {"schema": SCHEMA, "type": "request", "request_id": uuid.uuid4().hex,
                             "client_id": "proto-tests", "idempotency_key": uuid.uuid4().hex,
                             "operation": operation, "payload": {} if payload is None else payload}
    for key, value in fields.items():
        if value is ...:
            frame.pop(key, None)
        else:
            frame[key] = value
    return frame


def check_response(frame: dict[str, Any]) -> None:
    assert frame.get("schema") == SCHEMA, frame
    assert set(frame) <= RESPONSE_KEYS, f"unexpected response keys {set(frame) - RESPONSE_KEYS}: {frame}"
    assert {"schema", "type", "request_id", "outcome"} <= set(frame), frame
    assert isinstance(frame["outcome"], str) and frame["outcome"] in OUTCOMES, frame
    assert frame["request_id"] is None or isinstance(frame["request_id"], str), frame
    if "error" in frame:
        error = frame["error"]
        assert isinstance(error, str) and error, frame
        assert len(error) <= 1000, f"error of {len(error)} characters"
        assert "\n" not in error and "\r" not in error, f"error is not one line: {error!r}"
    if "revision" in frame:
        assert isinstance(frame["revision"], int) and not isinstance(frame["revision"], bool), frame


class Closed(Exception):
    """The host closed the connection (EOF) while a frame was awaited."""


class Conn:
    """One raw client connection: bytes out, checked frames in."""

    def __init__(self, socket_path: str | Path, *, client_id: str = "proto-tests", expect_hello: bool = True,
                 timeout: float = 10.0) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(socket_path))
        self._buffer = bytearray()
        self.events: list[dict[str, Any]] = []
        self.responses: dict[str | None, list[dict[str, Any]]] = {}
        self._last_payload: dict[Any, Any] = {}
        self.eof = False
        #: Whether EOF inside a frame is tolerated (a connection the host lets go mid-send).
        self.allow_truncated = False
        self.truncated = False
        self.hello: dict[str, Any] | None = None
        if expect_hello:
            hello = self.recv()
            assert hello is not None and hello.get("type") == "hello", hello
            assert set(hello) == HELLO_KEYS and hello["schema"] == SCHEMA, hello
            self.hello = hello

    # --- bytes ---------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, frame: dict[str, Any]) -> None:
        self.send_bytes(frame_bytes(frame))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # --- frames ------------------------------------------------------------------------

    def _take_frame(self) -> dict[str, Any] | None:
        if len(self._buffer) < 4:
            return None
        (length,) = struct.unpack(">I", self._buffer[:4])
        if len(self._buffer) < 4 + length:
            return None
        body = bytes(self._buffer[4:4 + length])
        del self._buffer[:4 + length]
        frame = msgpack.unpackb(body, raw=False, strict_map_key=True)
        assert isinstance(frame, dict), frame
        self._check(frame)
        return frame

    def _check(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "response":
            check_response(frame)
        elif kind == "event":
            assert set(frame) == EVENT_KEYS and frame["schema"] == SCHEMA, frame
            key = frame["subscription_id"]
            if frame["topic"] != "overflow":
                assert frame["payload"] != self._last_payload.get(key, object()), (
                    f"two identical consecutive events for subscription {key}: {frame}")
                self._last_payload[key] = frame["payload"]
        else:
            assert kind == "hello", frame

    def recv(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next frame (any type); None on EOF. Raises TimeoutError."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            if self.eof:
                if self._buffer and not self.allow_truncated:
                    pytest.fail(f"EOF inside a frame ({len(self._buffer)} bytes left)")
                self.truncated = bool(self._buffer)
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame within the timeout")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise TimeoutError("no frame within the timeout") from None
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
            self._buffer += data

    def _dispatch(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "event":
            self.events.append(frame)
        elif frame["type"] == "response":
            self.responses.setdefault(frame["request_id"], []).append(frame)

    def response(self, request_id: str | None, timeout: float | None = None) -> dict[str, Any]:
        """The response to `request_id` (events and other responses are kept)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            queued = self.responses.get(request_id)
            if queued:
                return queued.pop(0)
            frame = self.recv(max(deadline - time.monotonic(), 0.001))
            if frame is None:
                raise Closed(f"connection closed while waiting for the response to {request_id}")
            self._dispatch(frame)

    def event(self, subscription_id: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The next event (of `subscription_id` if given); raises TimeoutError or Closed."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            for index, event in enumerate(self.events):
                if subscription_id is None or event["subscription_id"] == subscription_id:
                    return self.events.pop(index)
            frame = self.recv(max(deadline - time.monotonic(), 0.001))
            if frame is None:
                raise Closed("connection closed while waiting for an event")
            self._dispatch(frame)

    # --- requests --------------------------------------------------------------------------

    def send_request(self, operation: str, payload: dict[str, Any] | None = None, /, **fields: Any) -> str:
        frame = request_frame(operation, payload, client_id=self.client_id, **fields)
        self.send(frame)
        return frame["request_id"]

    def request(self, operation: str, payload: dict[str, Any] | None = None, /, *, timeout: float | None = None,
                **fields: Any) -> dict[str, Any]:
        """Send one request and return its response (fields: run_id, expected_revision, idempotency_key …)."""
        fields = {k: v for k, v in fields.items() if v is not None}
        request_id = self.send_request(operation, payload, **fields)
        return self.response(request_id, timeout)

    def ok(self, operation: str, payload: dict[str, Any] | None = None, /, **fields: Any) -> dict[str, Any]:
        answer = self.request(operation, payload, **fields)
        assert answer["outcome"] == "accepted", answer
        return answer

    # --- closing -----------------------------------------------------------------------------

    def assert_closed(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait for EOF; return the frames that arrived before it."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self.recv(max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                pytest.fail(f"the host did not close the connection within {timeout} s (got {frames})")
            if frame is None:
                return frames
            frames.append(frame)

    def is_open(self) -> bool:
        """True if no EOF is pending (does not consume frames)."""
        if self.eof:
            return False
        readable, _, _ = select.select([self.sock], [], [], 0)
        if not readable:
            return True
        data = self.sock.recv(1 << 20, socket.MSG_PEEK)
        return bool(data)


class Bystander(Conn):
    """A second client that stays connected through a test and must keep getting answers."""

    def assert_serving(self) -> dict[str, Any]:
        answer = self.request("host.status", timeout=5)
        assert answer["outcome"] == "accepted", answer
        assert answer["receipt"]["epoch"] == self.hello["host_epoch"]
        return answer["receipt"]

    def connections(self) -> int:
        return self.assert_serving()["gateway"]["connections"]

    def wait_connections(self, count: int, timeout: float = 5.0) -> None:
        wait_for(lambda: self.connections() == count, timeout, f"{count} open connection(s) on the host")


# --- fixtures --------------------------------------------------------------------------------

def host_config(state_dir: Path, limits: Limits | dict[str, Any] | None = None, **config: Any) -> HostConfig:
    if isinstance(limits, dict):
        limits = Limits(**limits)
    settings = {**HOST_DEFAULTS, **config}
    if limits is not None:
        settings["limits"] = limits
    return HostConfig(state_dir=state_dir, **settings)


@pytest.fixture
def make_host(state_dir: Path) -> Iterator[Callable[..., HostHandle]]:
    """`make_host(limits=Limits(...) or dict, **config)`: a host on the test's state directory.

    Teardown stops it, checks that the socket file is gone, and kills (with a
    warning) any child process it left behind.
    """
    before = live_children()
    hosts: list[HostHandle] = []

    def make(limits: Limits | dict[str, Any] | None = None, **config: Any) -> HostHandle:
        host = start_host(host_config(state_dir, limits, **config))
        hosts.append(host)
        return host

    yield make
    for host in reversed(hosts):
        host.stop("test teardown")
    problems = []
    for host in hosts:
        if host.paths.socket.exists():
            problems.append(f"socket {host.paths.socket} left behind")
    deadline = time.monotonic() + 10
    while (left := live_children() - before) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for pid in left:
        # Not a protocol failure, so a warning: a worker whose run ended just as the host
        # stopped can outlive host.stop() (the scheduler stops with the worker's hand-back
        # still in its mailbox); the next host start would reap it as an orphan.
        try:
            process = psutil.Process(pid)
            warnings.warn(f"host left child {pid} {' '.join(process.cmdline())[:100]!r} running after stop()",
                          stacklevel=1)
            process.kill()
        except psutil.Error:
            pass
    if problems:
        pytest.fail("teardown: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def connect() -> Iterator[Callable[..., Conn]]:
    """`connect(host, **kwargs)`: a raw `Conn` to the host, closed at teardown."""
    conns: list[Conn] = []

    def open_(host: HostHandle, cls: type[Conn] = Conn, **kwargs: Any) -> Conn:
        conn = cls(host.paths.socket, **kwargs)
        conns.append(conn)
        return conn

    yield open_
    for conn in conns:
        conn.close()


@pytest.fixture
def host(make_host: Callable[..., HostHandle]) -> HostHandle:
    """A host with the default limits."""
    return make_host()


@pytest.fixture
def bystander(host: HostHandle, connect: Callable[..., Conn]) -> Bystander:
    """A client connected to `host` before the test does anything."""
    conn = connect(host, Bystander, client_id="bystander")
    conn.assert_serving()
    return conn  # type: ignore[return-value]


def wait_run(conn: Conn, run_id: str, statuses: tuple[str, ...] = ("done", "failed", "cancelled"),
             timeout: float = 20.0) -> dict[str, Any]:
    """Poll `run.get` on `conn` until the run reaches one of `statuses`; returns the view."""
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        answer = conn.request("run.get", run_id=run_id)
        assert answer["outcome"] == "accepted", answer
        seen["view"] = answer["receipt"]
        return answer["receipt"] if answer["receipt"]["status"] in statuses else None

    return wait_for(reached, timeout, lambda: f"run {run_id} to reach {statuses}: {seen.get('view')}")


@pytest.fixture(scope="session")
def proto() -> Any:
    """This module's helpers (flow, frame_bytes, body_frame, request_frame, wait_for, wait_run, Conn …),
    for test modules, which cannot import a conftest by name."""
    return _THIS_MODULE


# Captured while this module is being imported: every conftest.py without a
# package is named "conftest", so sys.modules["conftest"] may later be another one.
_THIS_MODULE = sys.modules[__name__]
