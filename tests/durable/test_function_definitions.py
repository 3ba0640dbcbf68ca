"""The function form at definition time: what `@workflow` and `@step` make, what they refuse (one
line each), the digest of a function's code, and the pictures of a function workflow and of its run.
No host: these are pure."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from piwf_actors.durable import StepFailed, decide, function_parts, sleep, step, workflow
from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.discovery import load_snapshot, resolve
from piwf_actors.workflows.graph import build_graph, function_run_graph
from piwf_actors.workflows.graph_data import graph_document, graph_of
from piwf_actors.workflows.graph_render import render_mermaid, render_text
from piwf_actors.workflows.model import Workflow


@dataclass
class Order:
    item: str
    quantity: int = 1


@step
def price(order: Order) -> float:
    return 2.5 * order.quantity


@step(effect=True, idempotent=True, retries=2, timeout_s=30)
def charge(amount: float) -> str:
    return f"charged {amount}"


@workflow(name="shop", max_steps=50)
def shop(order: Order, express: bool = False) -> dict:
    """Price an order, then charge it.

    More words that are not the description."""
    amount = price(order)
    return {"receipt": charge(amount), "express": express}


def test_a_function_workflow_is_a_workflow_with_an_empty_graph_and_its_function() -> None:
    assert isinstance(shop, Workflow)
    assert (shop.name, shop.start_at, dict(shop.nodes), dict(shop.routes)) == ("shop", "", {}, {})
    assert shop.function is not None and shop.function.__name__ == "shop"
    assert shop.max_steps == 50 and shop.description == "Price an order, then charge it."
    assert shop.input_shape is not None and shop.input_shape["required"] == ("order",)
    assert set(shop.input_shape["properties"]) == {"order", "express"}
    assert shop.source_path == str(Path(__file__).resolve())


def test_defaults_name_and_max_steps_and_an_explicit_input_shape() -> None:
    @workflow
    def tidy(anything=None):
        return anything

    assert (tidy.name, tidy.max_steps) == ("tidy", 1000)
    explicit = workflow(name="explicit", input={"type": "object"})(lambda: None)  # a lambda is a function too
    assert dict(explicit.input_shape) == {"type": "object"}


@pytest.mark.parametrize(("make", "words"), [
    (lambda: workflow(name="Bad Name")(lambda: None), "workflow name 'Bad Name' is invalid"),
    (lambda: workflow(name="zero", max_steps=0)(lambda: None), "max_steps must be a positive integer"),
    (lambda: step(name="a#2")(lambda: None), "no '#'"),
    (lambda: step(name="return")(lambda: None), "reserved"),
    (lambda: step(name="neg", retries=-1)(lambda: None), "retries must be a non-negative integer"),
    (lambda: step(name="pure", idempotent=True)(lambda: None), "idempotent= applies to effect=True steps only"),
    (lambda: workflow(name="star")(lambda *args: None), "*args"),
])
def test_definition_mistakes_are_one_line_errors(make, words: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as raised:
        make()
    message = str(raised.value)
    assert words in message and "\n" not in message, message


def test_async_functions_are_refused() -> None:
    async def later() -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match="not async"):
        workflow(later)


def test_durable_calls_outside_a_run_say_so_and_the_plain_function_stays_callable() -> None:
    for call in (lambda: price(Order("tea")), lambda: sleep(1),
                 lambda: decide("ok", title="Go?", choices={"yes": "Yes"})):
        with pytest.raises(RuntimeError, match="called outside a durable workflow run"):
            call()
    assert price.fn(Order("tea", 2)) == 5.0
    assert price.returns is float


def test_step_failed_carries_its_code_message_and_step() -> None:
    failure = StepFailed("timeout", "timed out after 30 s", "charge")
    assert (failure.code, failure.message, failure.step) == ("timeout", "timed out after 30 s", "charge")
    assert isinstance(failure, Exception)


SOURCE = """
from piwf_actors.durable import step, workflow

@step
def helper(x: int) -> int:
    return x + {delta}

@workflow(name="calc")
def calc(x: int) -> int:
    return helper(x)
"""


def test_the_digest_covers_the_function_and_the_code_of_the_steps_it_calls(tmp_path: Path) -> None:
    path = tmp_path / "calc.py"

    def load(delta: int) -> Workflow:
        return _exec(textwrap.dedent(SOURCE.format(delta=delta)).encode(), path)

    one, again, other = load(1), load(1), load(2)
    assert one.digest == again.digest, "the same source must give the same digest in another load"
    assert one.digest != other.digest, "changing a step's body must change the workflow's digest"


def _exec(source: bytes, path: Path) -> Workflow:
    path.write_bytes(source)
    return resolve(f"{path}:calc", str(path.parent)).workflow


def test_discovery_finds_a_function_workflow_and_its_snapshot_loads_with_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "calc.py"
    source = textwrap.dedent(SOURCE.format(delta=1)).encode()
    loaded = _exec(source, path)
    again = load_snapshot(source, str(path), "calc", loaded.digest, str(tmp_path))
    assert again.digest == loaded.digest and again.function is not None
    assert again.namespace.get(again.digest) == "calc"


def test_the_picture_of_a_function_workflow_lists_the_steps_its_code_names() -> None:
    steps, children = function_parts(shop)
    assert [s.name for s in steps] == ["price", "charge"] and children == []
    graph = build_graph(shop)
    assert graph.function and [(n.node_id, n.kind, n.summary) for n in graph.nodes] == [
        ("price", "compute", "step"), ("charge", "action", "effect step · idempotent · retries 2")]
    text = render_text(graph)
    assert text.splitlines()[0] == "workflow shop  function workflow: the steps its code names (a run draws the " \
                                   "steps it took)"
    assert "→" not in text  # no routes: the code decides
    assert "start((start))" not in render_mermaid(graph)
    stored = graph_of(graph_document(shop))
    assert stored == graph, "the stored document keeps that it is a function workflow"


def test_the_picture_of_a_function_run_is_the_steps_it_took_in_order() -> None:
    view = {"workflow": "shop", "nodes": [{"node_id": "price"}, {"node_id": "price#2"}, {"node_id": "charge"},
                                          {"node_id": "return"}]}
    graph = function_run_graph(build_graph(shop), view)
    assert [(n.node_id, n.kind) for n in graph.nodes] == [("price", "compute"), ("price#2", "compute"),
                                                          ("charge", "action"), ("return", "")]
    assert graph.start == "price" and graph.edges == () and graph.function


def test_a_graph_workflows_stored_document_is_unchanged_by_the_function_field() -> None:
    from piwf_actors.workflows import compute, define_workflow

    plain = define_workflow(name="plain", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
    document = graph_document(plain)
    assert "function" not in document["graphs"][plain.digest]["graph"]
