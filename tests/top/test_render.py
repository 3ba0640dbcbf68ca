"""`piwf_actors.top.render.render` as a pure function, captured by a fixed-width recording console.

The snapshot is built by hand (no host); the console state fields (selection,
prompt, status) are set as the app would set them. Key handling of the app
(`Ui`, `parse_keys`) is checked here too, since it is pure as well.
"""

from __future__ import annotations

import dataclasses

from rich.console import Console

from piwf_actors.top.app import Answer, Ui, parse_keys
from piwf_actors.top.model import EventRow, Prompt, Snapshot, WorkerRow
from piwf_actors.top.render import render

NOW = 1_800_000_000.0

DECISION = {
    "request_id": "req_abc", "run_id": "run_decide", "node_id": "approve", "kind": "decision", "revision": 3,
    "status": "pending", "deadline_at": None, "created_at": NOW - 5,
    "contract": {"title": "Ship 1.2.0?", "summary": "12 passed",
                 "choices": {"ship": {"label": "Ship it", "input": None}, "stop": {"label": "Stop", "input": None},
                             "fix": {"label": "Needs changes",
                                     "input": {"name": "instructions", "prompt": "What should change?"}}}},
}


def snapshot(**changes: object) -> Snapshot:
    base = Snapshot(
        taken_at=NOW,
        host={"pid": 4242, "epoch": 7,
              "lease": {"epoch": 7, "host_id": "h-1", "live": True, "heartbeat_at": NOW - 1.5,
                        "expires_at": NOW + 13.5},
              "runs": {"queued": 1, "starting": 0, "running": 2, "parked": 1, "done": 9, "failed": 0,
                       "cancelled": 0},
              "workers": {"max": 2, "active": [{"run_id": "run_busy", "pid": 5151, "generation": 2}], "idle": 1},
              "writer": {"queue_depth": 3, "commits": 120, "commands": 300, "commits_per_s": 12.5,
                         "commands_per_s": 31.0},
              "gateway": {"connections": 2, "watches": 1, "requests": 40}},
        runs=({"run_id": "run_busy", "workflow": "[red]x[/red]", "status": "running", "park_reason": None,
               "current_node": "build", "steps": 4, "revision": 5, "updated_at": NOW - 2},
              {"run_id": "run_decide", "workflow": "release", "status": "parked", "park_reason": "waiting",
               "current_node": "approve", "steps": 1, "revision": 3, "updated_at": NOW - 5}),
        decisions=(DECISION,),
        other_requests=1,
        workers=(WorkerRow(5151, "run_busy", 2, 37.5, 50 * 1024 * 1024),),
        events=(EventRow("run_busy", "[red]x[/red]", 9, "node_started", "build", NOW - 2, {"attempt": 1}),
                EventRow("run_decide", "release", 4, "run_parked", "approve", NOW - 5, None)),
        selected_request_id="req_abc",
    )
    return dataclasses.replace(base, **changes)


def screen(snap: Snapshot, width: int = 100) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(render(snap, width))
    return console.export_text()


def test_render_shows_every_section() -> None:
    text = screen(snapshot())
    for expected in ("epoch 7", "lease live", "heartbeat 1.5s ago", "host pid 4242", "queue depth 3", "1 active, 1 idle, max 2",
                     "12.5 commits/s", "31.0 commands/s", "running 2", "done 9", "5151",
                     "37.5", "50.0 MiB", "run_busy", "run_decide", "build", "parked (waiting)",
                     "pending decisions (1)", "1 other request(s)", "Ship 1.2.0?", "12 passed", "1 ship",
                     "2 stop", "3 fix", "recent events", "node_started", "run_parked", "q quit"):
        assert expected in text, f"{expected!r} missing from:\n{text}"


def test_untrusted_text_stays_literal() -> None:
    text = screen(snapshot())
    assert "[red]x[/red]" in text  # in the runs table (and the events table, when wide)
    wide = screen(snapshot(), width=140)
    assert wide.count("[red]x[/red]") >= 2


def test_empty_and_unreachable_host() -> None:
    text = screen(Snapshot(taken_at=NOW, error="no piwf host is listening on /x/host.sock"))
    assert "host unreachable: no piwf host is listening" in text
    assert "no runs" in text and "nothing to decide" in text and "no events" in text
    assert "no active workers" in text


def test_first_cpu_sample_shows_as_unknown_and_narrow_drops_columns() -> None:
    text = screen(snapshot(workers=(WorkerRow(5151, "run_busy", 2, None, None), WorkerRow(6000, None, None, 0.0, 1024))),
                  width=80)
    assert "…" in text and "idle" in text and "1.0 KiB" in text
    assert "updated" not in text  # an optional column, left out when narrow


def test_prompt_and_status_line() -> None:
    text = screen(snapshot(prompt=Prompt("req_abc", "fix", "instructions", "What should change?", "bump it"),
                           status="answered ship to approve: accepted"))
    assert "What should change?: bump it" in text and "esc cancel" in text
    assert "answered ship to approve: accepted" in text


def test_keys_select_and_answer() -> None:
    assert parse_keys("jk\x1b[A\x1b[B\r1\x7f\x1b") == ["j", "k", "up", "down", "enter", "1", "backspace", "escape"]
    other = dict(DECISION, request_id="req_other", run_id="run_other")
    snap = snapshot(decisions=(DECISION, other), selected_request_id=None)
    ui = Ui()
    assert ui.view(snap).selected_request_id == "req_abc"
    assert ui.handle("j", snap) is None and ui.selected_request_id == "req_other"
    assert ui.handle("down", snap) is None and ui.selected_request_id == "req_abc"
    answer = ui.handle("1", snap)
    assert isinstance(answer, Answer) and answer.choice == "ship" and answer.request["revision"] == 3
    ui.handle("l", snap)
    ui.handle("l", snap)
    assert ui.handle("enter", snap) is None and ui.prompt is not None  # `fix` needs text
    for key in "ok!":
        ui.handle(key, snap)
    ui.handle("backspace", snap)
    answer = ui.handle("enter", snap)
    assert isinstance(answer, Answer) and answer.choice == "fix" and answer.input == {"instructions": "ok"}
    assert ui.handle("9", snap) is None and "no choice 9" in ui.status
    assert ui.handle("q", snap) == "quit"


def test_render_shows_channel_health_and_ambiguous_deliveries() -> None:
    channels = {"configured": True, "profiles": [{"profile": "ops", "running": True},
                                                 {"profile": "night", "running": False,
                                                  "error": "credentials.toml is readable by group or others"}],
                "ambiguous": [{"profile": "ops", "message_id": "chf_1-1", "purpose": "delivery"}]}
    text = screen(snapshot(channels=channels), width=160)
    assert "channels" in text and "ops" in text
    assert "night (down: credentials.toml is readable by group or others)" in text
    assert "1 ambiguous delivery" in text and "piwf channel recover" in text
    assert "channels" not in screen(snapshot())  # nothing configured: no line
