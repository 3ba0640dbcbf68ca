"""The picture of a workflow (workflows/graph.py, graph_render.py): the model built from a definition, the
three formats, a run's overlay from run.get-shaped views, and the graph of a view without its definition.
Pure functions: no host, fixed `now`s."""

from __future__ import annotations

import time
from typing import Any

import pytest

from piwf_actors.workflows import (
    END,
    action,
    agent,
    checkpoint,
    choice,
    compute,
    define_workflow,
    edge,
    human_decision,
    include_workflow,
    map_workflow,
    notify,
    parallel,
    run_workflow,
    shell,
    sleep,
    switch,
    wait_message,
)
from piwf_actors.workflows.graph import GraphEdge, GraphGroup, build_graph, graph_from_view
from piwf_actors.workflows.graph_render import render_dot, render_mermaid, render_text, tree
from piwf_actors.workflows.graph_run import overlay, wait_words

NOW = 1_800_000_000.0


def deploy(ctx: Any) -> dict[str, Any]:
    return {"deployed": True}


def leaf(name: str) -> Any:
    return define_workflow(name=name, start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])


def every_kind() -> Any:
    return define_workflow(name="kinds", start_at="c", nodes={
        "c": compute(run=deploy),
        "act": action(run=lambda ctx: 1, retries=2),
        "sh": shell(command=["pytest", "-q", "tests dir"]),
        "sh2": shell(command="make all", shell=True),
        "sh3": shell(command=lambda ctx: ["true"]),
        "cp": checkpoint(prompt="Anything to add?", timeout_s=90),
        "note": notify(message=lambda ctx: "computed"),
        "ask": agent(prompt="Summarize"),
        "ok": human_decision(audience="ops", choices={"yes": choice(label="Yes"), "no": choice(label="No")},
                             request={"title": "Go?"}, on_timeout={"after_s": 600, "response": {"choice": "no"}}),
        "nap": sleep(seconds=30),
        "nap2": sleep(until=lambda ctx: 0),
        "mail": wait_message("go", timeout_s=600),
        "one": run_workflow(leaf("single")),
        "many": map_workflow(leaf("per"), items=lambda ctx: [1, 2], max_parallel=4),
        "both": parallel({"lint": leaf("linter"), "test": leaf("tester")}),
    }, edges=[edge("c", "act"), edge("act", "sh"), edge("sh", "sh2"), edge("sh2", "sh3"), edge("sh3", "cp"),
              edge("cp", "note"), edge("note", "ask"), edge("ask", "ok"),
              switch("ok", on="$.choice", cases={"yes": "nap", "no": "nap2"}), edge("nap", "mail"),
              edge("nap2", "mail"), edge("mail", "one"), edge("one", "many"), edge("many", "both")])


def test_every_kind_has_its_summary_made_of_literal_options_only() -> None:
    graph = build_graph(every_kind())
    assert [(node.node_id, node.kind, node.summary) for node in graph.nodes] == [
        ("c", "compute", "deploy()"),
        ("act", "action", "retries 2"),
        ("sh", "shell", "pytest -q 'tests dir'"),
        ("sh2", "shell", "make all"),
        ("sh3", "shell", "(command computed)"),
        ("cp", "checkpoint", "Anything to add? · timeout 1m30s"),
        ("note", "notify", ""),
        ("ask", "agent", "Summarize"),
        ("ok", "human_decision", "ops · yes | no · timeout 10m00s → no"),
        ("nap", "sleep", "30s"),
        ("nap2", "sleep", "until (computed)"),
        ("mail", "wait_message", "topic go · timeout 10m00s"),
        ("one", "run_workflow", "single"),
        ("many", "map_workflow", "per per item · max_parallel 4"),
        ("both", "parallel", "lint, test"),
    ]
    children = {node.node_id: node.children for node in graph.nodes if node.children}
    assert children == {"one": (("", "single"),), "many": (("per item", "per"),),
                        "both": (("lint", "linter"), ("test", "tester"))}
    assert graph.routes_of("ok") == [GraphEdge("ok", "nap", "yes", "$.choice"), GraphEdge("ok", "nap2", "no", "$.choice")]


