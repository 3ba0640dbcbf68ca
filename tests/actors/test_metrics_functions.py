"""The Prometheus exporter counts durable function runs (piwf_actors.durable) as it counts graph runs:
runs started and finished, each finished step a node attempt labelled with its kind — and never a
label per step id (a loop's `square#1234` would make a series per iteration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_metrics import HOST, LOOPBACK_ANY_PORT, Scrape, db_count, metrics_url
from testsupport import wait_for

pytestmark = pytest.mark.timeout(120, method="thread")

WORKFLOWS = '''
from piwf_actors.durable import decide, step, workflow
from piwf_actors.workflows import action, compute, define_workflow, edge


@step
def one() -> dict:
    return {"n": 1}


@step(effect=True)
def act() -> dict:
    return {"acted": True}


@step
def plus(n: int) -> dict:
    return {"n": n + 1}


@workflow(name="fn_ok")
def fn_ok() -> dict:
    return plus(one()["n"]) | act()


graph_ok = define_workflow(
    name="graph_ok", start_at="a",
    nodes={"a": compute(run=lambda ctx: {"n": 1}),
           "b": action(run=lambda ctx: {"acted": True}),
           "c": compute(run=lambda ctx: {"n": ctx.outputs["a"]["n"] + 1})},
    edges=[edge("a", "b"), edge("b", "c")],
)


@step
def square(value: int) -> int:
    return value * value


@workflow(name="fn_loop")
def fn_loop(count: int) -> int:
    return sum(square(value) for value in range(count))


@workflow(name="fn_decide")
def fn_decide() -> str:
    return decide("approve", title="Ship?", choices={"yes": "Yes"}).choice
'''

#: Every label a piwf metric may carry: bounded sets (kinds, statuses) and the histograms' buckets.
BOUNDED_LABELS = {"kind", "status", "le"}


@pytest.fixture
def flows(state_dir: Path) -> Path:
    path = state_dir / "function_metrics_flows.py"
    path.write_text(WORKFLOWS)
    return path


def start(flows: Path, host: Any, name: str, input: Any = None) -> str:
    return host.start_run(f"{flows}:{name}", input)["receipt"]["run_id"]


def test_function_runs_and_their_steps_are_counted_by_kind_like_graph_runs(hosts, state_dir, flows):
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    url = metrics_url(host)
    graph = start(flows, host, "graph_ok")
    assert host.wait_for_run(graph)["status"] == "done"
    wait_for(lambda: Scrape(url).value("piwf_runs_finished_total", status="done") == 1, 30, "the graph run counted")
    graph_scrape = Scrape(url)
    function = start(flows, host, "fn_ok")
    assert host.wait_for_run(function)["status"] == "done"
    function_scrape = Scrape(url)

    def added(name: str, **labels: str) -> float:
        return function_scrape.value(name, **labels) - graph_scrape.value(name, **labels)

    # The same three nodes (compute, effect, compute) as the graph's, plus the function's `return`.
    assert added("piwf_runs_started_total") == graph_scrape.value("piwf_runs_started_total") == 1
    assert added("piwf_runs_finished_total", status="done") == 1
    assert added("piwf_node_duration_seconds_count", kind="effect") == 1 == graph_scrape.value(
        "piwf_node_duration_seconds_count", kind="effect")
    assert graph_scrape.value("piwf_node_duration_seconds_count", kind="compute") == 2
    assert added("piwf_node_duration_seconds_count", kind="compute") == 3  # one, plus, return
    assert function_scrape.total("piwf_node_duration_seconds_count") == db_count(
        state_dir, "SELECT count(*) FROM node_attempt WHERE finished_at IS NOT NULL") == 7


def test_a_decision_step_counts_as_a_decision_and_a_long_loop_adds_no_series(hosts, state_dir, flows):
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    url = metrics_url(host)
    asked = start(flows, host, "fn_decide")
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 60, "the decision")
    assert Scrape(url).value("piwf_decisions_pending") == 1
    host.answer_decision(request.request_id, "yes")
    assert host.wait_for_run(asked)["output"] == "yes"
    before = Scrape(url)
    assert before.value("piwf_node_duration_seconds_count", kind="decision") == 1
    assert before.value("piwf_decisions_pending") == 0

    looped = start(flows, host, "fn_loop", {"count": 40})
    view = host.wait_for_run(looped)
    assert view["output"] == sum(value * value for value in range(40))
    assert [node["node_id"] for node in view["nodes"]][:3] == ["square", "square#2", "square#3"]
    after = Scrape(url)
    assert after.value("piwf_node_duration_seconds_count", kind="compute") - before.value(
        "piwf_node_duration_seconds_count", kind="compute") == 41  # forty squares and the return
    # Forty step ids, and not one more series: every label is from a bounded set.
    assert set(after.samples) == set(before.samples)
    labels = {name for (_, label_items) in after.samples for name, _ in label_items}
    assert labels <= BOUNDED_LABELS, labels
    assert not [key for key in after.samples if any("square" in value for _, value in key[1])]
