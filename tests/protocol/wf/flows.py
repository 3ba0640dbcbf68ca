"""Workflows for the client protocol tests (started by file path, never imported).

Input keys the nodes understand:
- `sleep`: seconds each compute node sleeps (default 0);
- `oracle`: a file the shell node of `effectful` appends to (see below).
"""

from __future__ import annotations

import shlex
import time

from piwf_actors.workflows import compute, define_workflow, edge, shell


def _step(ctx):
    delay = (ctx.input or {}).get("sleep", 0) if isinstance(ctx.input, dict) else 0
    if delay:
        time.sleep(delay)
    return {"node": ctx.node_id}


# --- one node: the quickest run there is ------------------------------------------------

quick = define_workflow(
    name="quick",
    start_at="only",
    nodes={"only": compute(run=_step)},
    edges=[],
)

# --- one node under a 4,000-character name: large `runs` views (the send-queue tests) ----

long_named = define_workflow(
    name="long-" + "n" * 3995,
    start_at="only",
    nodes={"only": compute(run=_step)},
    edges=[],
)

# --- three compute nodes (watch order, pause/resume, restart) ---------------------------

three = define_workflow(
    name="three",
    start_at="a",
    nodes={"a": compute(run=_step), "b": compute(run=_step), "c": compute(run=_step)},
    edges=[edge("a", "b"), edge("b", "c")],
)


# --- a non-idempotent shell node (ambiguous effect after a worker SIGKILL) --------------


def _shell_command(ctx):
    """The first execution (no marker file yet) records itself and hangs so the worker can
    be killed while it runs; a later one finishes at once."""
    marker = shlex.quote(ctx.input["oracle"])
    return f"if [ -e {marker} ]; then echo again; else echo first > {marker}; sleep 60; fi"


effectful = define_workflow(
    name="effectful",
    start_at="act",
    nodes={"act": shell(command=_shell_command, shell=True), "after": compute(run=_step)},
    edges=[edge("act", "after")],
)


# --- interactive nodes (checkpoint, human decision, agent step, notify) -----------------

from piwf_actors.workflows import agent, checkpoint, choice, human_decision, notify, text_input  # noqa: E402

asks = define_workflow(
    name="asks",
    start_at="confirm",
    nodes={"confirm": checkpoint(prompt="Type the version to release")},
    edges=[],
)

decides = define_workflow(
    name="decides",
    start_at="approve",
    nodes={
        "approve": human_decision(
            audience="operator",
            choices={"ship": choice(label="Ship it"),
                     "fix": choice(label="Needs changes",
                                   input=text_input(name="instructions", prompt="What should change?"))},
            request=lambda ctx: {"title": f"Ship {ctx.input['version']}?", "summary": "Tests passed."},
        ),
    },
    edges=[],
)

asks_agent = define_workflow(
    name="asks-agent",
    start_at="summarize",
    nodes={"summarize": agent(prompt="Summarize the change in one line",
                              expected_output={"type": "object", "required": ["summary"],
                                               "properties": {"summary": {"type": "string"}}})},
    edges=[],
)

tells = define_workflow(
    name="tells",
    start_at="say",
    nodes={"say": notify(message="Release 1.2.0 is out")},
    edges=[],
)
