"""Who answered, and when a deadline comes, in `piwf show`, `piwf events`, `piwf inbox` and their --json
(issue 22, edge 3 and the deadline display): a real host, real `bin/piwf` processes."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from piwf_actors import HostConfig, start_host
from piwf_actors.cli import render
from piwf_actors.workflows.graph_run import wait_words
from tests.cli.cli_support import piwf, short_dir

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import choice, compute, define_workflow, edge, human_decision

    def asking(after_s):
        return define_workflow(name="asking", start_at="ask", nodes={
            "ask": human_decision(audience="ops", choices={"yes": choice(label="Yes"), "no": choice(label="No")},
                                  request={"title": "Go?"}, on_timeout={"after_s": after_s, "response": {"choice": "no"}}),
            "end": compute(run=lambda ctx: {"went": ctx.outputs["ask"]["choice"]})}, edges=[edge("ask", "end")])

    quick = asking(0.3)
    slow = asking(600)
''')
UTC = {"TZ": "UTC"}


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pcp-")
    flows = state / "flows.py"
    flows.write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        yield {"host": host, "state": state, "flows": flows}
    finally:
        host.stop()
        shutil.rmtree(state, ignore_errors=True)


def start(env: dict[str, Any], name: str, statuses: tuple[str, ...]) -> str:
    run_id = env["host"].start_run(f"{env['flows']}:{name}", {})["receipt"]["run_id"]
    env["host"].wait_for_run(run_id, statuses, timeout=30)
    return run_id


def cli(env: dict[str, Any], *args: str) -> str:
    result = piwf(env["state"], *args, extra_env={**UTC, "COLUMNS": "200"})
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def settled_event(env: dict[str, Any], run_id: str) -> dict[str, Any]:
    events = json.loads(cli(env, "--json", "events", run_id))["events"]
    return next(event for event in events if event["kind"] == "interaction_settled")


def test_a_timeout_answer_says_so_in_show_events_and_json(env: dict[str, Any]) -> None:
    run_id = start(env, "quick", ("done",))
    shown = cli(env, "show", run_id)
    ask_row = next(line for line in shown.splitlines() if line.startswith("│ ask "))
    assert '{"choice":"no"}' in ask_row and "by timeout" in ask_row, shown
    events = cli(env, "events", run_id)
    settled = next(line for line in events.splitlines() if "interaction_settled" in line)
    assert "by timeout" in settled, events
    payload = settled_event(env, run_id)["payload"]
    assert payload["answered_by"]["kind"] == "timeout"
    node = next(n for n in json.loads(cli(env, "--json", "show", run_id))["nodes"] if n["node_id"] == "ask")
    assert node["output"] == {"choice": "no"} and node["answered_by"]["kind"] == "timeout"


def test_a_person_answering_with_piwf_is_shown_as_such(env: dict[str, Any]) -> None:
    run_id = start(env, "slow", ("parked",))
    request = next(r for r in json.loads(cli(env, "--json", "inbox"))["requests"] if r["run_id"] == run_id)
    cli(env, "answer", request["request_id"], "yes")
    env["host"].wait_for_run(run_id, ("done",), timeout=30)
    answered_by = settled_event(env, run_id)["payload"]["answered_by"]
    assert answered_by["kind"] == "human" and answered_by["client_id"].startswith("piwf-cli-")
    assert "by person via cli" in next(line for line in cli(env, "events", run_id).splitlines()
                                       if "interaction_settled" in line)
    shown = cli(env, "show", run_id)
    assert "person via cli" in next(line for line in shown.splitlines() if line.startswith("│ ask "))


def test_deadlines_show_their_zone_and_how_far_they_are(env: dict[str, Any]) -> None:
    run_id = start(env, "slow", ("parked",))
    zoned = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (9m[0-5]\ds|10m00s)\)")
    inbox = cli(env, "inbox")
    assert zoned.search(inbox), inbox
    shown = cli(env, "show", run_id)
    waiting = next(line for line in shown.splitlines() if line.startswith("waiting on"))
    assert zoned.search(waiting), shown


def test_answered_by_labels_every_kind_of_answerer() -> None:
    label = render.answered_by
    assert label({"kind": "timeout", "deadline_at": 1.0}) == "timeout"
    assert label({"kind": "channel", "channel": "telegram", "user_id": 42, "chat_id": 7}) == "telegram user 42"
    assert label({"kind": "channel", "channel": "telegram", "user_id": 42, "username": "ann",
                  "name": "Ann B"}) == "telegram user 42 (Ann B, @ann)"
    assert label({"kind": "human", "client_id": "piwf-cli-0", "via": "socket", "pid": 5}) == "person via cli"
    assert label({"kind": "human", "client_id": "piwf-top-ab", "via": "socket"}) == "person via piwf-top"
    assert label({"kind": "human", "client_id": "app-1", "via": "embedded"}) == "person via embedding"
    assert label({"kind": "human", "client_id": "mybot", "via": "socket"}) == "person via client mybot"
    assert label({"kind": "agent", "client_id": "c", "session_id": "s1"}) == "agent session s1"
    assert label(None) == "unknown"


def test_moments_carry_the_zone_and_a_relative_time() -> None:
    now = 1_800_000_000.0
    assert render.relative(now + 18.2, now) == "in 18s"
    assert render.relative(now - 18.2, now) == "18s ago"
    assert render.relative(now + 192, now) == "in 3m12s"
    assert render.relative(now + 2 * 3600 + 300, now) == "in 2h05m"
    assert render.relative(now + 599.7, now) == "in 9m59s"  # cut toward zero: not a minute it has not reached
    assert render.relative(now + 0.0002, now) == "now"
    moment = render.moment(now + 18, now)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ \(in 18s\)", moment), moment
    sleep = wait_words({"kind": "sleep", "wake_at": now + 18}, now, zoned=True)
    assert sleep.startswith("sleeping until ") and sleep.endswith("(in 18s)") and moment in sleep
    message = wait_words({"kind": "message", "topic": "go", "clock": "running", "deadline_at": now - 3}, now,
                         zoned=True)
    assert message.endswith(f"(timeout {render.moment(now - 3, now)})"), message