def include_flow() -> Any:
    """An include `r` of `inner` (which itself includes `deep` as `d`), left through two exits."""
    deep = define_workflow(name="deep", start_at="x", nodes={"x": compute(run=lambda ctx: 1)}, edges=[])
    inner = define_workflow(name="inner", start_at="d", nodes={
        "d": include_workflow(deep),
        "check": compute(run=lambda ctx: 1),
    }, edges=[edge("d.x", "check"), switch("check", on="$.ok", cases={"true": END}, default="d")])
    return define_workflow(name="outer", start_at="r", nodes={
        "r": include_workflow(inner),
        "fail": compute(run=lambda ctx: 1),
        "after": notify(message="done"),
    }, edges=[edge("r.check", "fail"), switch("fail", on="$result.outcome", cases={"ok": "after"})])


def test_includes_are_groups_with_their_exits_and_edges_leaving_them_name_the_exit() -> None:
    flow = define_workflow(name="wrap", start_at="o", nodes={
        "o": include_workflow(include_flow())}, edges=[])
    graph = build_graph(flow)
    assert graph.start == "o/r/d/x"
    assert graph.groups == (GraphGroup("o", None, "outer", ("o/after",)),
                            GraphGroup("o/r", "o", "inner", ("o/r/check",)),
                            GraphGroup("o/r/d", "o/r", "deep", ("o/r/d/x",)))
    assert graph.routes_of("o/r/d/x") == [GraphEdge("o/r/d/x", "o/r/check", exit="d.x")]
    # The exit's switch: its END case now goes on to `fail` (leaving `r`, not `o`); its default stays inside.
    assert graph.routes_of("o/r/check") == [GraphEdge("o/r/check", "o/fail", "true", "$.ok", "r.check"),
                                            GraphEdge("o/r/check", "o/r/d/x", "else", "$.ok")]
    assert graph.routes_of("o/fail") == [GraphEdge("o/fail", "o/after", "ok", "$result.outcome")]
    assert graph.routes_of("o/after") == []


def test_the_text_tree_nests_includes_and_lists_routes() -> None:
    text = render_text(build_graph(include_flow()))
    assert text == (
        "workflow outer  start r/d/x\n"
        "├── include r: inner  (exits r.check)\n"
        "│   ├── include r/d: deep  (exits d.x)\n"
        "│   │   └── r/d/x  compute\n"
        "│   │       └── → r/check  (exit d.x)\n"
        "│   └── r/check  compute\n"
        "│       ├── $.ok = true → fail  (exit r.check)\n"
        "│       └── else → r/d/x\n"
        "├── fail  compute\n"
        "│   └── $result.outcome = ok → after\n"
        "└── after  notify: done\n"
        "    └── → end\n")


def small() -> Any:
    return define_workflow(name="small", start_at="build", nodes={
        "build": shell(command=["make", 'say "hi" #1 <b>']),
        "end": compute(run=lambda ctx: 1),  # `end` is a Mermaid keyword: node ids never become diagram ids
        "fan": map_workflow(leaf("child"), items=lambda ctx: []),
    }, edges=[switch("build", on="$result.outcome", cases={"ok": "fan", "failed": "end"})])


def test_mermaid_shapes_labels_escapes_and_children() -> None:
    assert render_mermaid(build_graph(small())) == (
        "flowchart TD\n"
        "    n1[/\"build<br/>shell: make 'say #quot;hi#quot; #35;1 #lt;b#gt;'\"/]\n"
        '    n2["end<br/>compute"]\n'
        '    n3[["fan<br/>map_workflow: child per item"]]\n'
        "    start((start)) --> n1\n"
        "    stop((end))\n"
        '    n1 -->|"ok"| n3\n'
        '    n1 -->|"failed"| n2\n'
        "    n2 --> stop\n"
        "    n3 --> stop\n"
        '    c1("workflow child")\n'
        '    n3 -.->|"per item"| c1\n')


