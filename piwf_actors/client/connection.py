"""`Client`: one connection to a host, requests with retries, watch iterators.

Every request carries a fresh request id and, unless the caller gives one,
a fresh idempotency key. If the connection drops before the answer
arrives, the client reconnects and sends the same request again with the
same key: a mutation that did happen is then answered `adopted`, never
applied twice.

A request of any size: one that would pack to more than the content budget
(`wire/content.py`, about 1 MiB) goes with its large values cut out of
its payload; each is sent first, in chunks, with `content.upload`, and the
request names them in its `refs` (docs/protocol.md, section 8). Uploads
belong to a connection, so after a reconnect they are sent again.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piwf_actors.errors import DecodeError, PiwfError
from piwf_actors.paths import StatePaths
from piwf_actors.wire import pack, recv_frame, send_frame
from piwf_actors.wire.content import FRAME_BUDGET, ContentRef, chunks, cut

SCHEMA = "piwf.client.v1"


def is_content_marker(value: Any) -> bool:
    """A view's stand-in for a value over 64 KiB (see docs/protocol.md, section 8)."""
    return isinstance(value, dict) and set(value) == {"$content", "bytes", "preview"} \
        and isinstance(value["$content"], str)


class HostNotRunning(PiwfError):
    """No host answers on the socket. `listening` is True when something accepted the connection but
    did not serve it (too many connections, no hello): a host may be there, busy."""

    code = "host_not_running"

    def __init__(self, socket_path: str, detail: str, *, listening: bool = False) -> None:
        super().__init__(f"no piwf host is listening on {socket_path} ({detail}); start one with `piwf-host`")
        self.socket_path = socket_path
        self.listening = listening


@dataclass(frozen=True, slots=True)
class Response:
    request_id: str | None
    outcome: str
    receipt: Any = None
    revision: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("accepted", "adopted")

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Response:
        return cls(frame.get("request_id"), str(frame.get("outcome")), frame.get("receipt"), frame.get("revision"),
                   frame.get("error"))


