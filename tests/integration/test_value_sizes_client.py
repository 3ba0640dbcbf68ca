"""Any value size, from a client over the Unix socket.

A client's frame is limited to `max_frame_bytes` (4 MiB), so the bundled client sends a request's
large values ahead of it with `content.upload` and the request refers to them (`refs`); the gateway
puts them back before the operation runs. Values of 1.5 MB, 3 MB and 20 MB go each way a client
gives a run a value: a run's input, a message (`message.send`, `piwf send --value @FILE`), the
answer to a checkpoint (after the README's "run a command, then ask a person": a command that prints
more than the shell output cap), a decision's text input, an agent's submission. The worker reports
the length and sha256 of what it got (`size_flows.seen`).

The upload itself: values come back exactly, bounded per connection, and every mistake (a missing
upload, a damaged one, a reference outside the payload, chunks out of order) is refused with one
line, no traceback in the host's log, and the connection stays usable.
"""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import rows
from wf.size_flows import SHELL_CAP, seen, text
from wf.size_host import SIZES, SizeHost, shared_host, size_flow

from piwf_actors.cli.main import main as piwf_main
from piwf_actors.client import Client
from piwf_actors.protocol.envelope import SCHEMA
from piwf_actors.wire import pack, recv_frame, send_frame
from piwf_actors.wire.content import CHUNK_BYTES, ContentRef, chunks, digest_of, encode
from piwf_actors.wire.limits import Limits

#: A limit small enough for a test to reach: what one connection may hold of uploads not yet used.
UPLOAD_LIMIT = 24 * 1024 * 1024


@pytest.fixture(scope="module")
def sized(request: pytest.FixtureRequest) -> Iterator[SizeHost]:
    yield from shared_host(request, limits=Limits(max_upload_bytes=UPLOAD_LIMIT))


@pytest.fixture
def client(sized: SizeHost) -> Iterator[Client]:
    with Client(sized.state_dir, timeout=60) as connected:
        yield connected


# --- every path a client's value takes ---------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_a_run_input_of_any_size_from_a_client(sized: SizeHost, client: Client, size: int) -> None:
    blob = text(size)
    run_id = client.start(size_flow("input_wait"), {"blob": blob})["run_id"]
    assert sized.done_output(run_id) == {"first": seen(blob), "again": seen(blob)}
    # And back: the client reads the stored input (a content marker in run.get) in chunks.
    assert client.resolve_content(client.get(run_id)["input"]) == {"blob": blob}


@pytest.mark.parametrize("size", SIZES)
def test_a_message_of_any_size_from_a_client(sized: SizeHost, client: Client, size: int) -> None:
    run_id = client.start(size_flow("message_wait"))["run_id"]
    sized.parked_for(run_id)
    payload = text(size, 6)
    receipt = client.send_message(run_id, "go", payload)
    assert receipt["status"] == "consumed"
    assert sized.done_output(run_id) == seen(payload)


@pytest.mark.parametrize("size", SIZES)
def test_piwf_send_takes_a_message_of_any_size_from_a_file(
        sized: SizeHost, tmp_path: Path, capsys: pytest.CaptureFixture[str], size: int) -> None:
    run_id = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    sized.parked_for(run_id)
    payload = text(size, 7)
    path = tmp_path / "message.json"
    path.write_text(json.dumps(payload))
    assert piwf_main(["--state-dir", str(sized.state_dir), "send", run_id, "go", "--value", f"@{path}"]) == 0
    assert "consumed by" in capsys.readouterr().out
    assert sized.done_output(run_id) == seen(payload)


@pytest.mark.parametrize("size", SIZES)
def test_a_command_printing_more_than_the_cap_then_a_person_answering_at_any_size(
        sized: SizeHost, client: Client, size: int) -> None:
    """The README's "run a command, then ask a person": the command prints `size` bytes, of which the
    output keeps the documented 1 MiB with a marker saying how much was cut; the person's answer is as
    large; answering resumes the run, which finishes."""
    run_id = client.start(size_flow("command_then_person"), {"size": size})["run_id"]
    request_id = sized.parked_for(run_id)
    note = text(size, 5)
    answer = client.request("checkpoint.answer", {"request_id": request_id, "input": {"note": note}})
    assert answer.outcome == "accepted", answer
    stdout = "x" * SHELL_CAP + f"\n…[truncated {size - SHELL_CAP} bytes]"
    assert sized.done_output(run_id) == {"stdout": seen(stdout), "answer": seen(note)}


