"""The workflows of bench/soak.py's other shapes: fan-out parents, message takers, sleepers and runs under
a concurrency limit (bench/soak_shapes.py starts them and checks them against the oracle).

Like `soak_workflows.soak`, every node that computes appends an `exec` line to the oracle file
(`ctx.input["oracle"]`) when it starts, in the same format (`exec <run> <node> <step> <attempt> <pid>
<create_time> <time>`), and returns an output with its `step`, so the soak's "nodes succeeded twice"
rule covers these shapes too. The shapes add their own lines (one O_APPEND write each):

    enter <run> <node> <step> <attempt> <slot> <time>   a run under a limit starts its held node; `slot` is
    leave <run> <node> <step> <attempt> <slot> <time>   the limit's key (`key:<k>`) or the fan-out
                                                        (`fan:<parent run>`) it counts against
    took  <run> <node> <step> <attempt> <n>             a message taker took the message numbered n
    woke  <run> <node> <step> <attempt> <time> <wake_at>  a sleeper's node after the sleep started

The held node writes `enter` when it starts and `leave` just before it returns; a run holds its slot
from its first claim to its end, so [its first `enter`, its last `leave`] lies inside the time it held
the slot, and at no moment may more of those intervals overlap than the limit allows.
"""

from __future__ import annotations

import hashlib
import time

from soak_workflows import _append, _record

from piwf_actors.workflows import END, compute, define_workflow, edge, limit, map_workflow, sleep, switch, wait_message

#: A fan-out's children at most at once, and the limit of `limited` runs per key.
FAN_MAX_PARALLEL = 2
LIMIT_MAX = 2


def fan_link(parent_run_id: str, index: int) -> str:
    return hashlib.sha256(f"fan/{parent_run_id}/{index}".encode()).hexdigest()[:16]


def _held(ctx, slot: str) -> None:
    """The held part of a node: `enter`, the node's work (a sleep), `leave`."""
    oracle = ctx.input["oracle"]
    _append(oracle, f"enter {ctx.run_id} {ctx.node_id} 0 {ctx.attempt_id} {slot} {time.time():.6f}")
    time.sleep(float(ctx.input.get("hold", 0.1)))
    _append(oracle, f"leave {ctx.run_id} {ctx.node_id} 0 {ctx.attempt_id} {slot} {time.time():.6f}")


# --- fan-out: a parent maps a child over its items, at most FAN_MAX_PARALLEL at once -----------------


def _fan_work(ctx):
    _record(ctx, 0)
    parent, index = ctx.input["parent"], int(ctx.input["index"])
    _held(ctx, f"fan:{parent}")
    return {"step": 0, "parent": parent, "index": index, "link": fan_link(parent, index)}


def _fan_sum(ctx):
    _record(ctx, 0)
    return {"step": 0, "children": len(ctx.outputs["each"]),
            "links": hashlib.sha256("/".join(item["link"] for item in ctx.outputs["each"]).encode()).hexdigest()[:16]}


fan_child = define_workflow(name="soak-fan-child", start_at="work", nodes={"work": compute(run=_fan_work)}, edges=[])

fan = define_workflow(
    name="soak-fan",
    start_at="each",
    nodes={
        "each": map_workflow(
            fan_child, items=lambda ctx: list(range(int(ctx.input["children"]))),
            input=lambda item, ctx: {"oracle": ctx.input["oracle"], "parent": ctx.run_id, "index": item,
                                     "hold": ctx.input.get("hold", 0.1)},
            max_parallel=FAN_MAX_PARALLEL),
        "sum": compute(run=_fan_sum),
    },
    edges=[edge("each", "sum")],
)


def fan_expected(parent_run_id: str, children: int) -> list[dict]:
    """The parent's `each` output when every child ran once."""
    return [{"step": 0, "parent": parent_run_id, "index": i, "link": fan_link(parent_run_id, i)}
            for i in range(children)]


# --- message taker: takes `messages` messages on "go", numbered in send order ---------------------------


def _note(ctx):
    taken = list((ctx.outputs.get("note") or {}).get("taken") or [])
    step = len(taken)
    _record(ctx, step)
    n = int(ctx.outputs["take"]["n"])
    _append(ctx.input["oracle"], f"took {ctx.run_id} note {step} {ctx.attempt_id} {n}")
    taken.append(n)
    return {"step": step, "taken": taken, "more": "yes" if len(taken) < int(ctx.input["messages"]) else "no"}


taker = define_workflow(
    name="soak-taker",
    start_at="take",
    max_steps=1000,
    nodes={"take": wait_message("go"), "note": compute(run=_note)},
    edges=[edge("take", "note"), switch("note", on="$.more", cases={"yes": "take", "no": END})],
)


# --- sleeper: sleeps until the time its input names ------------------------------------------------------


def _before(ctx):
    _record(ctx, 0)
    return {"step": 0}


def _after(ctx):
    _record(ctx, 0)
    now = time.time()
    _append(ctx.input["oracle"], f"woke {ctx.run_id} {ctx.node_id} 0 {ctx.attempt_id} {now:.6f} "
                                 f"{float(ctx.input['wake_at'])!r}")
    return {"step": 0, "woke_at": now}


sleeper = define_workflow(
    name="soak-sleeper",
    start_at="before",
    nodes={"before": compute(run=_before), "nap": sleep(until=lambda ctx: float(ctx.input["wake_at"])),
           "after": compute(run=_after)},
    edges=[edge("before", "nap"), edge("nap", "after")],
)


# --- limited: at most LIMIT_MAX runs per key at once --------------------------------------------------------


def _hold(ctx):
    _record(ctx, 0)
    _held(ctx, f"key:{ctx.input['k']}")
    return {"step": 0, "k": ctx.input["k"]}


limited = define_workflow(
    name="soak-limited",
    start_at="hold",
    nodes={"hold": compute(run=_hold), "after": compute(run=_before)},
    edges=[edge("hold", "after")],
    concurrency=limit(LIMIT_MAX, key=lambda input: {"k": input["k"]}),
)

#: The nodes of each shape that write `exec` lines and return `{"step": …}`.
RECORDED = {"soak-fan-child": ("work",), "soak-fan": ("sum",), "soak-taker": ("note",),
            "soak-sleeper": ("before", "after"), "soak-limited": ("hold", "after")}
