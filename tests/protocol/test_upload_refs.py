"""Values sent ahead with `content.upload` and named in a request's `refs` (protocol/uploads.py), by a
client that does not play by the rules: whatever the references say, the request is refused with one
line, the host logs no error and every other client is still served."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Bystander, Conn, flow, request_frame

from piwf_actors import HostHandle
from piwf_actors.wire import pack
from piwf_actors.wire.content import digest_of


def upload(conn: Conn, data: bytes) -> str:
    digest = digest_of(data)
    conn.ok("content.upload", {"digest": digest, "offset": 0, "total": len(data), "data": data})
    return digest


def ref(path: list[Any], data: bytes, encoding: str) -> dict[str, Any]:
    return {"path": path, "digest": digest_of(data), "bytes": len(data), "encoding": encoding}


def send_with_refs(conn: Conn, operation: str, payload: dict[str, Any], refs: list[dict[str, Any]]) -> dict[str, Any]:
    frame = request_frame(operation, payload, client_id=conn.client_id, refs=refs)
    conn.send(frame)
    return conn.response(frame["request_id"], 10)


def test_refs_that_a_host_cannot_put_back_are_refused_and_the_host_serves_on(
        host: HostHandle, connect: Callable[..., Conn], bystander: Bystander, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    conn = connect(host)
    answers = []
    # JSON content nested far deeper than any frame may be (Python's JSON reader recurses on it).
    deep = b"[" * 100_000 + b"]" * 100_000
    upload(conn, deep)
    answers.append(send_with_refs(conn, "run.start", {"workflow": flow("quick"), "input": None},
                                  [ref(["payload", "input"], deep, "json")]))
    # Two references, the second replacing a value the first was put into.
    inner, outer = pack("inner"), pack(5)
    upload(conn, inner)
    upload(conn, outer)
    answers.append(send_with_refs(conn, "run.start", {"workflow": flow("quick"), "input": {"a": 1}},
                                  [ref(["payload", "input", "a"], inner, "msgpack"),
                                   ref(["payload", "input"], outer, "msgpack")]))
    for answer in answers:
        assert answer["outcome"] == "rejected", answer
    assert "nest" in answers[0]["error"], answers[0]
    bystander.assert_serving()
    assert conn.ok("host.status")["receipt"]["epoch"] == bystander.hello["host_epoch"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text[-2000:]
    assert not host.list_runs(limit=5)
