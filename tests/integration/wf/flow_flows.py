"""Workflows for the flow-control crash tests (test_flow_crashes.py): fan-outs, durable sleeps,
mailboxes, concurrency limits and priorities, each node counting itself in an oracle file.

Every oracle line is one `O_APPEND` write of `"<word> <fields…>\\n"` (atomic for lines this
short, also when the process is SIGKILLed right after). Times are `time.time()` of this machine
(every host and worker of these tests runs here, so one clock orders them all).

Input keys the nodes understand:
- `oracle`: the oracle file (required);
- `gate` (`queued`, `listener`): a file the node waits for (polling, at most 60 s) after recording
  its start, so a test can hold the first runs in their workers while it queues the rest, or be
  sure that a kill lands inside an action;
- `sleep` (`queued`, `limited`): seconds the node sleeps between its start and end records.

A child workflow is a module attribute of the parent's file: the host loads children from it.
"""

from __future__ import annotations

import os
import time

from piwf_actors.workflows import (
    action,
    compute,
    define_workflow,
    edge,
    limit,
    map_workflow,
    sleep,
    wait_message,
)

#: Children of one `fan` run (test 1) and the fan-out's limit.
FAN_CHILDREN = 200
FAN_MAX_PARALLEL = 4
#: `napper`'s durable sleep (test 2), and `long_napper`'s (long enough for the next host to take
#: over before it ends, also after a dead host's lease on PostgreSQL).
NAP_S = 3.0
LONG_NAP_S = 10.0
#: Active runs of `limited` per key (test 4).
LIMIT = 2


def append(path: str, *fields: object) -> None:
    """One oracle line of `fields`, in a single write."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (" ".join(str(f) for f in fields) + "\n").encode())
    finally:
        os.close(fd)


def child_sleep_s(index: int) -> float:
    """20-50 ms, spread over the indexes (deterministic: a re-run sleeps as long)."""
    return 0.020 + (index * 37 % 31) / 1000


# --- 1. a fan-out of 200 children, 4 at once --------------------------------------------------------


def _fan_work(ctx):
    index = ctx.input["index"]
    append(ctx.input["oracle"], "start", index, ctx.run_id, repr(time.time()), os.getpid())
    time.sleep(child_sleep_s(index))
    append(ctx.input["oracle"], "end", index, ctx.run_id, repr(time.time()), os.getpid())
    return {"index": index, "square": index * index}


fan_child = define_workflow(name="fan-child", start_at="work", nodes={"work": compute(run=_fan_work)}, edges=[])

fan = define_workflow(
    name="fan", start_at="children",
    nodes={"children": map_workflow(
        fan_child, items=lambda ctx: list(range(ctx.input["n"])),
        input=lambda item, ctx: {"index": item, "oracle": ctx.input["oracle"]},
        max_parallel=FAN_MAX_PARALLEL)},
    edges=[])


# --- 2. a durable sleep -----------------------------------------------------------------------------


def _after_nap(ctx):
    append(ctx.input["oracle"], "after", ctx.run_id, repr(time.time()), os.getpid())
    return ctx.outputs["nap"]


napper = define_workflow(name="napper", start_at="nap",
                         nodes={"nap": sleep(seconds=NAP_S), "after": compute(run=_after_nap)},
                         edges=[edge("nap", "after")])
long_napper = define_workflow(name="long-napper", start_at="nap",
                              nodes={"nap": sleep(seconds=LONG_NAP_S), "after": compute(run=_after_nap)},
                              edges=[edge("nap", "after")])


# --- 3. mailboxes -----------------------------------------------------------------------------------


def _got(ctx):
    """The node after the wait: the payload it took, once per execution; then it holds until the
    `gate` file exists, if the input names one."""
    payload = ctx.outputs["wait"]
    append(ctx.input["oracle"], "got", ctx.run_id, payload["n"])
    _hold(ctx.input.get("gate"))
    return payload


def _hold(gate: str | None) -> None:
    """Wait (polling, at most 60 s) until the file `gate` exists; at once without one."""
    deadline = time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)


#: Sleeps 1 s before it waits: a message sent at once lands in the mailbox first.
late_listener = define_workflow(name="late-listener", start_at="nap",
                                nodes={"nap": sleep(seconds=1), "wait": wait_message("go"),
                                       "got": compute(run=_got)},
                                edges=[edge("nap", "wait"), edge("wait", "got")])

#: Waits at once; the node after the wait is a non-idempotent action, so it never runs twice (a
#: host killed inside it parks the run on an ambiguous effect): one oracle line per consumption.
listener = define_workflow(name="listener", start_at="wait",
                           nodes={"wait": wait_message("go"), "got": action(run=_got)},
                           edges=[edge("wait", "got")])


# --- 4. a concurrency limit -------------------------------------------------------------------------


def _limited_work(ctx):
    append(ctx.input["oracle"], "start", ctx.run_id, repr(time.time()), os.getpid())
    time.sleep(ctx.input.get("sleep", 0.1))
    append(ctx.input["oracle"], "end", ctx.run_id, repr(time.time()), os.getpid())
    return {"ok": True}


limited = define_workflow(name="limited", start_at="work", nodes={"work": compute(run=_limited_work)}, edges=[],
                          concurrency=limit(LIMIT, key=lambda run_input: {"cluster": run_input["cluster"]}))


# --- 5. priorities ----------------------------------------------------------------------------------


def _queued_work(ctx):
    append(ctx.input["oracle"], "start", ctx.run_id, repr(time.time()), os.getpid())
    _hold(ctx.input.get("gate"))
    time.sleep(ctx.input.get("sleep", 0.1))
    return {"ok": True}


queued = define_workflow(name="queued", start_at="work", nodes={"work": compute(run=_queued_work)}, edges=[])
