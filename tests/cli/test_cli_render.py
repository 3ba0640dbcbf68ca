"""The pure parts of `piwf`'s output: progress lines and park hints from run views, and tables rendered
with a fixed-width capture console (ids never wrap, failures show their traceback and stderr tail)."""

from __future__ import annotations

import shlex

from rich.console import Console

from piwf_actors.cli import render
from piwf_actors.cli.progress import NodeProgress, park_hint


def rendered(renderable: object, width: int) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def node(node_id: str, attempt: str, status: str, **extra: object) -> dict[str, object]:
    return {"node_id": node_id, "attempt_id": attempt, "status": status, "attempts": 1, **extra}


def test_node_progress_prints_one_start_and_one_end_per_attempt() -> None:
    progress = NodeProgress()
    lines = [line.plain for line in progress.update({"nodes": [node("a", "att_1", "running")]})]
    assert lines == ["node a started"]
    assert progress.update({"nodes": [node("a", "att_1", "running")]}) == []
    lines = [line.plain for line in progress.update({"nodes": [
        node("a", "att_1", "succeeded"), node("b", "att_2", "failed", error={"message": "boom"}),
        node("c", "att_3", "waiting")]})]
    assert lines == ["node a succeeded", "node b failed: boom", "node c started", "node c waiting"]
    retried = [line.plain for line in progress.update({"nodes": [node("b", "att_4", "running", attempts=2)]})]
    assert retried == ["node b started (attempt 2)"]
    copied = NodeProgress().update({"nodes": [node("x", "att_9", "succeeded", copied_from="att_0")]})
    assert [line.plain for line in copied] == ["node x copied (from the parent run, not run again)"]


def command(*words: str) -> str:
    return shlex.join(["piwf", *words])


def test_park_hints_name_the_exact_command() -> None:
    view = {"run_id": "run_1", "status": "parked", "park_reason": "waiting", "park_detail": "req_abc"}
    decision = {"request_id": "req_abcdef", "node_id": "approve", "kind": "decision", "contract": {
        "title": "Ship?", "choices": {"ship": {"label": "Ship it"},
                                      "fix": {"label": "Fix", "input": {"name": "why"}}}}}
    lines = park_hint(view, decision, command, lambda _kind, full: full[:7])
    assert lines[0] == "run run_1 waits for a decision at node approve: Ship?"
    assert "request req_abcdef" in lines[1]
    assert lines[2].split("#")[0].strip() == "piwf answer req_abc ship"
    assert lines[3].split("#")[0].strip() == "piwf answer req_abc fix --input why=TEXT"
    checkpoint = {"request_id": "req_x", "node_id": "n", "kind": "checkpoint", "contract": {"prompt": "n?"}}
    assert park_hint(view, checkpoint, command, lambda _k, f: f)[-1].strip() == "piwf answer req_x --value JSON"
    agent = {"request_id": "req_y", "node_id": "n", "kind": "agent", "session_id": "s", "contract": {}}
    assert park_hint(view, agent, command, lambda _k, f: f)[-1].strip() == \
        "piwf submit req_y --session s --value JSON"
    paused = {"run_id": "run_1", "status": "parked", "park_reason": "paused"}
    assert park_hint(paused, None, command, lambda _k, f: f) == [
        "run run_1 is paused; resume it with: piwf resume run_1"]
    ambiguous = {"run_id": "run_1", "status": "parked", "park_reason": "ambiguous_effect", "park_detail": "eff_1"}
    assert "piwf effect resolve eff_1 confirm" in park_hint(ambiguous, None, command, lambda _k, f: f)[0]


def test_ids_never_wrap_in_a_narrow_table() -> None:
    runs = [{"run_id": f"run_01m8m1b53snnn7j59r08xq9pc{n}", "workflow": "a-very-long-workflow-name-indeed",
             "status": "failed", "steps": 3, "created_at": 1_000.0, "finished_at": 1_002.5,
             "error_code": "node_failed"} for n in range(3)]
    text = rendered(render.runs_table(runs), width=60)
    for n in range(3):
        assert f"…j59r08xq9pc{n} " in text  # its random end, on one line however narrow the table
    assert "2.5s" in text  # finished_at − created_at


