"""The keys of `piwf-top`, driven through the pure `step` without a host or a terminal.

`parse_keys` turns terminal bytes into key names; `step(state, key,
snapshot)` returns the new `UiState` and at most one outcome. The rule under
test above all: nothing is sent by a single key — every `Command` comes out
of `step` only for a `y` on its confirmation line. `send` and the gatherer
are checked against a fake client that records requests.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from top_fixtures import AMBIGUOUS, BUSY, DECISION, DETAIL, OLD_RUNS, RELEASE, snapshot

from piwf_actors.client import Response
from piwf_actors.client.connection import ContentReader
from piwf_actors.top.app import send
from piwf_actors.top.keys import parse_keys
from piwf_actors.top.model import Gatherer, Snapshot
from piwf_actors.top.render import HELP
from piwf_actors.top.state import QUIT, Command, Outcome, UiState, normalize, step, visible_runs
from piwf_actors.workflows import define_workflow, edge, shell
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_data import graph_document


def release() -> Any:
    return define_workflow(name="release", start_at="test", nodes={"test": shell(command=["pytest"]),
                                                                   "ship": shell(command=["make", "ship"])},
                           edges=[edge("test", "ship")])


def press(state: UiState, keys: Iterable[str], snap: Snapshot) -> tuple[UiState, list[Outcome]]:
    """Apply `keys` one by one; the outcomes of those that had one."""
    outcomes: list[Outcome] = []
    for key in keys:
        state, outcome = step(state, key, snap)
        if outcome is not None:
            outcomes.append(outcome)
    return state, outcomes


def start(snap: Snapshot, **changes: Any) -> UiState:
    return normalize(UiState(**changes), snap)


def test_parse_keys() -> None:
    assert parse_keys("jk\x1b[A\x1b[B\r1\x7f\x1b") == ["j", "k", "up", "down", "enter", "1", "backspace", "escape"]
    assert parse_keys("\x1b[5~\x1b[6~\x1b[H\x1bOF\t\x1b[Z\x03") == [
        "pgup", "pgdn", "home", "end", "tab", "shift-tab", "ctrl-c"]
    # An unknown sequence is one key: its `1` and `5` are not choices.
    assert parse_keys("\x1b[15~y") == ["unknown", "y"]
    assert parse_keys("\x1b\x1b") == ["escape", "escape"]


def test_quit_keys() -> None:
    snap = snapshot()
    for key in ("q", "eof", "ctrl-c"):
        assert step(start(snap), key, snap)[1] == QUIT
    # Typing in the filter, `q` is a letter; Ctrl-C still leaves.
    assert step(start(snap, filtering=True), "q", snap)[1] is None
    assert step(start(snap, filtering=True), "ctrl-c", snap)[1] == QUIT


def test_move_selection_page_and_ends() -> None:
    snap = snapshot()
    ids = [run["run_id"] for run in visible_runs(snap, UiState())]
    state = start(snap)
    assert state.selected_run_id == ids[0] == BUSY  # newest first
    state, _ = press(state, ["j", "down"], snap)
    assert state.selected_run_id == ids[2]
    state, _ = press(state, ["k"], snap)
    assert state.selected_run_id == ids[1]
    state, _ = step(state, "pgdn", snap, page=10)
    assert state.selected_run_id == ids[11]
    state, _ = press(state, ["G"], snap)
    assert state.selected_run_id == ids[-1]
    state, _ = press(state, ["j", "j"], snap)  # stays at the end
    assert state.selected_run_id == ids[-1]
    state, _ = press(state, ["g"], snap)
    assert state.selected_run_id == ids[0]
    state, _ = press(state, ["pgup", "up"], snap)
    assert state.selected_run_id == ids[0]


def test_sort_cycles_and_orders() -> None:
    snap = snapshot()
    state = start(snap)
    sorts = []
    for _ in range(4):
        state, _ = step(state, "s", snap)
        sorts.append(state.sort)
    assert sorts == ["status", "workflow", "duration", "newest"]
    by_status = [r["run_id"] for r in visible_runs(snap, dataclasses.replace(state, sort="status"))]
    assert by_status[:3] == [AMBIGUOUS, RELEASE, BUSY] and by_status[-1] == OLD_RUNS[-1]["run_id"]
    by_workflow = [r["workflow"] for r in visible_runs(snap, dataclasses.replace(state, sort="workflow"))]
    assert by_workflow[:3] == ["[red]x[/red]", "deploy", "nightly"]
    by_duration = [r["run_id"] for r in visible_runs(snap, dataclasses.replace(state, sort="duration"))]
    assert by_duration[:3] == [AMBIGUOUS, RELEASE, BUSY]  # 40 s, 30 s and 20 s; the nightly runs took 10 s


def test_filter_typing_keep_and_clear() -> None:
    snap = snapshot()
    state, _ = press(start(snap), ["/", "d", "e", "p"], snap)
    assert state.filtering and state.filter_text == "dep"
    assert [r["run_id"] for r in visible_runs(snap, state)] == [AMBIGUOUS]
    assert state.selected_run_id == AMBIGUOUS  # the selection follows the filter
    state, _ = press(state, ["enter"], snap)
    assert not state.filtering and state.filter_text == "dep"
    state, _ = press(state, ["escape"], snap)
    assert state.filter_text == "" and len(visible_runs(snap, state)) == 33
    # Run id prefix, status prefix, park reason.
    for pattern, count in (("run_01m8m3yzdenightly", 30), ("park", 2), ("ambig", 1), ("RUNNING", 1)):
        assert len(visible_runs(snap, UiState(filter_text=pattern))) == count, pattern
    state, _ = press(start(snap), ["/", "x", "backspace", "escape"], snap)
    assert state.filter_text == "" and not state.filtering


def test_enter_toggles_detail_and_help_overlay() -> None:
    snap = snapshot()
    state, _ = press(start(snap), ["enter"], snap)
    assert state.detail_open
    state, _ = press(state, ["enter"], snap)
    assert not state.detail_open
    state, _ = press(state, ["enter", "escape"], snap)
    assert not state.detail_open
    state, outcomes = press(state, ["?"], snap)
    assert state.help_open and not outcomes
    state, outcomes = press(state, ["c"], snap)  # any key closes the help, and does nothing else
    assert not state.help_open and state.confirm is None and not outcomes


def test_cancel_asks_first_and_only_y_sends() -> None:
    snap = snapshot()
    state, outcomes = press(start(snap), ["c"], snap)
    assert not outcomes and state.confirm is not None
    assert state.confirm.command.what == f"cancel run {BUSY}"
    state, outcomes = press(state, ["n"], snap)
    assert not outcomes and state.confirm is None and state.status == f"not sent: cancel run {BUSY}"
    for stray in ("Y", "enter", "escape", "1", "c"):  # only a lowercase y sends
        state, outcomes = press(start(snap), ["c", stray], snap)
        assert not outcomes and state.confirm is None, stray
    state, outcomes = press(start(snap), ["c", "y"], snap)
    assert outcomes == [Command("run.cancel", f"cancel run {BUSY}", run_id=BUSY)]
    assert state.confirm is None


def test_pause_resume_and_ended_runs() -> None:
    snap = snapshot()
    _, outcomes = press(start(snap), ["p", "y", "r", "y"], snap)
    assert [(c.operation, c.run_id) for c in outcomes if isinstance(c, Command)] == [
        ("run.pause", BUSY), ("run.resume", BUSY)]
    ended = start(snap, selected_run_id=OLD_RUNS[0]["run_id"])
    state, outcomes = press(ended, ["c"], snap)
    assert not outcomes and state.confirm is None and "has ended (done): nothing to cancel" in state.status


def test_restart_is_fenced_by_the_revision_of_the_last_run_get() -> None:
    snap = snapshot()
    state, outcomes = press(start(snap), ["R"], snap)  # no run.get yet
    assert not outcomes and state.confirm is None and "not read yet" in state.status
    read = snapshot(detail_run_id=BUSY, detail=DETAIL)  # failed at revision 9 (the list row says 5)
    state, outcomes = press(start(read), ["R", "y"], read)
    assert outcomes == [Command("run.restart", f"restart run {BUSY} (revision 9)", run_id=BUSY, expected_revision=9)]
    running = snapshot(detail_run_id=BUSY, detail=dict(DETAIL, status="running"))
    state, outcomes = press(start(running), ["R"], running)
    assert not outcomes and "restart needs an ended run" in state.status


def test_resolve_effect_chooses_confirm_or_retry_before_y() -> None:
    snap = snapshot(detail_run_id=BUSY, detail=DETAIL)
    state, outcomes = press(start(snap), ["e"], snap)
    assert not outcomes and state.confirm is not None
    assert state.confirm.command.payload == {"effect_id": "eff_unknown", "action": "confirm"}
    state, outcomes = press(state, ["r"], snap)  # picks retry, sends nothing
    assert not outcomes and state.confirm is not None and state.confirm.command.payload["action"] == "retry"
    state, outcomes = press(state, ["tab"], snap)
    assert state.confirm is not None and state.confirm.command.payload["action"] == "confirm"
    state, outcomes = press(state, ["left", "y"], snap)
    assert outcomes == [Command("effect.resolve", "resolve effect eff_unknown as retry (rerun the node)",
                                {"effect_id": "eff_unknown", "action": "retry"}, hotkey="r", label="retry")]
    state, outcomes = press(start(snap), ["e", "x"], snap)
    assert not outcomes and state.confirm is None
    calm = snapshot(detail_run_id=BUSY, detail=dict(DETAIL, effects=[]))
    state, _ = press(start(calm), ["e"], calm)
    assert state.confirm is None and "no ambiguous effect" in state.status


def test_decision_keys_ask_before_answering_with_the_revision() -> None:
    other = dict(DECISION, request_id="req_other", revision=8)
    snap = snapshot(decisions=(DECISION, other))
    state = start(snap)
    assert state.selected_request_id == "req_abc"
    state, outcomes = press(state, ["1"], snap)  # a digit alone asks
    assert not outcomes and state.confirm is not None
    assert state.confirm.command.what == "answer ship to Ship 1.2.0"
    state, outcomes = press(state, ["x"], snap)  # a stray key drops it
    assert not outcomes and state.confirm is None
    state, outcomes = press(state, ["1", "y"], snap)
    assert outcomes == [Command("decision.answer", "answer ship to Ship 1.2.0",
                                {"request_id": "req_abc", "response": {"choice": "ship"}}, expected_revision=3)]
    # tab focuses the decisions: j/k select one, h/l a choice, enter answers the highlighted one.
    state, _ = press(start(snap), ["tab", "j", "l"], snap)
    assert state.focus == "decisions" and state.selected_request_id == "req_other" and state.choice_index == 1
    state, outcomes = press(state, ["enter", "y"], snap)
    assert [(c.payload["response"], c.expected_revision) for c in outcomes if isinstance(c, Command)] == [
        ({"choice": "stop"}, 8)]
    state, _ = press(state, ["tab"], snap)
    assert state.focus == "runs"
    state, _ = press(start(snap), ["9"], snap)
    assert state.confirm is None and "no choice 9" in state.status


def test_choice_with_text_prompts_then_asks() -> None:
    snap = snapshot()
    state, outcomes = press(start(snap), ["3"], snap)
    assert state.prompt is not None and state.prompt.input_name == "instructions"
    state, outcomes = press(state, [*"ok!", "backspace", "y", "enter"], snap)  # `y` here is typed text
    assert not outcomes and state.prompt is None and state.confirm is not None
    assert state.confirm.command.what == 'answer fix ("oky") to Ship 1.2.0'
    state, outcomes = press(state, ["y"], snap)
    assert [c.payload["response"] for c in outcomes if isinstance(c, Command)] == [
        {"choice": "fix", "input": {"instructions": "oky"}}]
    state, outcomes = press(start(snap), ["3", "a", "escape"], snap)
    assert state.prompt is None and state.status == "answer cancelled" and not outcomes


def test_nothing_to_act_on() -> None:
    empty = Snapshot(taken_at=0.0)
    state = start(empty)
    for key in ("c", "p", "r", "R", "e", "enter"):
        state, outcome = step(state, key, empty)
        assert outcome is None and state.confirm is None and state.status == "no run selected", key
    state, outcome = step(state, "1", empty)
    assert outcome is None and state.status == "no pending decision to answer"
    state, _ = step(state, "tab", empty)
    assert state.focus == "runs" and state.status == "no pending decisions"


class FakeClient(ContentReader):
    """Answers like a host; records what was asked (content reads through `request`, as a Client's)."""

    def __init__(self, answers: dict[str, Response]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any], str | None, int | None]] = []

    def request(self, operation: str, payload: dict[str, Any] | None = None, *, run_id: str | None = None,
                expected_revision: int | None = None, idempotency_key: str | None = None) -> Response:
        self.sent.append((operation, dict(payload or {}), run_id, expected_revision))
        return self.answers.get(operation) or self.answers[f"{operation}:{(payload or {}).get('status')}"]


