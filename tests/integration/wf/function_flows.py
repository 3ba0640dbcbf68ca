"""Function workflows the durable-function tests run (module attributes: the host's workers load them from the
snapshot of this file). Steps append one line to an oracle file outside the database per execution,
so a test counts what actually ran."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from piwf_actors.durable import (
    StepFailed,
    agent,
    checkpoint,
    choice,
    decide,
    map_children,
    run_child,
    send_message,
    sleep,
    step,
    text_input,
    wait_message,
    workflow,
)
from piwf_actors.workflows import compute, define_workflow, edge, run_workflow


def record(oracle: str, line: str) -> None:
    with open(oracle, "a", encoding="utf-8") as out:
        out.write(line + "\n")


@step
def square(oracle: str, value: int) -> int:
    record(oracle, f"square {value}")
    return value * value


@step(retries=1)
def flaky(oracle: str, value: int) -> int:
    """Fails on its first attempt for each value, then succeeds (retried once)."""
    record(oracle, f"flaky {value}")
    lines = Path(oracle).read_text(encoding="utf-8").splitlines()
    if lines.count(f"flaky {value}") == 1:
        raise RuntimeError(f"flaky {value} fails once")
    return value + 100


@step
def broken(oracle: str) -> int:
    record(oracle, "broken")
    raise ValueError("broken step")


@step(effect=True)
def publish(oracle: str, total: int) -> dict[str, Any]:
    record(oracle, f"publish {total}")
    return {"published": total}


@workflow(name="loops")
def loops(oracle: str, count: int = 3) -> dict[str, Any]:
    """A loop with local state, a retried step and a failing step caught."""
    total = 0
    squares = []
    for value in range(count):
        squared = square(oracle, value)
        squares.append(squared)
        total += squared
    total += flaky(oracle, 1)
    try:
        broken(oracle)
        caught = None
    except StepFailed as failure:
        caught = {"code": failure.code, "message": failure.message, "step": failure.step}
    receipt = publish(oracle, total)
    return {"squares": squares, "total": total, "caught": caught, "receipt": receipt}


@workflow(name="uncaught")
def uncaught(oracle: str) -> int:
    return broken(oracle)


@workflow(name="raises")
def raises(oracle: str) -> int:
    square(oracle, 2)
    raise KeyError("no such thing")


@workflow(name="napper")
def napper(oracle: str) -> dict[str, Any]:
    before = square(oracle, 3)
    sleep(3600)
    after = square(oracle, 4)
    return {"before": before, "after": after}


@workflow(name="asker")
def asker(oracle: str, service: str = "api") -> dict[str, Any]:
    first = square(oracle, 5)
    answer = decide("approve", title=f"Deploy {service}?",
                    choices={"yes": "Deploy", "no": choice("Stop", input=text_input("why", "Why not?"))})
    if answer.choice == "yes":
        return {"deployed": publish(oracle, first), "by": answer.answered_by is not None}
    return {"deployed": False, "why": answer.input.get("why")}


@workflow(name="reads-outside")
def reads_outside(oracle: str, switch: str) -> int:
    """Reads a file outside any step (what the docs say not to do): a replay after it changed takes
    another path, which the engine must refuse."""
    square(oracle, 1)
    if Path(switch).read_text(encoding="utf-8").strip() == "a":
        square(oracle, 2)
    else:
        publish(oracle, 2)
    sleep(60)
    return 1


@workflow(name="listener")
def listener(oracle: str) -> Any:
    square(oracle, 1)
    got = wait_message("go", timeout_s=600, default={"late": True})
    note = checkpoint("note", title="Say something")
    return {"got": got, "note": note}


graph_child = define_workflow(
    name="graph-child", start_at="double", nodes={"double": compute(run=lambda ctx: {"double": ctx.input["n"] * 2})},
    edges=[])


@workflow(name="fn-child")
def fn_child(oracle: str, n: int) -> int:
    return square(oracle, n)


@workflow(name="parent-fn")
def parent_fn(oracle: str) -> dict[str, Any]:
    graph_out = run_child(graph_child, {"n": 21})
    mapped = map_children(fn_child, [{"oracle": oracle, "n": n} for n in (1, 2, 3)], max_parallel=2)
    return {"graph": graph_out, "mapped": mapped}


parent_graph = define_workflow(
    name="parent-graph", start_at="child",
    nodes={"child": run_workflow(fn_child, input=lambda ctx: {"oracle": ctx.input["oracle"], "n": 7}),
           "wrap": compute(run=lambda ctx: {"child": ctx.outputs["child"]})},
    edges=[edge("child", "wrap")])


@workflow(name="messenger")
def messenger(target: str) -> dict[str, Any]:
    return send_message(target, "go", {"from": "messenger"})


@dataclass
class Release:
    service: str
    env: Literal["staging", "prod"] = "staging"


@dataclass
class Report:
    service: str
    passed: int


@step
def run_tests(oracle: str, release: Release) -> Report:
    record(oracle, f"run_tests {release.service}")
    return Report(service=release.service, passed=3)


@workflow(name="typed-release")
def typed_release(oracle: str, release: Release, notify: bool = True) -> dict[str, Any]:
    """Typed parameters and a dataclass step result that must come back as one after a wait."""
    report = run_tests(oracle, release)
    sleep(30)
    assert isinstance(report, Report), f"replayed as {type(report).__name__}"
    return {"service": report.service, "env": release.env, "passed": report.passed, "notify": notify,
            "types": [type(release).__name__, type(report).__name__]}


@step(effect=True)
def send_invoice(oracle: str, block_flag: str) -> dict[str, Any]:
    """Records its execution, then holds while `block_flag` exists (at most 60 s): the test kills the
    worker in the middle of it."""
    record(oracle, "send_invoice")
    deadline = time.monotonic() + 60
    while os.path.exists(block_flag) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"sent": True}


@workflow(name="invoicer")
def invoicer(oracle: str, block_flag: str) -> dict[str, Any]:
    before = square(oracle, 6)
    sent = send_invoice(oracle, block_flag)
    return {"before": before, "sent": sent, "after": square(oracle, 7)}


@dataclass
class Summary:
    summary: str
    words: int = 0


@workflow(name="summarizer-fn")
def summarizer(oracle: str, topic: str) -> dict[str, Any]:
    """An agent step inside a function: the session's submission is checked against `Summary`'s shape
    by the worker, and the accepted one is what `agent` returns (then recorded, never asked again)."""
    before = square(oracle, 3)
    got = agent("summarize", prompt=f"Summarize {topic}", expected_output=Summary, max_submissions=2)
    record(oracle, f"summarized {got['summary']}")
    return {"before": before, "summary": got["summary"], "words": got.get("words", 0)}
