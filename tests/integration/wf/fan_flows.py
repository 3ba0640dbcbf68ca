"""The fan-out of the value-size tests: children's outputs gathered by their parent.

Apart from size_flows.py because each child run loads its workflow file as a fresh module: a file
with one small workflow costs a child launch less than one with all of them.
"""

from __future__ import annotations

from size_flows import text  # a sibling: the file's directory is on sys.path while it loads

from piwf_actors.workflows import compute, define_workflow, edge, map_workflow, sleep

# --- fan-out: children's outputs gathered by the parent -----------------------------------------

child = define_workflow(
    name="sized-child",
    start_at="make",
    nodes={"make": compute(run=lambda ctx: text(ctx.input["size"], ctx.input["index"]))},
    edges=[],
)


def _gathered(ctx) -> dict:
    outputs = ctx.outputs["each"]
    return {"count": len(outputs), "total": sum(len(o) for o in outputs),
            "exact": all(o == text(ctx.input["size"], i) for i, o in enumerate(outputs))}


fan_out = define_workflow(
    name="fan-out",
    start_at="each",
    nodes={
        "each": map_workflow(child, items=lambda ctx: list(range(ctx.input["children"])),
                             input=lambda item, ctx: {"size": ctx.input["size"], "index": item}),
        "nap": sleep(0.05),
        "check": compute(run=_gathered),
    },
    edges=[edge("each", "nap"), edge("nap", "check")],
)
