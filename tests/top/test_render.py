"""`piwf_actors.top.render.render` as a pure function, captured by a fixed-size recording console.

The snapshot is built by hand (no host) and the console state (`UiState`) is
set as the keys would set it (tests/top/test_state.py drives the keys). Most
screens are 80×24, the smallest terminal the console is made for: every pane
must be there, no line may be longer than 80 columns and the screen is
exactly 24 lines.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from top_fixtures import AMBIGUOUS, BUSY, DECISION, DETAIL, NOW, OLD_RUNS, RELEASE, snapshot

from piwf_actors.top.model import Snapshot, WorkerRow
from piwf_actors.top.render import HELP, render
from piwf_actors.top.state import Command, Confirm, Prompt, UiState, normalize
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_run import clock_time

REPO = Path(__file__).resolve().parents[2]


def screen(snap: Snapshot, state: UiState | None = None, width: int = 80, height: int | None = 24) -> str:
    console = Console(record=True, width=width, height=height or 25, color_system=None, file=io.StringIO())
    console.print(render(snap, width, height, normalize(state or UiState(), snap)))
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(row) <= width for row in lines), f"a line is wider than {width}:\n{text}"
    if height is not None:
        assert len(lines) == height, f"{len(lines)} lines, not {height}:\n{text}"
    return text


def has_all(text: str, *expected: str) -> None:
    for item in expected:
        assert item in text, f"{item!r} missing from:\n{text}"


def test_80x24_shows_every_pane() -> None:
    text = screen(snapshot())
    has_all(text, "epoch 7", "lease live", "heartbeat 1.5s ago", "pid 4242",  # header
            "queue depth 3", "12.5 commits/s", "31.0 commands/s", "clients 2",
            "workers  1 active, 1 idle, max 2", "5151", "37.5%", "50.0 MiB",
            "running 1", "done 30", "! 1 ambiguous effect",
            " runs ", "1/33", "sort newest", "…zdebusybusybusy0001", "release", "parked (waiting)",  # runs
            "deploy", " decisions ", "(1)", "1 other request(s)", "Ship 1.2.0?", "12 passed",  # decisions
            "1 ship (Ship it)", "2 stop", "3 fix (Needs changes) ✎",
            " events ", "node_started", "run_parked",  # events
            "? help", "q quit")  # footer
    assert "updated" not in text  # an optional column, left out below 100 columns


def test_wide_screen_adds_columns_and_full_ids() -> None:
    text = screen(snapshot(), width=140, height=None)
    has_all(text, "host pid 4242", "id h-1", "120 commits", "2 connections, 1 watches", "cancelled 0",
            "updated", "steps", BUSY, RELEASE, "R restart  e resolve")
    assert text.count("[red]x[/red]") >= 2  # the runs and the events


def test_ambiguous_run_is_marked_in_the_list() -> None:
    text = screen(snapshot())
    row = next(row for row in text.splitlines() if "deploy" in row)
    assert row.startswith("!") and "parked (ambiguous" in row


def test_selection_scrolls_into_view() -> None:
    snap = snapshot()
    target = OLD_RUNS[25]["run_id"]
    text = screen(snap, UiState(selected_run_id=target))
    has_all(text, "29/33")
    selected = next(row for row in text.splitlines() if row.startswith("▶"))
    assert "…" in selected and selected.split()[1].endswith(target[-10:])
    assert BUSY[-10:] not in text.split(" decisions ")[0].split("sort newest")[1]  # scrolled past the first run


def test_detail_pane_with_traceback() -> None:
    snap = snapshot(detail_run_id=BUSY, detail=DETAIL)
    state = UiState(selected_run_id=BUSY, detail_open=True)
    text = screen(snap, state)
    has_all(text, " detail ", BUSY, "failed", "rev 9", "error node_failed: build: RuntimeError: [bold]boom[/bold]",
            "traceback (last", "RuntimeError: [bold]boom[/bold]",  # the last traceback line
            "eff_unknown", "ambiguous", "e resolves", "build", "RuntimeError")
    assert " events " not in text  # the detail takes the events' place
    assert " runs " in text and " decisions " in text and "? help" in text
    tall = screen(snap, state, height=50)
    has_all(tall, 'File "/w/flow.py", line 12, in build', "raise RuntimeError(\"[bold]boom[/bold]\")",
            "prepare", "succeeded", '{"words":["a","b"]}', "eff_settled", "settled")
    assert "(last" not in tall  # the whole traceback fits


def test_detail_pane_without_traceback_from_an_older_host() -> None:
    detail = dict(DETAIL, error={"code": "node_failed", "message": "build: boom"})
    text = screen(snapshot(detail_run_id=BUSY, detail=detail), UiState(selected_run_id=BUSY, detail_open=True))
    has_all(text, "error node_failed: build: boom")
    assert "traceback" not in text


def test_detail_pane_shows_park_reason_and_waits_for_run_get() -> None:
    detail = dict(DETAIL, run_id=AMBIGUOUS, status="parked", park_reason="ambiguous_effect",
                  park_detail="eff_unknown", error=None)
    text = screen(snapshot(detail_run_id=AMBIGUOUS, detail=detail),
                  UiState(selected_run_id=AMBIGUOUS, detail_open=True))
    has_all(text, "park ambiguous_effect  eff_unknown", "e resolves: confirm or retry")
    waiting = screen(snapshot(), UiState(selected_run_id=AMBIGUOUS, detail_open=True))
    has_all(waiting, "reading run.get")


def test_confirmation_line_replaces_the_keys() -> None:
    state = UiState(confirm=Confirm((Command("run.cancel", f"cancel run {BUSY}", run_id=BUSY),)))
    text = screen(snapshot(), state)
    has_all(text, f"cancel run {BUSY}? y/n")
    assert "q quit" not in text
    has_all(text, "y sends it, any other key cancels")
    resolve = Confirm((Command("effect.resolve", "resolve effect eff_unknown as confirm (it happened)",
                               hotkey="c", label="confirm"),
                       Command("effect.resolve", "resolve effect eff_unknown as retry (rerun the node)",
                               hotkey="r", label="retry")), index=1)
    text = screen(snapshot(), UiState(confirm=resolve))
    has_all(text, "resolve effect eff_unknown as retry (rerun the node)? y/n", "c confirm", "r retry")
    long = Command("decision.answer", "answer ship to " + "a very long title " * 10)
    text = screen(snapshot(), UiState(confirm=Confirm((long,))))
    assert "…? y/n" in text  # the question is cut, its y/n never


def test_help_overlay_lists_every_key() -> None:
    text = screen(snapshot(), UiState(help_open=True))
    for key, meaning in HELP:
        has_all(text, key, meaning)
    has_all(text, "epoch 7", "any key closes the help")  # header and footer stay
    assert "1/33" not in text and "Ship 1.2.0?" not in text  # the panes make room for it
    has_all(screen(snapshot(), UiState(help_open=True), width=140, height=None), "this help")


def test_filter_line_and_filtered_list() -> None:
    text = screen(snapshot(), UiState(filter_text="rel", filtering=True))
    has_all(text, "/rel▏", "1/1 of 33  filter /rel", "release")
    assert "nightly" not in text and "deploy" not in text
    text = screen(snapshot(), UiState(filter_text="zzz"))
    has_all(text, "0/0 of 33", "no run matches the filter")


def test_untrusted_text_stays_literal() -> None:
    nasty = "[bold red]boom[/]\x1b[2J\nsecond line"
    runs = (dict(snapshot().runs[0], workflow=nasty),)
    decision = dict(DECISION, contract=dict(DECISION["contract"], title=nasty))
    text = screen(snapshot(runs=runs, decisions=(decision,)), width=140, height=None)
    assert "[bold red]boom[/]\ufffd[2J second line" in text  # markup shown as typed, no escape, one line
    assert "\x1b" not in text
    detail = dict(DETAIL, error=dict(DETAIL["error"], traceback=nasty))
    text = screen(snapshot(detail_run_id=BUSY, detail=detail), UiState(selected_run_id=BUSY, detail_open=True))
    has_all(text, "[bold red]boom[/]\ufffd[2J", "second line")


def test_empty_and_unreachable_host() -> None:
    text = screen(Snapshot(taken_at=NOW, error="no piwf host is listening on /x/host.sock"))
    has_all(text, "host unreachable: no piwf host is listening", "no runs", "nothing to decide", "no events",
            "no active workers")


def test_first_cpu_sample_shows_as_unknown() -> None:
    text = screen(snapshot(workers=(WorkerRow(5151, BUSY, 2, None, None), WorkerRow(6000, None, None, 0.0, 1024))))
    has_all(text, "workers  1 active, 1 idle, max 2  5151 … -  6000 idle 0.0% 1.0 KiB")


def test_prompt_and_status_line() -> None:
    state = UiState(prompt=Prompt("req_abc", "fix", "instructions", "What should change?", "bump it"),
                    status="answer ship to Ship 1.2.0: accepted")
    text = screen(snapshot(), state)
    has_all(text, "What should change?: bump it", "esc: cancel", "answer ship to Ship 1.2.0: accepted")


def test_decisions_focus_and_many_decisions_fit() -> None:
    decisions = tuple(dict(DECISION, request_id=f"req_{i}", contract=dict(DECISION["contract"], title=f"Ship {i}?"))
                      for i in range(6))
    text = screen(snapshot(decisions=decisions), UiState(focus="decisions", selected_request_id="req_4"))
    has_all(text, "(6)", "▶ …zde2ewffvd5yc88bm3j  approve  Ship 4?", "1 ship (Ship it)", "enter or 1-9 answer")


def test_a_paused_decision_shows_its_clock_stopped_not_its_old_deadline() -> None:
    paused = dict(DECISION, deadline_at=None, paused_remaining_s=754.0)
    text = screen(snapshot(decisions=(paused,)), UiState(focus="decisions"))
    has_all(text, "approve  Ship 1.2.0?", "(paused, 12m34s left)")
    assert "timeout" not in text.split("approve", 1)[1].split("\n", 1)[0]


def test_channel_health_and_ambiguous_deliveries() -> None:
    channels = {"configured": True, "profiles": [{"profile": "ops", "running": True},
                                                 {"profile": "night", "running": False,
                                                  "error": "credentials.toml is readable by group or others"}],
                "ambiguous": [{"profile": "ops", "message_id": "chf_1-1", "purpose": "delivery"}]}
    text = screen(snapshot(channels=channels), width=160, height=None)
    has_all(text, "channels  ops", "night (down: credentials.toml is readable by group or others)",
            "1 ambiguous delivery", "piwf channel recover")
    has_all(screen(snapshot(channels=channels)), "channels  ops  night (down", " runs ", " decisions ", " events ")
    assert "channels" not in screen(snapshot())  # nothing configured: no line


def test_channel_problems_and_messages_not_sent_yet() -> None:
    channels = {"configured": True,
                "profiles": [{"profile": "ops", "running": True,
                              "problem": "cannot read updates: error 401: Unauthorized"}],
                "undelivered": [{"profile": "ops", "message_id": "chf_2-3", "purpose": "delivery"}] * 2}
    text = screen(snapshot(channels=channels), width=160, height=None)
    has_all(text, "ops (cannot read updates: error 401: Unauthorized)", "2 not sent yet")


def test_a_standby_host_says_so_and_names_the_active_one() -> None:
    base = snapshot()
    host = {**base.host, "role": "standby", "active": {"host_id": "host-a", "epoch": 7, "live": True}}
    text = screen(snapshot(host=host), width=140, height=None)
    has_all(text, "standby (active: host-a)")
    assert "standby" in screen(snapshot(host=host))  # 80 columns: the role stays
    assert "standby" not in screen(snapshot())


def test_detail_pane_says_why_a_run_is_queued_and_what_a_parked_run_waits_for() -> None:
    queued = dict(DETAIL, status="queued", error=None, effects=[], nodes=[], waits=[],
                  queue_reason="waiting for a concurrency slot of deploy[cluster=eu] (2 of 2 in use)")
    text = screen(snapshot(detail_run_id=BUSY, detail=queued), UiState(selected_run_id=BUSY, detail_open=True))
    has_all(text, "queued waiting for a concurrency slot of deploy[cluster=eu] (2 of 2 in use)")
    waits = [{"wait_id": "wait_1", "node_id": "nap", "kind": "sleep", "wake_at": NOW + 12, "remaining_s": 9.0},
             {"wait_id": "wait_2", "node_id": "w", "kind": "message", "topic": "go", "deadline_at": NOW + 30,
              "clock": "running", "remaining_s": 27.0},
             {"wait_id": "wait_3", "node_id": "m", "kind": "children", "children_total": 10, "children_open": 3}]
    parked = dict(DETAIL, status="parked", park_reason="waiting", park_detail="wait_1", error=None, effects=[],
                  queue_reason=None, waits=waits)
    text = screen(snapshot(detail_run_id=BUSY, detail=parked), UiState(selected_run_id=BUSY, detail_open=True),
                  height=40)
    # Under the node that waits, relative to the snapshot's time (not the clock, nor run.get's remaining_s).
    has_all(text, "park waiting  wait_1", "├── nap   ⏳ waiting\n│   └── ⏳ sleeping until "
            f"{clock_time(NOW + 12, NOW)} (in 12s)",
            "├── w   ⏳ waiting\n│   └── ⏳ waiting for a message on 'go' (timeout in 30s)",
            "└── m   ⏳ waiting\n    └── ⏳ waiting for children: 3 of 10 open")


def tree_of(text: str) -> list[str]:
    """The detail pane's tree: the lines after its `nodes` heading, up to the footer."""
    lines = text.splitlines()
    start = next(index for index, row in enumerate(lines) if row.startswith("nodes"))
    return [row.rstrip() for row in lines[start + 1:] if not row.startswith("? help") and row.strip()]


