"""Workflows the test kit's tests run: module-level attributes of this file, which the host's
workers load from its snapshot (what `Piwf.start(workflow)` relies on)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from piwf_actors.workflows import (
    action,
    agent,
    checkpoint,
    choice,
    compute,
    decision_switch,
    define_workflow,
    edge,
    human_decision,
    sleep,
    switch,
    wait_message,
)


def fail_first_time(marker: str) -> dict[str, Any]:
    """Raise on the first call for `marker` (a file outside the database counts the calls)."""
    path = Path(marker)
    calls = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(calls))
    if calls == 1:
        raise RuntimeError("the first attempt fails")
    return {"calls": calls}


napper = define_workflow(name="napper", start_at="nap", nodes={
    "nap": sleep(seconds=3600),
    "awake": compute(run=lambda ctx: {"slept_until": ctx.outputs["nap"]["slept_until"]}),
}, edges=[edge("nap", "awake")])

listener = define_workflow(name="listener", start_at="listen", nodes={
    "listen": wait_message("news", timeout_s=86400, on_timeout={"news": "none"}),
}, edges=[])

strict_listener = define_workflow(name="strict-listener", start_at="listen", nodes={
    "listen": wait_message("news", timeout_s=600),
}, edges=[])

gate = define_workflow(name="gate", start_at="approve", nodes={
    "approve": human_decision(
        audience="operator",
        choices={"go": choice(label="Go"), "stop": choice(label="Stop")},
        request=lambda ctx: {"title": "Go on?"},
        on_timeout={"after_s": 3600, "response": {"choice": "stop"}},
    ),
    "went": compute(run=lambda ctx: {"went": True}),
    "stopped": compute(run=lambda ctx: {"went": False}),
}, edges=[decision_switch("approve", cases={"go": "went", "stop": "stopped"})])

note = define_workflow(name="note", start_at="ask", nodes={
    "ask": checkpoint(prompt="Anything to note?", timeout_s=600),
    "noted": compute(run=lambda ctx: {"note": ctx.outputs["ask"]}),
}, edges=[edge("ask", "noted")])

summary = define_workflow(name="summary", start_at="summarize", nodes={
    "summarize": agent(prompt="Summarize", timeout_s=900, max_submissions=2,
                       expected_output={"type": "object", "required": ["summary"],
                                        "properties": {"summary": {"type": "string"}}}),
}, edges=[])

flaky = define_workflow(name="flaky", start_at="try", nodes={
    "try": compute(run=lambda ctx: fail_first_time(ctx.input["marker"]), retries=1, retry_backoff_s=3600),
}, edges=[])

# A side effect cut off by its own timeout: it parks `ambiguous_effect` until a person settles it.
stuck = define_workflow(name="stuck", start_at="deploy", nodes={
    "deploy": action(run=lambda ctx: time.sleep(30) or {"deployed": True}, timeout_s=0.5),
    "after": compute(run=lambda ctx: {"deploy": ctx.outputs["deploy"]}),
}, edges=[edge("deploy", "after")])

# Real time, not timer time: a node that takes a second, for the clock-split test.
slow = define_workflow(name="slow", start_at="work", nodes={
    "work": compute(run=lambda ctx: time.sleep(1.0) or {"worked": True}),
}, edges=[])

routed = define_workflow(name="routed", start_at="listen", nodes={
    "listen": wait_message("verdict"),
    "yes": compute(run=lambda ctx: {"verdict": "yes"}),
    "no": compute(run=lambda ctx: {"verdict": "no"}),
}, edges=[switch("listen", on="$.verdict", cases={"approved": "yes"}, default="no")])
