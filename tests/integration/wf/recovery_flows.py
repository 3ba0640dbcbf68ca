"""Workflows for the crash, recovery and run-control tests.

Every node that does work appends one line `"<node_id> <run_id>\\n"` to an
ORACLE FILE outside the database (`ctx.input["oracle"]`) when it starts
executing, with a single `O_APPEND` write, so the file counts executions even
when the process is SIGKILLed right after.

Input keys the nodes understand:
- `oracle`: the oracle file (required);
- `sleep`: seconds every node sleeps after recording itself (default 0.05);
- `sleeps`: {node_id: seconds}, overrides `sleep` for one node;
- `hang`: node ids that sleep `hang_s` (default 30 s) on their FIRST execution
  as seen by the oracle (any run), so a kill lands inside that node, and the
  re-run after recovery does not hang again.
"""

from __future__ import annotations

import os
import shlex
import time

from piwf_actors.workflows import END, action, compute, define_workflow, edge, shell, switch


def executions(ctx, node_id=None):
    """How often `node_id` (default: this node) started before, in any run, per the oracle."""
    try:
        with open(ctx.input["oracle"]) as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return 0
    wanted = node_id or ctx.node_id
    return sum(1 for line in lines if line.split(" ")[0] == wanted)


def record(ctx):
    """Append this execution to the oracle in one write (atomic for O_APPEND)."""
    fd = os.open(ctx.input["oracle"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{ctx.node_id} {ctx.run_id}\n".encode())
    finally:
        os.close(fd)


def step(ctx):
    """Record, then sleep (long on a hanging node's first execution)."""
    first = executions(ctx) == 0
    record(ctx)
    inp = ctx.input
    if first and ctx.node_id in inp.get("hang", ()):
        time.sleep(inp.get("hang_s", 30))
    else:
        time.sleep(inp.get("sleeps", {}).get(ctx.node_id, inp.get("sleep", 0.05)))
    return {"node": ctx.node_id, "execution": executions(ctx)}


# --- six nodes, compute and idempotent actions mixed (host SIGKILL) ----------------

six = define_workflow(
    name="six",
    start_at="n1",
    nodes={
        "n1": compute(run=step),
        "n2": action(run=step, idempotent=True),
        "n3": action(run=step, idempotent=True),
        "n4": compute(run=step),
        "n5": action(run=step, idempotent=True),
        "n6": compute(run=step),
    },
    edges=[edge("n1", "n2"), edge("n2", "n3"), edge("n3", "n4"), edge("n4", "n5"), edge("n5", "n6")],
)

# --- four compute nodes (worker SIGKILL, pause, restart) -----------------------------

four = define_workflow(
    name="four",
    start_at="p1",
    nodes={"p1": compute(run=step), "p2": compute(run=step), "p3": compute(run=step), "p4": compute(run=step)},
    edges=[edge("p1", "p2"), edge("p2", "p3"), edge("p3", "p4")],
)


# --- a non-idempotent shell node between two computes (ambiguous effect) -------------


def shell_command(ctx):
    """The command records itself in the oracle from inside the shell; the first
    execution sleeps 60 s so that the worker can be killed while it runs."""
    first = executions(ctx) == 0
    line = shlex.quote(f"{ctx.node_id} {ctx.run_id}")
    return f"echo {line} >> {shlex.quote(ctx.input['oracle'])}; sleep {60 if first else 0}; echo shell-done"


shell_effect = define_workflow(
    name="shell-effect",
    start_at="s1",
    nodes={"s1": compute(run=step), "s2": shell(command=shell_command, shell=True), "s3": compute(run=step)},
    edges=[edge("s1", "s2"), edge("s2", "s3")],
)

# --- an idempotent action between two computes -----------------------------------------

idem_action = define_workflow(
    name="idem-action",
    start_at="a1",
    nodes={"a1": compute(run=step), "a2": action(run=step, idempotent=True), "a3": compute(run=step)},
    edges=[edge("a1", "a2"), edge("a2", "a3")],
)


# --- a long shell command (cancel) -----------------------------------------------------


def long_command(ctx):
    return f"echo {shlex.quote(f'{ctx.node_id} {ctx.run_id}')} >> {shlex.quote(ctx.input['oracle'])}; sleep 60; echo never"


long_shell = define_workflow(
    name="long-shell",
    start_at="sh",
    nodes={"sh": shell(command=long_command, shell=True), "after": compute(run=step)},
    edges=[edge("sh", "after")],
)


# --- retries ------------------------------------------------------------------------------


def flaky(ctx):
    """Fails on its first two executions (per the oracle), then succeeds."""
    record(ctx)
    count = executions(ctx)
    if count <= 2:
        raise RuntimeError(f"flaky failure #{count}")
    return {"succeeded_on": count}


flaky_retries_2 = define_workflow(
    name="flaky-retries-2",
    start_at="flaky",
    nodes={"flaky": compute(run=flaky, retries=2), "after": compute(run=step)},
    edges=[edge("flaky", "after")],
)

flaky_retries_1 = define_workflow(
    name="flaky-retries-1",
    start_at="flaky",
    nodes={"flaky": compute(run=flaky, retries=1), "after": compute(run=step)},
    edges=[edge("flaky", "after")],
)


# --- routing ------------------------------------------------------------------------------


def spin(ctx):
    record(ctx)
    return {"again": True}


looping = define_workflow(
    name="looping",
    start_at="spin",
    nodes={"spin": compute(run=spin)},
    edges=[switch("spin", on="$.again", cases={"true": "spin", "false": END})],
    max_steps=5,
)


def pick(ctx):
    record(ctx)
    return {"kind": "neither"}


unknown_case = define_workflow(
    name="unknown-case",
    start_at="pick",
    nodes={"pick": compute(run=pick), "a": compute(run=step), "b": compute(run=step)},
    edges=[switch("pick", on="$.kind", cases={"a": "a", "b": "b"})],
)


def failing_command(ctx):
    return f"echo {shlex.quote(f'{ctx.node_id} {ctx.run_id}')} >> {shlex.quote(ctx.input['oracle'])}; echo oops >&2; exit 3"


shell_failure_routed = define_workflow(
    name="shell-failure-routed",
    start_at="check",
    nodes={"check": shell(command=failing_command, shell=True), "good": compute(run=step),
           "bad": compute(run=step)},
    edges=[switch("check", on="$result.outcome", cases={"ok": "good", "failed": "bad"})],
)


# --- host stop while runners are busy ------------------------------------------------


def stubborn_step(ctx):
    """Ignores SIGTERM (as a careless node might), so killing its worker takes the whole grace period."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record(ctx)
    time.sleep(30)
    return {"node": ctx.node_id}


def gated_step(ctx):
    """Records itself, then waits (up to 30 s) for the gate file named in the input to exist."""
    record(ctx)
    deadline = time.monotonic() + 30
    while not os.path.exists(ctx.input["gate"]) and time.monotonic() < deadline:
        time.sleep(0.005)
    return {"node": ctx.node_id}


stubborn = define_workflow(name="stubborn", start_at="stubborn", nodes={"stubborn": compute(run=stubborn_step)},
                           edges=[])

gated = define_workflow(name="gated", start_at="gated", nodes={"gated": compute(run=gated_step)}, edges=[])

# --- three compute nodes and one action (runner hosts sharing a queue) ----------------

shared = define_workflow(
    name="shared",
    start_at="c1",
    nodes={
        "c1": compute(run=step),
        "c2": compute(run=step),
        # Not idempotent: a runner killed while it applies leaves it ambiguous, and the run parks.
        "act": action(run=step),
        "c3": compute(run=step),
    },
    edges=[edge("c1", "c2"), edge("c2", "act"), edge("act", "c3")],
)