class ContentReader:
    """Reading large values behind content markers, for anything with a `request` method that answers
    `content.read` (the socket `Client`, the read-only `LocalStore`)."""

    def request(self, operation: str, payload: dict[str, Any] | None = None, *, run_id: str | None = None,
                expected_revision: int | None = None, idempotency_key: str | None = None) -> Response:
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (or database handle); a later request opens it again."""

    def read_content(self, digest: str) -> bytes:
        """All bytes of a stored value (its canonical JSON), read with `content.read` chunk by chunk."""
        data = bytearray()
        while True:
            chunk = self._ok(self.request("content.read", {"digest": digest, "offset": len(data)}))
            data += chunk["data"]
            if len(data) >= chunk["total_bytes"] or not chunk["data"]:
                return bytes(data)

    def read_json(self, marker: dict[str, Any]) -> Any:
        """The value behind a content marker `{"$content": digest, "bytes": n, "preview": …}`."""
        return json.loads(self.read_content(marker["$content"]))

    def resolve_content(self, value: Any) -> Any:
        """`value` with every content marker in it replaced by the value it stands for."""
        if isinstance(value, dict):
            if is_content_marker(value):
                return self.read_json(value)
            return {key: self.resolve_content(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve_content(item) for item in value]
        return value

    def run_graph(self, run_id: str) -> dict[str, Any] | None:
        """The graph document the host stored when the run started (`run.graph`; read with content.read
        when it is not inline): data to draw, never code to load (workflows/graph_data.py). None when the
        run has none — stored before hosts kept graphs, or a host too old to know `run.graph`. Raises
        PiwfError when the run is not there or the host cannot answer."""
        answer = self.request("run.graph", run_id=run_id)
        if answer.outcome == "rejected" and "'run.graph' is not available" in (answer.error or ""):
            return None
        receipt = self._ok(answer)
        if isinstance(receipt.get("graph"), dict):
            return dict(receipt["graph"])
        if not receipt.get("graph_sha256"):
            return None
        document = json.loads(self.read_content(receipt["graph_sha256"]))
        return document if isinstance(document, dict) else None

    def match_ids(self, kind: str, prefix: str, limit: int | None = None) -> tuple[list[str], bool]:
        """`ids.match`: the full ids of `kind` (run, request, effect, message) starting with `prefix`, and
        whether there are more than the `limit` returned."""
        payload: dict[str, Any] = {"kind": kind, "prefix": prefix}
        if limit is not None:
            payload["limit"] = limit
        receipt = self._ok(self.request("ids.match", payload))
        return list(receipt["matches"]), bool(receipt["more"])

    @staticmethod
    def _ok(answer: Response) -> Any:
        if not answer.ok:
            raise PiwfError(f"{answer.outcome}: {answer.error}")
        return answer.receipt


class Client(ContentReader):
    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, socket_path: str | None = None,
                 client_id: str | None = None, timeout: float = 30.0, retries: int = 2) -> None:
        self.socket_path = socket_path or str(StatePaths.resolve(state_dir).socket)
        self.client_id = client_id or f"client-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.retries = retries
        self.hello: dict[str, Any] | None = None
        self._sock: socket.socket | None = None
        self._events: collections.deque[dict[str, Any]] = collections.deque()

    # --- connection -------------------------------------------------------------------

    def connect(self) -> dict[str, Any]:
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise HostNotRunning(self.socket_path, exc.strerror or str(exc)) from None
        except PermissionError as exc:
            sock.close()
            raise HostNotRunning(self.socket_path, f"permission denied: {exc}") from None
        hello = recv_frame(sock)
        if hello is None or hello.get("type") != "hello":
            refusal = Response.from_frame(hello) if hello else None
            sock.close()
            raise HostNotRunning(self.socket_path, refusal.error if refusal and refusal.error else "no hello",
                                 listening=True)
        self._sock = sock
        self.hello = hello
        return hello

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        if self._sock is None:
            self.connect()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- requests -------------------------------------------------------------------------

    def request(self, operation: str, payload: dict[str, Any] | None = None, *, run_id: str | None = None,
                expected_revision: int | None = None, idempotency_key: str | None = None) -> Response:
        request_id = uuid.uuid4().hex
        frame: dict[str, Any] = {
            "schema": SCHEMA, "type": "request", "request_id": request_id, "client_id": self.client_id,
            "idempotency_key": idempotency_key or uuid.uuid4().hex, "operation": operation,
            "payload": payload or {},
        }
        if run_id is not None:
            frame["run_id"] = run_id
        if expected_revision is not None:
            frame["expected_revision"] = expected_revision
        body_size = len(pack(frame))
        uploads: dict[str, tuple[ContentRef, bytes]] = {}
        if body_size > FRAME_BUDGET:
            frame, contents = cut(frame, body_size, under=("payload",))
            frame["refs"] = [ref.to_wire() for ref, _ in contents]
            uploads = {ref.digest: (ref, data) for ref, data in contents}  # equal values go once
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                if self._sock is None:
                    self.connect()
                assert self._sock is not None
                for ref, data in uploads.values():
                    refused = self._upload(ref, data, request_id)
                    if refused is not None:
                        return refused
                send_frame(self._sock, frame)
                return self._await(request_id)
            except HostNotRunning:
                if attempt == self.retries:
                    raise
                last_error = None
            except TimeoutError:
                # No answer in time is not a lost connection: the host may still be
                # working on it (a backup), so the request is not sent again.
                self.close()
                raise TimeoutError(f"{operation}: no answer within {self.timeout:g} s") from None
            except (OSError, DecodeError, ConnectionError) as exc:
                last_error = exc
            self.close()
            time.sleep(min(0.1 * 2**attempt, 1.0))
        raise HostNotRunning(self.socket_path, f"connection lost: {last_error}")

    def _upload(self, ref: ContentRef, data: bytes, request_id: str) -> Response | None:
        """Send one value ahead of the request `request_id`, chunk by chunk, each answered before the next;
        None once it is all there, else the refusal, as the answer to that request."""
        assert self._sock is not None
        for chunk in chunks(ref, data):
            upload_id = uuid.uuid4().hex
            send_frame(self._sock, {
                "schema": SCHEMA, "type": "request", "request_id": upload_id, "client_id": self.client_id,
                "idempotency_key": upload_id, "operation": "content.upload",
                "payload": {"digest": chunk["digest"], "offset": chunk["offset"], "total": chunk["total"],
                            "data": chunk["data"]}})
            answer = self._await(upload_id)
            if not answer.ok:
                return Response(request_id, answer.outcome, None, None, answer.error)
        return None

    def _await(self, request_id: str) -> Response:
        assert self._sock is not None
        while True:
            frame = recv_frame(self._sock)
            if frame is None:
                raise ConnectionError("host closed the connection")
            if frame.get("type") == "event":
                self._events.append(frame)
                continue
            if frame.get("type") == "response" and frame.get("request_id") in (request_id, None):
                return Response.from_frame(frame)

    # --- watches ----------------------------------------------------------------------------

    def watch(self, topic: str, *, run_id: str | None = None, session_id: str | None = None,
              timeout: float | None = None, output_so_far: bool = False) -> Iterator[dict[str, Any]]:
        """Subscribe and yield events (each: subscription_id, topic, revision, payload).

        Stops when the host closes the connection; `timeout` bounds the wait
        for each next event (TimeoutError). `output_so_far` (a `run` watch):
        first the `node_output` its running node printed before this watch.
        """
        subscription_id = uuid.uuid4().hex[:16]
        payload: dict[str, Any] = {"subscription_id": subscription_id, "topic": topic}
        if output_so_far:
            payload["output_so_far"] = True
        if run_id:
            payload["run_id"] = run_id
        if session_id:
            payload["session_id"] = session_id
        answer = self.request("watch", payload)
        if not answer.ok:
            raise PiwfError(f"watch refused ({answer.outcome}): {answer.error}")
        assert self._sock is not None
        while True:
            while self._events:
                event = self._events.popleft()
                if event.get("subscription_id") in (subscription_id, None):
                    yield event
                    if event.get("topic") == "overflow":
                        return
            self._sock.settimeout(timeout)
            try:
                frame = recv_frame(self._sock)
            except TimeoutError:
                raise TimeoutError("no event within the timeout") from None
            finally:
                if self._sock is not None:
                    self._sock.settimeout(self.timeout)
            if frame is None:
                return
            if frame.get("type") == "event":
                self._events.append(frame)

    # --- typed helpers -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self._ok(self.request("host.status"))

    def start(self, workflow: str, input: Any = None, *, project_path: str | None = None,
              session_id: str | None = None, idempotency_key: str | None = None,
              priority: int | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"workflow": workflow, "input": input}
        if project_path:
            payload["project_path"] = str(Path(project_path).absolute())
        if session_id:
            payload["session_id"] = session_id
        if priority is not None:
            payload["priority"] = priority
        return self._ok(self.request("run.start", payload, idempotency_key=idempotency_key))

    def send_message(self, run_id: str, topic: str, payload: Any = None, *,
                     idempotency_key: str | None = None, strict: bool = False) -> dict[str, Any]:
        """Put `payload` into the run's mailbox on `topic` (`message.send`); a resend under the same
        idempotency key is the same message. Returns the receipt {message_id, seq, status, topics?, …};
        `strict` refuses a topic no node of the run's workflow waits on."""
        request = {"run_id": run_id, "topic": topic, "payload": payload, **({"strict": True} if strict else {})}
        return self._ok(self.request("message.send", request, idempotency_key=idempotency_key))

    def get(self, run_id: str) -> dict[str, Any]:
        return self._ok(self.request("run.get", run_id=run_id))

    def wait(self, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Follow the run with a watch until it is done, failed or cancelled; returns the run view."""
        deadline = time.monotonic() + timeout
        watcher = Client(socket_path=self.socket_path, client_id=self.client_id, timeout=self.timeout)
        try:
            for event in watcher.watch("run", run_id=run_id, timeout=max(deadline - time.monotonic(), 0.01)):
                if event.get("topic") != "run":
                    continue  # a running shell node's live output (`node_output`)
                view = event.get("payload") or {}
                if view.get("status") in ("done", "failed", "cancelled"):
                    return view
                if time.monotonic() >= deadline:
                    break
        finally:
            watcher.close()
        raise TimeoutError(f"run {run_id} did not finish within {timeout} s")