@pytest.mark.parametrize("size", SIZES)
def test_a_decision_text_input_of_any_size(sized: SizeHost, client: Client, size: int) -> None:
    run_id = client.start(size_flow("decision_text"))["run_id"]
    request_id = sized.parked_for(run_id)
    [pending] = [r for r in sized.host.pending_interactions() if r.request_id == request_id]
    notes = text(size, 8)
    answer = client.request("decision.answer", {"request_id": request_id,
                                                "response": {"choice": "fix", "input": {"notes": notes}}},
                            expected_revision=pending.revision)
    assert answer.outcome == "accepted", answer
    assert sized.done_output(run_id) == seen(notes)


@pytest.mark.parametrize("size", SIZES)
def test_an_agent_submission_of_any_size(sized: SizeHost, client: Client, size: int) -> None:
    run_id = client.start(size_flow("agent_step"))["run_id"]
    request_id = sized.parked_for(run_id)
    body = text(size, 9)
    answer = client.request("interaction.submit", {"request_id": request_id, "submission_id": uuid.uuid4().hex,
                                                   "value": {"body": body}})
    assert answer.outcome == "accepted", answer
    assert sized.done_output(run_id) == seen(body)


# --- the upload itself, frame by frame ------------------------------------------------------------


class Raw:
    """One connection speaking the protocol frame by frame (what the bundled client does for you)."""

    def __init__(self, socket_path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(socket_path)
        assert recv_frame(self.sock)["type"] == "hello"

    def ask(self, operation: str, payload: dict[str, Any], **envelope: Any) -> dict[str, Any]:
        request_id = uuid.uuid4().hex
        send_frame(self.sock, {"schema": SCHEMA, "type": "request", "request_id": request_id,
                               "client_id": "raw-client", "idempotency_key": request_id, "operation": operation,
                               "payload": payload, **envelope})
        answer = recv_frame(self.sock)
        assert answer is not None and answer["request_id"] == request_id, answer
        return answer

    def upload(self, value: Any, path: tuple[str, ...] = ("payload", "payload")) -> dict[str, Any]:
        """Send `value` in chunks; its reference (to put in `refs`)."""
        data, encoding = encode(value)
        ref = ContentRef(path, digest_of(data), len(data), encoding)
        for chunk in chunks(ref, data):
            answer = self.ask("content.upload", {k: chunk[k] for k in ("digest", "offset", "total", "data")})
            assert answer["outcome"] == "accepted", answer
            assert answer["receipt"]["received"] == chunk["offset"] + len(chunk["data"])
        return ref.to_wire()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(sized: SizeHost) -> Iterator[Raw]:
    connection = Raw(str(sized.host.paths.socket))
    yield connection
    connection.close()


def _send_with_refs(raw: Raw, run_id: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
    return raw.ask("message.send", {"run_id": run_id, "topic": "go", "payload": None}, refs=refs)


def test_an_uploaded_value_is_put_back_in_its_request_and_used_once(sized: SizeHost, raw: Raw) -> None:
    run_id = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    sized.parked_for(run_id)
    payload = text(2_500_000, 10)
    ref = raw.upload(payload)
    answer = _send_with_refs(raw, run_id, [ref])
    assert answer["outcome"] == "accepted", answer
    assert sized.done_output(run_id) == seen(payload)
    # The request took the value: a second one naming it again finds nothing.
    other = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    again = _send_with_refs(raw, other, [ref])
    assert again["outcome"] == "rejected" and "missing or incomplete" in again["error"], again
    assert "content.upload" in again["error"]


def test_upload_mistakes_are_refused_with_one_line_and_the_connection_stays_usable(
        sized: SizeHost, raw: Raw, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    run_id = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    data, _encoding = encode(text(3 * CHUNK_BYTES, 11))
    digest = digest_of(data)
    refusals = [
        # A chunk that does not follow the ones before it.
        raw.ask("content.upload", {"digest": digest, "offset": CHUNK_BYTES, "total": len(data),
                                   "data": data[CHUNK_BYTES:2 * CHUNK_BYTES]}),
        # A value larger than this connection may hold.
        raw.ask("content.upload", {"digest": digest, "offset": 0, "total": UPLOAD_LIMIT + 1, "data": b"x"}),
        # Not a digest.
        raw.ask("content.upload", {"digest": "abc", "offset": 0, "total": 1, "data": b"x"}),
        # Data that is not binary.
        raw.ask("content.upload", {"digest": digest, "offset": 0, "total": 1, "data": "x"}),
        # A reference to nothing uploaded.
        _send_with_refs(raw, run_id, [{"path": ["payload", "payload"], "digest": digest, "bytes": len(data),
                                       "encoding": "msgpack"}]),
        # A reference outside the payload: the envelope is the client's own, never content.
        _send_with_refs(raw, run_id, [raw.upload("message.send", ("operation",))]),
        # A malformed reference.
        _send_with_refs(raw, run_id, [{"path": "payload", "digest": digest}]),
        raw.ask("host.status", {}, refs="not a list"),
    ]
    # Damaged: the bytes do not hash to the digest they were sent under.
    bad = "f" * 64
    raw.ask("content.upload", {"digest": bad, "offset": 0, "total": 4, "data": pack("abc")})
    refusals.append(_send_with_refs(raw, run_id, [{"path": ["payload", "payload"], "digest": bad, "bytes": 4,
                                                   "encoding": "msgpack"}]))
    # A value that would nest the request deeper than a frame may (32 levels).
    deep: Any = "bottom"
    for _ in range(31):
        deep = [deep]
    refusals.append(_send_with_refs(raw, run_id, [raw.upload(deep)]))
    for answer in refusals:
        assert answer["outcome"] == "rejected", answer
        assert "\n" not in answer["error"] and len(answer["error"]) <= 1000, answer
    assert "does not follow" in refusals[0]["error"] and "beyond the limit" in refusals[1]["error"]
    assert "outside payload" in refusals[5]["error"] and "nests deeper than 32" in refusals[-1]["error"]
    assert raw.ask("host.status", {})["outcome"] == "accepted"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text[-2000:]


def test_uploads_are_bounded_per_connection_and_go_with_it(sized: SizeHost, raw: Raw) -> None:
    """What a connection holds of values no request used yet is at most `max_upload_bytes`; another
    connection has its own; closing the connection lets go of them."""
    first = raw.upload(text(UPLOAD_LIMIT // 2, 12))
    raw.upload(text(UPLOAD_LIMIT // 2 - CHUNK_BYTES, 13))
    over = raw.ask("content.upload", {"digest": "e" * 64, "offset": 0, "total": 2 * CHUNK_BYTES,
                                      "data": b"x" * CHUNK_BYTES})
    assert over["outcome"] == "rejected" and "held at once" in over["error"], over
    other = Raw(str(sized.host.paths.socket))
    try:
        assert other.upload(text(UPLOAD_LIMIT // 2, 14))["bytes"] > 0  # a connection of its own
    finally:
        other.close()
    raw.close()
    again = Raw(str(sized.host.paths.socket))
    try:
        run_id = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
        answer = _send_with_refs(again, run_id, [first])
        assert answer["outcome"] == "rejected" and "missing or incomplete" in answer["error"], answer
    finally:
        again.close()


def test_the_client_reads_a_stored_value_back_in_chunks_that_fit_its_frame(sized: SizeHost, client: Client) -> None:
    run_id = client.start(size_flow("output_sleep"), {"size": 5_000_000})["run_id"]
    sized.done_output(run_id)
    [node] = [n for n in client.get(run_id)["nodes"] if n["node_id"] == "big"]
    marker = node["output"]
    digest = marker["$content"]
    first = client.request("content.read", {"digest": digest}).receipt
    assert len(first["data"]) == CHUNK_BYTES and first["total_bytes"] == marker["bytes"]
    assert client.read_json(marker) == text(5_000_000, 1)


def test_the_client_uploads_again_after_a_reconnect_and_the_request_counts_once(
        sized: SizeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads belong to a connection: when the connection drops after the request went out (its answer
    lost), the client connects again, uploads the values again and sends the same request, which the
    host answers `adopted`: one message, not two."""
    import piwf_actors.client.connection as client_module

    run_id = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    sized.parked_for(run_id)
    real = client_module.send_frame
    sent: list[str] = []

    def send(sock: socket.socket, value: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        real(sock, value, *args, **kwargs)
        sent.append(value["operation"])
        if sent.count("message.send") == 1 and value["operation"] == "message.send":
            sized.done_output(run_id)  # applied: the message was taken and the run went on
            sock.close()

    monkeypatch.setattr(client_module, "send_frame", send)
    payload = text(1_500_000, 15)
    with Client(sized.state_dir, timeout=60) as client:
        answer = client.request("message.send", {"run_id": run_id, "topic": "go", "payload": payload})
    assert answer.outcome == "adopted", answer
    assert sent == ["content.upload", "content.upload", "message.send"] * 2
    assert sized.done_output(run_id) == seen(payload)
    [count] = rows(sized.state_dir, "SELECT count(*) AS n FROM run_message WHERE run_id = ?", (run_id,))
    assert count["n"] == 1