def test_mermaid_subgraphs_nest_like_the_includes() -> None:
    lines = render_mermaid(build_graph(include_flow())).splitlines()
    start = lines.index('    subgraph g1["include r: inner  (exits r.check)"]')
    assert lines[start:start + 6] == [
        '    subgraph g1["include r: inner  (exits r.check)"]',
        '        n2["r/check<br/>compute"]',
        '        subgraph g2["include r/d: deep  (exits d.x)"]',
        '            n1["r/d/x<br/>compute"]',
        "        end",
        "    end",
    ]
    assert '    n2 -->|"true · r.check"| n3' in lines and '    n1 -->|"d.x"| n2' in lines


def test_dot_is_the_same_picture() -> None:
    dot = render_dot(build_graph(small()))
    assert dot.splitlines() == [
        'digraph "small" {',
        "    rankdir=TB;",
        '    node [fontname="Helvetica", fontsize=11];',
        '    edge [fontname="Helvetica", fontsize=10];',
        '    start [shape=circle, label="start", fontsize=9];',
        '    n1 [shape=parallelogram, label="build\\nshell: make \'say \\"hi\\" #1 <b>\'"];',
        '    n2 [shape=box, label="end\\ncompute"];',
        '    n3 [shape=box3d, label="fan\\nmap_workflow: child per item"];',
        '    stop [shape=doublecircle, label="end", fontsize=9];',
        "    start -> n1;",
        '    n1 -> n3 [label="ok"];',
        '    n1 -> n2 [label="failed"];',
        "    n2 -> stop;",
        "    n3 -> stop;",
        '    c1 [shape=component, style=dashed, label="workflow child"];',
        '    n3 -> c1 [style=dashed, label="per item"];',
        "}",
    ]
    nested = render_dot(build_graph(include_flow()))
    assert "    subgraph cluster_g1 {\n        label=\"include r: inner  (exits r.check)\";\n" \
           "        n2 [shape=box, label=\"r/check\\ncompute\"];\n        subgraph cluster_g2 {" in nested


# --- a run on it --------------------------------------------------------------------------------------------


def release() -> Any:
    return define_workflow(name="release", start_at="test", nodes={
        "test": shell(command=["pytest"]),
        "approve": human_decision(audience="ops", choices={"ship": choice(label="Ship"), "stop": choice(label="Stop")},
                                  request={"title": "Ship?"}),
        "ship": compute(run=lambda ctx: 1),
        "stop": compute(run=lambda ctx: 1),
    }, edges=[edge("test", "approve"), switch("approve", on="$.choice", cases={"ship": "ship", "stop": "stop"})])


def parked_view(**changes: Any) -> dict[str, Any]:
    view = {"run_id": "run_1", "workflow": "release", "status": "parked", "park_reason": "waiting",
            "current_node": "approve",
            "nodes": [{"node_id": "test", "status": "succeeded", "attempts": 2, "error": None,
                       "output": {"stdout": "ok", "stderr": "", "exit_code": 0, "duration_ms": 3}},
                      {"node_id": "approve", "status": "waiting", "attempts": 1, "output": None, "error": None}],
            "waiting": [{"request_id": "req_1", "node_id": "approve", "kind": "decision", "status": "pending",
                         "deadline_at": NOW + 125, "clock": "running", "remaining_s": 130.0}],
            "waits": []}
    view.update(changes)
    return view


