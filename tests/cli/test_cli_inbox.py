"""`piwf inbox`, `piwf answer`, `piwf submit`, `piwf ack` against a real host."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostConfig, start_host

PIWF = Path(__file__).resolve().parents[2] / "bin" / "piwf"

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import (agent, checkpoint, choice, compute, decision_switch, define_workflow, edge,
                                       human_decision, notify, text_input)

    decide = define_workflow(name="decide", start_at="ask", nodes={
        "ask": human_decision(audience="ops", choices={
            "go": choice(label="Go"),
            "fix": choice(label="Fix", input=text_input(name="why", prompt="Why?", min_length=1, max_length=50))},
            request={"title": "Go on?"}),
        "went": compute(run=lambda ctx: {"went": True}),
        "fixed": notify(message=lambda ctx: "fix: " + ctx.outputs["ask"]["input"]["why"])},
        edges=[decision_switch("ask", cases={"go": "went", "fix": "fixed"})])

    gate = define_workflow(name="gate", start_at="wait", nodes={"wait": checkpoint(prompt="a number?")}, edges=[])

    summarize = define_workflow(name="summarize", start_at="step", nodes={
        "step": agent(prompt="Summarize", expected_output={"type": "object", "required": ["text"],
                                                           "properties": {"text": {"type": "string"}}})},
        edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = Path(tempfile.mkdtemp(prefix="pci-", dir="/tmp"))
    flows = state / "flows.py"
    flows.write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        yield {"host": host, "state": state, "flows": flows}
    finally:
        host.stop()
        shutil.rmtree(state, ignore_errors=True)


def piwf(env: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PIWF), "--state-dir", str(env["state"]), *args], capture_output=True, text=True,
                          timeout=60)


def parked(env: dict[str, Any], workflow: str, **kwargs: Any) -> str:
    host = env["host"]
    run_id = host.start_run(f"{env['flows']}:{workflow}", {}, **kwargs)["receipt"]["run_id"]
    host.wait_for_run(run_id, ("parked",), timeout=30)
    return run_id


def request_of(env: dict[str, Any], run_id: str, *session: str) -> dict[str, Any]:
    result = piwf(env, "--json", "inbox", *session)
    assert result.returncode == 0, result.stderr
    return next(r for r in json.loads(result.stdout)["requests"] if r["run_id"] == run_id)


def test_inbox_lists_a_decision_and_answer_routes_it(env):
    run_id = parked(env, "decide", session_id="ops")
    table = piwf(env, "inbox")
    assert table.returncode == 0 and "Go on?" in table.stdout and "--input" in table.stdout
    request = request_of(env, run_id)
    bad = piwf(env, "answer", request["request_id"], "nope")
    assert bad.returncode == 1 and "unknown choice" in bad.stderr
    missing = piwf(env, "answer", request["request_id"], "fix")
    assert missing.returncode == 1 and "needs input" in missing.stderr
    ok = piwf(env, "answer", request["request_id"], "fix", "--input", "why=42 reasons")
    assert ok.returncode == 0, ok.stderr
    view = env["host"].wait_for_run(run_id, timeout=30)
    assert view["status"] == "done" and view["output"] == {"message": "fix: 42 reasons"}
    again = piwf(env, "answer", request["request_id"], "go")
    assert again.returncode == 1 and "conflict" in again.stderr


def test_answer_a_checkpoint_with_value(env):
    run_id = parked(env, "gate")
    request = request_of(env, run_id)
    result = piwf(env, "answer", request["request_id"], "--value", '{"n": 7}')
    assert result.returncode == 0, result.stderr
    assert env["host"].wait_for_run(run_id, timeout=30)["output"] == {"n": 7}


def test_submit_waits_for_the_verdict_and_ack_clears_messages(env):
    run_id = parked(env, "summarize", session_id="agent-1")
    request = request_of(env, run_id, "--session", "agent-1")
    rejected = piwf(env, "submit", request["request_id"], "--session", "agent-1", "--value", '{"txt": 1}')
    assert rejected.returncode == 1 and "text" in rejected.stderr
    accepted = piwf(env, "submit", request["request_id"], "--session", "agent-1",
                    "--value", '{"text": "short"}', "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["outcome"] == "accepted"
    assert env["host"].wait_for_run(run_id, timeout=30)["status"] == "done"
    deadline = time.monotonic() + 10
    while True:  # the run_summary message lands with the run's last commit
        messages = json.loads(piwf(env, "--json", "inbox", "--session", "agent-1").stdout)["messages"]
        if messages or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    summary = next(m for m in messages if m["run_id"] == run_id and m["kind"] == "run_summary")
    assert piwf(env, "ack", summary["message_id"]).returncode == 0
    messages = json.loads(piwf(env, "--json", "inbox", "--session", "agent-1").stdout)["messages"]
    assert all(m["message_id"] != summary["message_id"] for m in messages)
