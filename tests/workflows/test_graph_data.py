"""A definition's graph as stored data (workflows/graph_data.py): the document a host stores when a run
starts draws exactly what the workflow object draws, in every format, with and without a run on it;
equal definitions give equal bytes; a child workflow's document is cut from its parent's without any
code; a malformed document is refused with one line, never half drawn. Pure: no host."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_graph import NOW, every_kind, include_flow, parked_view, release

from piwf_actors.workflows import compute, define_workflow, edge, include_workflow, map_workflow, run_workflow
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_data import (
    GraphDataError,
    child_document,
    document_bytes,
    document_from_bytes,
    graph_blob,
    graph_document,
    graph_of,
)
from piwf_actors.workflows.graph_render import RENDERERS
from piwf_actors.workflows.graph_run import overlay


def stored(workflow: Any) -> Any:
    """The graph as a host stores it and a client reads it back: bytes, JSON, the Graph."""
    return graph_of(document_from_bytes(graph_blob(workflow)))


@pytest.mark.parametrize("make", [every_kind, include_flow, release,
                                  lambda: define_workflow(name="wrap", start_at="o",
                                                          nodes={"o": include_workflow(include_flow())}, edges=[])])
def test_the_stored_graph_draws_what_the_workflow_draws(make: Any) -> None:
    workflow = make()
    assert stored(workflow) == build_graph(workflow)
    run = overlay(parked_view(), NOW)
    for form, render in RENDERERS.items():
        assert render(stored(workflow), None) == render(build_graph(workflow), None), form
        assert render(stored(workflow), run) == render(build_graph(workflow), run), form


def leaf() -> Any:
    return define_workflow(name="leaf", start_at="x", nodes={"x": compute(run=lambda ctx: 1)}, edges=[])


def middle() -> Any:
    return define_workflow(name="middle", start_at="m", nodes={"m": run_workflow(leaf())}, edges=[])


def top() -> Any:
    return define_workflow(name="top", start_at="a", nodes={
        "a": map_workflow(middle(), items=lambda ctx: [1]), "b": run_workflow(leaf())}, edges=[edge("a", "b")])


def test_equal_definitions_give_equal_bytes_and_a_child_document_is_its_own() -> None:
    assert graph_blob(top()) == graph_blob(top())  # two loads of one definition: one stored copy
    document = graph_document(top())
    assert sorted(graph["graph"]["workflow"] for graph in document["graphs"].values()) == ["leaf", "middle", "top"]
    # The child's document, cut from the parent's, is the document of the child itself: a child run of
    # `middle` and a run of `middle` started directly share one stored copy.
    assert document_bytes(child_document(document, middle().digest)) == graph_blob(middle())
    assert document_bytes(child_document(document, leaf().digest)) == graph_blob(leaf())
    assert child_document(document, "0" * 64) is None
    assert graph_of(child_document(document, middle().digest)) == build_graph(middle())


def broken(change: Any) -> Any:
    document = json.loads(graph_blob(release()))
    change(document, document["graphs"][document["workflow"]]["graph"])
    return document


@pytest.mark.parametrize(("document", "message"), [
    (None, "graph document must be a map, got NoneType"),
    ({"format": "piwf.graph.v9"}, "not a piwf.graph.v1 document (format 'piwf.graph.v9')"),
    (broken(lambda d, g: d.update(workflow="nope")), "the document has no graph of its own workflow"),
    (broken(lambda d, g: d.update(workflow=["a"])), "workflow must be text, got list"),
    (broken(lambda d, g: g.update(nodes="x")), "nodes must be a list, got str"),
    (broken(lambda d, g: g["nodes"][0].update(kind=3)), "node 0 kind must be text, got int"),
    (broken(lambda d, g: g["nodes"].append(dict(g["nodes"][0]))), "a node id appears twice"),
    (broken(lambda d, g: g["edges"][0].update(target="gone")),
     "edge 'test' → 'gone' names a node the graph does not have"),
    (broken(lambda d, g: g["nodes"][0].update(group="g")),
     "node 'test' is in include 'g', which the graph does not have"),
    (broken(lambda d, g: g.update(groups=[{"mount_id": "a", "parent": "b", "workflow": "", "exits": []},
                                          {"mount_id": "b", "parent": "a", "workflow": "", "exits": []}])),
     "include 'a' is not nested in includes the graph has"),
    (broken(lambda d, g: g["nodes"][0].update(children=[["x"]])), "node 0: a child workflow must be [label, workflow]"),
])
def test_a_malformed_document_is_refused_in_one_line(document: Any, message: str) -> None:
    with pytest.raises(GraphDataError) as refused:
        graph_of(document)
    assert str(refused.value) == message


def test_a_child_document_is_cut_from_a_document_whose_starts_are_malformed() -> None:
    """What the writer cuts a child run's graph from (store/commands/child_runs.py) never raises: a
    `starts` that is not a list names no more graphs."""
    document = graph_document(top())
    document["graphs"][middle().digest]["starts"] = 5
    assert child_document(document, middle().digest)["graphs"] == {middle().digest: document["graphs"][middle().digest]}


def test_bytes_that_are_not_json_are_refused() -> None:
    with pytest.raises(GraphDataError, match="a stored graph is not JSON"):
        document_from_bytes(b"\xff not json")