def test_a_parked_run_shows_where_it_is_and_what_each_node_did() -> None:
    graph = build_graph(release())
    run = overlay(parked_view(), NOW)
    assert render_text(graph, run) == (
        "run run_1  release  parked (waiting)\n"
        "├── test  shell: pytest   ✓ succeeded ×2  exit 0\n"
        "│   └── → approve\n"
        "├── approve  human_decision: ops · ship | stop   ⏳ waiting   ◀ here\n"
        "│   ├── ⏳ waiting for an answer (decision, deadline in 2m05s)\n"
        "│   ├── $.choice = ship → ship\n"
        "│   └── $.choice = stop → stop\n"
        "├── ship  compute   · not reached\n"
        "│   └── → end\n"
        "└── stop  compute   · not reached\n"
        "    └── → end\n")
    mermaid = render_mermaid(graph, run)
    assert mermaid.endswith(
        "    classDef succeeded fill:#dcfce7,stroke:#16a34a\n"
        "    classDef waiting fill:#fef9c3,stroke:#ca8a04\n"
        "    class n1 succeeded\n"
        "    class n2 waiting\n"
        "    style n2 stroke-width:4px\n")
    assert '    n1[/"test<br/>shell: pytest<br/>✓ succeeded ×2  exit 0"/]\n' in mermaid
    dot = render_dot(graph, run)
    assert ('    n2 [shape=hexagon, label="approve\\nhuman_decision: ops · ship | stop\\n⏳ waiting", '
            'fillcolor="#fef9c3", color="#ca8a04", style="filled", penwidth=3];') in dot


def test_a_finished_run_ends_on_its_node_with_the_choice_and_who_chose() -> None:
    nodes = [{"node_id": "test", "status": "succeeded", "attempts": 1, "output": {"x": 1}, "error": None},
             {"node_id": "approve", "status": "succeeded", "attempts": 1, "error": None,
              "output": {"choice": "stop", "input": {"why": "too late\nnow"}},
              "answer": {"by": {"kind": "timeout", "deadline_at": NOW}, "at": NOW}},
             {"node_id": "stop", "status": "failed", "attempts": 1, "output": None,
              "error": {"code": "node_failed", "message": "ValueError: " + "x" * 80}}]
    run = overlay({"run_id": "run_2", "status": "failed", "current_node": "stop", "nodes": nodes,
                   "waiting": [], "waits": []}, NOW)
    lines = render_text(build_graph(release()), run).splitlines()
    assert lines[0] == "run run_2  release  failed"
    assert lines[1] == '├── test  shell: pytest   ✓ succeeded  {"x":1}'
    assert lines[3] == ('├── approve  human_decision: ops · ship | stop   ✓ succeeded  choice stop "too late now" '
                        "by timeout")
    assert lines[8] == "└── stop  compute   ✗ failed  node_failed: ValueError: xxxxxxxxxxxxxxxxxxxxxx…   ◀ ended here"


def test_waits_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert wait_words({"kind": "sleep", "wake_at": NOW + 90}, NOW) == \
            f"sleeping until {time.strftime('%H:%M:%S', time.gmtime(NOW + 90))} (in 1m30s)"
        assert wait_words({"kind": "sleep", "wake_at": NOW + 3 * 86400}, NOW).startswith("sleeping until 2027-01-")
        assert wait_words({"kind": "sleep", "wake_at": NOW - 1}, NOW).endswith("(due)")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert wait_words({"kind": "message", "topic": "go", "clock": "running", "deadline_at": NOW + 30}, NOW) == \
        "waiting for a message on 'go' (timeout in 30s)"
    assert wait_words({"kind": "message", "topic": "go", "clock": "paused", "remaining_s": 61}, NOW) == \
        "waiting for a message on 'go' (clock paused, 1m01s left)"
    assert wait_words({"kind": "message", "topic": "go", "clock": "none"}, NOW) == \
        "waiting for a message on 'go' (no timeout)"
    assert wait_words({"kind": "event", "topic": "payment", "clock": "running", "deadline_at": NOW + 30}, NOW) == \
        "waiting for event 'payment' (timeout in 30s)"
    assert wait_words({"kind": "children", "children_total": 10, "children_open": 3}, NOW) == \
        "waiting for children: 3 of 10 open"
    paused = overlay(parked_view(waiting=[{"node_id": "approve", "kind": "decision", "clock": "paused",
                                            "remaining_s": 7200.0}]), NOW)
    assert paused.nodes["approve"].waits == ("waiting for an answer (decision, clock paused, 2h00m left)",)


