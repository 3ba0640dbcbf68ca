"""Checkpoints, session messages and the `interactions` watch, through the client socket."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from interactions_support import Harness, assert_one_line, listed, start, wait_run, wait_waiting

SESSION = "sess-cp"
ANSWER = {"items": [1, "two", {"three": 3.5}], "ok": True, "nothing": None, "text": "héllo ✓"}


def _next_event(events: Iterator[dict[str, Any]], timeout: float, what: str,
                match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first event from the watch for which `match(payload)` holds (the watch's own
    per-event timeout bounds each wait; a generator that raised is finished, so no retry)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = next(events)
        except (TimeoutError, StopIteration):
            break
        if match(event["payload"]):
            return event
    pytest.fail(f"no interactions event with {what} within {timeout} s")


def test_checkpoint_answer_becomes_the_output_and_messages_wait_for_ack(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    watcher = ix.client("watcher")
    events = watcher.watch("interactions", session_id=SESSION, timeout=15.0)
    first = next(events)  # the current view, at once
    assert first["topic"] == "interactions" and "requests" in first["payload"]

    run_id = start(client, "checkpointed", {"version": "2.0"}, session_id=SESSION)

    def has_request(payload: dict[str, Any]) -> bool:
        return any(r["run_id"] == run_id for r in payload["requests"])

    event = _next_event(events, 15, "the checkpoint's request", has_request)
    request = next(r for r in event["payload"]["requests"] if r["run_id"] == run_id)
    assert request["kind"] == "checkpoint" and request["node_id"] == "ask"
    assert request["contract"]["prompt"] == "What should 2.0 contain?"
    assert request["session_id"] == SESSION
    wait_waiting(client, run_id)

    answer = client.request("checkpoint.answer", {"request_id": request["request_id"], "input": ANSWER})
    assert answer.outcome == "accepted", answer
    view = wait_run(client, run_id)
    assert view["status"] == "done", view
    ask = next(node for node in view["nodes"] if node["node_id"] == "ask")
    assert ask["output"] == ANSWER
    assert view["output"] == {"message": "got 3 item(s)"}

    # A second answer to a settled checkpoint is a conflict.
    again = client.request("checkpoint.answer", {"request_id": request["request_id"], "input": {"n": 2}})
    assert again.outcome == "conflict", again
    assert_one_line(again.error)

    pending = listed(client, SESSION)
    assert [r for r in pending["requests"] if r["run_id"] == run_id] == []
    messages = [m for m in pending["messages"] if m["run_id"] == run_id]
    by_kind = {m["kind"]: m for m in messages}
    assert sorted(by_kind) == ["notify", "run_summary"], messages
    assert by_kind["notify"]["body"] == {"node_id": "tell", "message": "got 3 item(s)"}
    assert by_kind["run_summary"]["body"] == {"run_id": run_id, "workflow": "checkpointed", "status": "done"}
    assert listed(client, "another-session")["messages"] == []

    for message in messages:
        acked = client.request("interaction.ack", {"message_id": message["message_id"]})
        assert acked.outcome == "accepted", acked
    assert [m for m in listed(client, SESSION)["messages"] if m["run_id"] == run_id] == []
    # The watch sees the outbox emptied too.
    _next_event(events, 10, "the messages acknowledged",
                lambda payload: not any(m["run_id"] == run_id for m in payload["messages"]))
    missing = client.request("interaction.ack", {"message_id": "msg_does_not_exist"})
    assert missing.outcome == "notFound", missing