def test_the_detail_tree_shows_a_decision_waiting_and_a_fan_out_with_its_children() -> None:
    children = [{"run_id": f"run_child{i}", "workflow": "wave", "status": status, "parent_node_id": "deploy/waves",
                 "child_index": i} for i, status in enumerate(["done", "parked", "queued"])]
    detail = dict(DETAIL, run_id=RELEASE, workflow="release", status="parked", park_reason="waiting", error=None,
                  effects=[], current_node="approve", park_detail="req_abc", nodes=[
                      {"node_id": "test", "status": "succeeded", "attempts": 1, "error": None,
                       "output": {"stdout": "12 passed", "stderr": "", "exit_code": 0, "duration_ms": 4}},
                      {"node_id": "deploy/waves", "status": "succeeded", "attempts": 1, "error": None,
                       "output": [1, 2, 3]},
                      {"node_id": "approve", "status": "waiting", "attempts": 1, "output": None, "error": None}],
                  waiting=[{"request_id": "req_abc", "node_id": "approve", "kind": "decision", "status": "pending",
                            "deadline_at": NOW + 3599, "clock": "running", "remaining_s": 3000.0}],
                  waits=[], children={"total": 3, "by_status": {}, "runs": children})
    text = screen(snapshot(detail_run_id=RELEASE, detail=detail), UiState(selected_run_id=RELEASE, detail_open=True),
                  height=44)
    assert tree_of(text) == [
        "├── test   ✓ succeeded  exit 0",
        "├── include deploy",
        "│   └── deploy/waves   ✓ succeeded  [1,2,3]",
        "│       ├── children: queued 1 · parked 1 · done 1",
        "│       ├── #1 run_child1  wave  parked",
        "│       └── #2 run_child2  wave  queued",
        "└── approve   ⏳ waiting   ◀ here",
        "    └── ⏳ waiting for an answer (decision, deadline in 59m59s)",
    ]