def test_a_fan_out_counts_its_children_by_status() -> None:
    flow = define_workflow(name="fan", start_at="m", nodes={
        "m": map_workflow(leaf("child"), items=lambda ctx: [])}, edges=[])
    children = [{"run_id": f"run_c{i}", "workflow": "child", "status": status, "parent_node_id": "m",
                 "child_index": i} for i, status in enumerate(["done", "parked", "done", "queued", "failed"])]
    view = {"run_id": "run_3", "workflow": "fan", "status": "parked", "park_reason": "waiting", "current_node": None,
            "nodes": [{"node_id": "m", "status": "waiting", "attempts": 1, "output": None, "error": None}],
            "waiting": [], "waits": [{"node_id": "m", "kind": "children", "children_total": 8, "children_open": 3}],
            "children": {"total": 8, "by_status": {}, "runs": children}}
    run = overlay(view, NOW)
    assert run.current == "m"  # no current_node: the node the run waits at
    state = run.nodes["m"]
    assert state.children == (("queued", 1), ("parked", 1), ("done", 2), ("failed", 1))
    assert state.children_total == 8
    assert render_text(build_graph(flow), run).splitlines()[1:7] == [
        "└── m  map_workflow: child per item   ⏳ waiting   ◀ here",
        "    ├── ⏳ waiting for children: 3 of 8 open",
        "    ├── children: queued 1 · parked 1 · done 2 · failed 1  (5 of 8 listed)",
        "    ├── #1 run_c1  child  parked",
        "    ├── #3 run_c3  child  queued",
        "    ├── #4 run_c4  child  failed",
    ]


def test_a_view_alone_gives_the_nodes_the_run_reached_nested_by_include() -> None:
    view = {"run_id": "run_4", "workflow": "nightly", "status": "running", "current_node": "get/ok",
            "nodes": [{"node_id": "get/download", "status": "succeeded", "attempts": 1, "output": {"a": 1}},
                      {"node_id": "get/ok", "status": "running", "attempts": 1, "output": None}],
            "waiting": [], "waits": [{"node_id": "later", "kind": "sleep", "wake_at": NOW + 5}]}
    graph = graph_from_view(view)
    assert [node.node_id for node in graph.nodes] == ["get/download", "get/ok", "later"]
    assert graph.groups == (GraphGroup("get", None, ""),)
    root = tree(graph, overlay(view, NOW), routes=False)
    assert [item.text for item in root.items] == ["include get", "later   ⏳ waiting"]
    assert root.items[1].items[0].text.startswith("⏳ sleeping until ")
    include = root.items[0]
    assert include.current and [item.text for item in include.items] == [
        'get/download   ✓ succeeded  {"a":1}', "get/ok   ▶ running   ◀ here"]
    assert include.items[1].current and include.items[1].status == "running"
    empty = graph_from_view({"workflow": "x", "nodes": []})
    assert empty.nodes == () and render_text(empty) == "workflow x  start \n"
    assert render_mermaid(empty) == "flowchart TD\n" and "->" not in render_dot(empty)
    # Without the definition nothing is said about routes: no edge to the end.
    assert "stop" not in render_mermaid(graph) and "stop" not in render_dot(graph)


def test_a_running_node_without_an_attempt_row_yet_is_where_the_run_is() -> None:
    """A pure node's attempt is written when it ends: while it runs, only `current_node` names it."""
    view = {"run_id": "run_5", "workflow": "pipeline", "status": "running", "current_node": "count",
            "nodes": [{"node_id": "prepare", "status": "succeeded", "attempts": 1, "output": None}],
            "waiting": [], "waits": []}
    lines = render_text(graph_from_view(view), overlay(view, NOW)).splitlines()
    assert lines[1:] == ["├── prepare   ✓ succeeded", "└── count   ▶ running   ◀ here"]
    # An ended run has no current_node: it ended at its last node, or at the last that failed.
    ended = overlay(dict(view, status="done", current_node=None), NOW)
    assert set(ended.nodes) == {"prepare"} and ended.current == "prepare"
    nodes = [{"node_id": "a", "status": "failed", "attempts": 1}, {"node_id": "b", "status": "succeeded"}]
    assert overlay(dict(view, status="failed", current_node=None, nodes=nodes), NOW).current == "a"
    assert overlay(dict(view, status="cancelled", current_node=None, nodes=[]), NOW).current is None

