"""Workflows for the value-size tests (test_value_sizes*.py): every way a large value reaches a worker.

A node that receives a large value answers with its length and sha256 (`seen`), so a test can tell
that the worker got every byte in order without shipping the value back. Most flows wait (a durable
sleep, a message, a person) after the large value, so a second launch must read it back from the
store. `text(size, seed)` makes the values: varied text, so a chunk put in the wrong place is caught.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import sys

from piwf_actors.workflows import (
    agent,
    checkpoint,
    choice,
    compute,
    define_workflow,
    edge,
    human_decision,
    run_workflow,
    shell,
    sleep,
    text_input,
    wait_message,
)

#: The shell node's output cap (worker/shell.py), as the README documents it.
SHELL_CAP = 1024 * 1024


def text(size: int, seed: int = 0) -> str:
    """`size` characters of hex text, the same for the same (size, seed) in any process."""
    return random.Random(size * 1000 + seed).randbytes((size + 1) // 2).hex()[:size]


def seen(value: str) -> dict:
    """What a node reports of a large text it received: its length and digest."""
    return {"n": len(value), "sha": hashlib.sha256(value.encode()).hexdigest()}


# --- run input: seen by the first launch and again after a durable sleep -----------------------

input_wait = define_workflow(
    name="input-wait",
    start_at="first",
    nodes={
        "first": compute(run=lambda ctx: seen(ctx.input["blob"])),
        "nap": sleep(0.05),
        "again": compute(run=lambda ctx: {"first": ctx.outputs["first"], "again": seen(ctx.input["blob"])}),
    },
    edges=[edge("first", "nap"), edge("nap", "again")],
)

# --- a node's output, then a wait; the next launch reads the output back -----------------------

output_sleep = define_workflow(
    name="output-sleep",
    start_at="big",
    nodes={
        "big": compute(run=lambda ctx: text(ctx.input["size"], 1)),
        "nap": sleep(0.05),
        "check": compute(run=lambda ctx: seen(ctx.outputs["big"])),
    },
    edges=[edge("big", "nap"), edge("nap", "check")],
)

output_message = define_workflow(
    name="output-message",
    start_at="big",
    nodes={
        "big": compute(run=lambda ctx: text(ctx.input["size"], 2)),
        "wait": wait_message("go"),
        "check": compute(run=lambda ctx: {"big": seen(ctx.outputs["big"]), "message": seen(ctx.outputs["wait"])}),
    },
    edges=[edge("big", "wait"), edge("wait", "check")],
)

# --- a message payload (the run waits first: the payload settles the wait) ---------------------

message_wait = define_workflow(
    name="message-wait",
    start_at="wait",
    nodes={
        "wait": wait_message("go"),
        "check": compute(run=lambda ctx: seen(ctx.outputs["wait"])),
    },
    edges=[edge("wait", "check")],
)

# --- README's "run a command, then ask a person" -------------------------------------------------


def _print_command(ctx) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.stdout.write('x' * {int(ctx.input['size'])})"]


command_then_person = define_workflow(
    name="command-then-person",
    start_at="build",
    nodes={
        "build": shell(command=_print_command),
        "approve": checkpoint(prompt=lambda ctx: f"the build printed {len(ctx.outputs['build']['stdout'])} chars"),
        "check": compute(run=lambda ctx: {"stdout": seen(ctx.outputs["build"]["stdout"]),
                                          "answer": seen(ctx.outputs["approve"]["note"])}),
    },
    edges=[edge("build", "approve"), edge("approve", "check")],
)

# --- answers: a decision's text input, an agent's submission ------------------------------------

decision_text = define_workflow(
    name="decision-text",
    start_at="ask",
    nodes={
        "ask": human_decision(
            audience="operator",
            choices={"fix": choice(label="Needs changes",
                                   input=text_input(name="notes", prompt="What?", max_length=30_000_000))},
            request=lambda ctx: {"title": "Review", "summary": "Anything to change?"}),
        "check": compute(run=lambda ctx: seen(ctx.outputs["ask"]["input"]["notes"])),
    },
    edges=[edge("ask", "check")],
)

agent_step = define_workflow(
    name="agent-step",
    start_at="draft",
    nodes={
        "draft": agent(prompt="write it", expected_output={"type": "object", "required": ["body"]}),
        "check": compute(run=lambda ctx: seen(ctx.outputs["draft"]["body"])),
    },
    edges=[edge("draft", "check")],
)

# --- a child run's input and output; a message a node sends ------------------------------------

echo_child = define_workflow(
    name="echo-child",
    start_at="echo",
    nodes={"echo": compute(run=lambda ctx: {"seen": seen(ctx.input["blob"]), "back": ctx.input["blob"][::-1]})},
    edges=[],
)

parent = define_workflow(
    name="parent",
    start_at="child",
    nodes={
        "child": run_workflow(echo_child, input=lambda ctx: {"blob": text(ctx.input["size"], 16)}),
        "nap": sleep(0.05),
        "check": compute(run=lambda ctx: {"child_saw": ctx.outputs["child"]["seen"],
                                          "back": seen(ctx.outputs["child"]["back"])}),
    },
    edges=[edge("child", "nap"), edge("nap", "check")],
)


def _send(ctx) -> str:
    ctx.send_message(ctx.input["to"], "go", text(ctx.input["size"], 17))
    return "sent"


sender = define_workflow(name="sender", start_at="send", nodes={"send": compute(run=_send)}, edges=[])

# --- many small outputs beside a large one: the launch state is cut, and the large value is inside -----

#: Outputs small enough to be stored inline (under 1 KB each), and enough of them that the launch
#: state they make is over a frame's budget: the host cuts the state's outputs out as one value.
SMALL_OUTPUTS = 1300


def _small_then_big() -> tuple[dict, list]:
    nodes = {f"s{i}": compute(run=lambda ctx, i=i: text(900, i)) for i in range(SMALL_OUTPUTS)}
    nodes["big"] = compute(run=lambda ctx: text(100_000, 3))
    nodes["nap"] = sleep(0.05)
    nodes["check"] = compute(run=lambda ctx: {
        "big": seen(ctx.outputs["big"]),
        "small": seen("".join(ctx.outputs[f"s{i}"] for i in range(SMALL_OUTPUTS)))})
    chain = [*(f"s{i}" for i in range(SMALL_OUTPUTS)), "big", "nap", "check"]
    return nodes, [edge(a, b) for a, b in itertools.pairwise(chain)]


_nodes, _edges = _small_then_big()
many_small_then_big = define_workflow(name="many-small-then-big", start_at="s0", nodes=_nodes, edges=_edges,
                                      max_steps=SMALL_OUTPUTS + 10)