def test_a_long_tree_keeps_the_node_where_the_run_is_in_view_at_80x24() -> None:
    nodes = [{"node_id": f"step{i:02d}", "status": "succeeded", "attempts": 1, "output": {"i": i}, "error": None}
             for i in range(40)]
    nodes[25] = {"node_id": "step25", "status": "running", "attempts": 1, "output": None, "error": None}
    detail = dict(DETAIL, error=None, effects=[], status="running", current_node="step25", nodes=nodes)
    text = screen(snapshot(detail_run_id=BUSY, detail=detail), UiState(selected_run_id=BUSY, detail_open=True))
    rows = tree_of(text)
    assert any(row.startswith("├── step25   ▶ running   ◀ here") for row in rows), text
    assert "step00" not in text and "step39" not in text
    assert re.search(r"nodes \(lines \d+-\d+ of 40\)", text), text


def test_the_readme_tree_is_what_the_detail_pane_draws() -> None:
    readme = (REPO / "docs" / "cli.md").read_text()
    section = readme[readme.index("## piwf-top\n"):]
    block = re.search(r"The detail pane draws the selected run as a tree.*?```\n(.*?)```", section, flags=re.S)
    assert block is not None
    detail = dict(DETAIL, run_id=RELEASE, workflow="release", status="parked", park_reason="waiting", error=None,
                  effects=[], current_node="approve", nodes=[
                      {"node_id": "test", "status": "succeeded", "attempts": 1, "error": None,
                       "output": {"stdout": "12 passed", "stderr": "", "exit_code": 0, "duration_ms": 4}},
                      {"node_id": "approve", "status": "waiting", "attempts": 1, "output": None, "error": None}],
                  waiting=[{"request_id": "req_abc", "node_id": "approve", "kind": "decision", "status": "pending",
                            "deadline_at": NOW + 3597, "clock": "running", "remaining_s": 3597.0}], waits=[])
    # The graph the host stores for a run of the docs' `release` (the example file, loaded here).
    graph = build_graph(resolve(f"{REPO / 'examples' / 'workflows' / 'release.py'}:release", str(REPO)).workflow)
    text = screen(snapshot(detail_run_id=RELEASE, detail=detail, detail_graph=graph),
                  UiState(selected_run_id=RELEASE, detail_open=True), height=40)
    assert block.group(1).splitlines() == ["nodes", *tree_of(text)]