def test_send_reports_the_outcome_and_adds_a_submission_id() -> None:
    client = FakeClient({"run.cancel": Response("r1", "accepted", {"run_id": BUSY, "status": "cancelling"}),
                         "decision.answer": Response("r2", "conflict", error="request req_abc was answered already")})
    line = send(client, Command("run.cancel", f"cancel run {BUSY}", run_id=BUSY))  # type: ignore[arg-type]
    assert line == f"cancel run {BUSY}: accepted (cancelling)"
    answer = Command("decision.answer", "answer ship to Ship 1.2.0",
                     {"request_id": "req_abc", "response": {"choice": "ship"}}, expected_revision=3)
    line = send(client, answer)  # type: ignore[arg-type]
    assert line == "answer ship to Ship 1.2.0: conflict: request req_abc was answered already"
    operation, payload, _, revision = client.sent[1]
    assert operation == "decision.answer" and revision == 3 and payload["submission_id"].startswith("top-")


def test_gatherer_keeps_old_ambiguous_runs_and_reads_the_selected_run() -> None:
    newest = [{"run_id": "run_new", "status": "done"}]
    parked = [{"run_id": "run_old", "status": "parked", "park_reason": "ambiguous_effect"},
              {"run_id": "run_wait", "status": "parked", "park_reason": "waiting"}]
    client = FakeClient({
        "host.status": Response("a", "accepted", {"epoch": 1, "workers": {"active": []}}),
        "run.list:None": Response("b", "accepted", {"runs": newest}),
        "run.list:parked": Response("c", "accepted", {"runs": parked}),
        "interaction.list": Response("d", "accepted", {"requests": [DECISION, {"kind": "checkpoint"}]}),
        "run.events": Response("e", "accepted", {"events": [], "next_after": 0, "more": False}),
        "channel.status": Response("f", "accepted", {"configured": False}),
        "run.get": Response("g", "accepted", {"run_id": "run_old", "revision": 4}),
        "schedule.list": Response("h", "accepted", {"schedules": [{"name": "tick", "next_fire_at": 5.0}]}),
        "run.graph": Response("i", "accepted", {"run_id": "run_old", "graph_sha256": "ab" * 32, "graph_bytes": 9,
                                                "graph": graph_document(release())}),
    })
    gatherer = Gatherer(client)  # type: ignore[arg-type]
    snap = gatherer.gather("run_old")
    assert snap.schedules == ({"name": "tick", "next_fire_at": 5.0},)
    assert [r["run_id"] for r in snap.runs] == ["run_new", "run_old"]
    assert snap.decisions == (DECISION,) and snap.other_requests == 1
    assert snap.detail_run_id == "run_old" and snap.detail == {"run_id": "run_old", "revision": 4}
    assert snap.detail_graph == build_graph(release())
    # A run's graph never changes: it is read once, not at every refresh.
    assert gatherer.gather("run_old").detail_graph == snap.detail_graph
    assert [sent[0] for sent in client.sent].count("run.graph") == 1