def test_a_failed_run_shows_its_traceback_and_stderr_tail() -> None:
    trace = 'Traceback (most recent call last):\n  File "/p/wf.py", line 4, in _f\nKeyError: \'x\'\n'
    stderr = "".join(f"line {n}\n" for n in range(1, 31))
    view = {"run_id": "run_1", "workflow": "wf", "status": "failed",
            "error": {"code": "node_failed", "message": "node 'f' failed", "traceback": trace},
            "nodes": [node("f", "att_1", "failed", error={"code": "node_error", "message": "KeyError: 'x'",
                                                           "traceback": trace}),
                      node("sh", "att_2", "failed", output={"stdout": "", "stderr": stderr, "exit_code": 3},
                           error={"message": "command exited with code 3"})]}
    text = rendered(render.run_view(view), width=120)
    assert 'File "/p/wf.py", line 4, in _f' in text and text.count("Traceback") == 1
    assert "node sh: exit code 3; stderr (last lines):" in text
    assert "line 30" in text and "line 11" in text and "line 10\n" not in text and "10 earlier line(s)" in text


def test_durations() -> None:
    assert [render.duration(s) for s in (0.0123, 2.44, 192, 7500, 3 * 86400 + 4 * 3600)] == [
        "12ms", "2.4s", "3m12s", "2h05m", "3d04h"]
    assert render.run_duration({"created_at": 10.0}, now=70.0) == "1m00s so far"


def test_host_status_shows_the_role_and_for_a_standby_the_active_host() -> None:
    import time

    from piwf_actors.cli import render_state

    now = time.time()
    lease = {"epoch": 4, "host_id": "host-a", "live": True, "expires_at": now + 10, "heartbeat_at": now}
    view = {"role": "standby", "host_id": "host-b", "epoch": 4, "pid": 1, "lease": lease,
            "active": {"host_id": "host-a", "epoch": 4, "live": True, "expires_at": now + 10},
            "workers": {"max": None, "active": [], "idle": 0}, "runs": {"done": 1}}
    console = Console(record=True, width=120, color_system=None)
    console.print(render_state.host_status(view))
    text = console.export_text()
    assert "standby" in text and "host-a (epoch 4), lease expires" in text and "host-b" in text
    console = Console(record=True, width=120, color_system=None)
    console.print(render_state.host_status({**view, "role": "active", "host_id": "host-a"}))
    assert "active" in console.export_text() and "active host" not in console.export_text()


def test_a_waiting_run_shows_its_clock_running_or_paused() -> None:
    view = {"run_id": "run_1", "workflow": "wf", "status": "parked", "park_reason": "waiting", "nodes": [],
            "waiting": [{"request_id": "req_1", "node_id": "ask", "kind": "checkpoint", "clock": "paused",
                         "remaining_s": 95.0, "deadline_at": None}]}
    assert "waiting on  ask (checkpoint): paused, 1m35s left when it resumes" in rendered(render.run_view(view), 120)
    assert render.request_clock({"paused_remaining_s": 95.0, "deadline_at": None}) == "paused (1m35s left)"
    assert render.request_clock({"deadline_at": 1000.0}, now=940.0).endswith("(in 1m00s)")
    assert render.request_clock({}) == "—"


def test_piwf_show_says_who_answered_each_waiting_node() -> None:
    view = {"run_id": "run_1", "workflow": "wf", "status": "done", "nodes": [
        node("approve", "att_1", "succeeded", answer={"by": {"kind": "human", "client_id": "cli-7", "via": "socket",
                                                              "pid": 4242, "uid": 1000}, "at": 1.0}),
        node("gate", "att_2", "succeeded", answer={"by": {"kind": "channel", "channel": "telegram", "user_id": 77,
                                                           "chat_id": -100, "profile": "ops"}, "at": 2.0}),
        node("late", "att_3", "succeeded", answer={"by": {"kind": "timeout", "deadline_at": 3.0}, "at": 3.0})]}
    text = rendered(render.run_view(view), 160)
    assert "person via client cli-7" in text and "client cli-7, pid 4242, uid 1000" in text
    assert "telegram user 77" in text and "chat -100, profile ops" in text
    assert "· by timeout" in text