def test_gatherer_draws_a_run_without_a_stored_graph_from_its_view() -> None:
    client = FakeClient({"run.graph": Response("i", "accepted", {"run_id": "run_old", "graph_sha256": None,
                                                                 "graph_bytes": 0}),
                         "run.get": Response("g", "accepted", {"run_id": "run_old", "revision": 4})})
    assert Gatherer(client).run_graph("run_old") is None  # type: ignore[arg-type]
    older = FakeClient({"run.graph": Response("i", "rejected", error="operation 'run.graph' is not available")})
    assert Gatherer(older).run_graph("run_old") is None  # type: ignore[arg-type]


def _readme_keys() -> dict[str, str]:
    """The piwf-top key table of docs/cli.md: each key (backticked, `1`–`9` as `1-9`) → what its row says it does."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = readme[readme.index("## piwf-top\n"):]
    section = section.split("\n## ")[0]  # to the next section, or the end of the page
    keys: dict[str, str] = {}
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        for key in re.findall(r"`([^`]+)`(?:–`([^`]+)`)?", cells[0]):
            keys[f"{key[0]}-{key[1]}" if key[1] else key[0]] = cells[1]
    return keys


def test_the_readme_says_what_the_digit_keys_do() -> None:
    """A digit on a decision opens the confirmation of that answer at once (one key to the question, `y`
    to send): the README said the digits only chose one, as h/l do."""
    snap = snapshot(decisions=(DECISION,))
    state, outcomes = press(start(snap), ["2"], snap)
    assert not outcomes and state.confirm is not None and state.confirm.command.operation == "decision.answer"
    assert state.confirm.command.payload["response"] == {"choice": "stop"}  # choice 2 of ship, stop
    keys = _readme_keys()
    digits = keys["1-9"]
    assert "answer" in digits and "`y`" in digits and "choose" not in digits, digits
    assert dict(HELP)["1-9"].startswith("answer"), HELP
    # h/l only move the highlight; the README says so, and Enter answers with the highlighted choice.
    state, outcomes = press(start(snap), ["l"], snap)
    assert not outcomes and state.confirm is None and state.choice_index == 1
    assert "highlight" in keys["h"] and keys["h"] == keys["←"]


def test_every_key_of_the_help_overlay_is_in_the_readme_table() -> None:
    documented = set(_readme_keys())
    section_text = " ".join(_readme_keys().values())
    for keys, _does in HELP:
        for key in (key for part in keys.split() for key in ([part] if part == "/" else part.split("/"))):
            if key in ("other", "key", "Ctrl-C"):
                continue  # words, not keys: "other key", and Ctrl-C is written out in the quit row
            spelled = {"tab": "Tab", "esc": "Esc", "enter": "Enter"}.get(key, key)
            assert spelled in documented or f"`{spelled}`" in section_text, (keys, key)
