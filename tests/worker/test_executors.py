"""The worker's executor table (worker/executors/): one executor per registered node kind, checked
when the table is built, so a kind without one stops the import with a line naming it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from piwf_actors.errors import NodeKindError
from piwf_actors.worker.executors import EXECUTORS, executor_for
from piwf_actors.worker.executors.base import Ask, NodeCall, Run, Wait, executor_table
from piwf_actors.workflows import ComputeSpec, NodeContext, compute, notify, shell, sleep
from piwf_actors.workflows.kinds import KINDS, Drawing, KindRegistry, NodeKind
from piwf_actors.workflows.model import NodeSpec
from piwf_actors.workflows.validation import checked_node


@dataclass(frozen=True, kw_only=True, slots=True)
class PingSpec(NodeSpec):
    kind: ClassVar[str] = "ping"
    host: str


PING = NodeKind(spec=PingSpec, check=lambda node_id, spec: {}, describe=lambda spec: [spec.host],
                drawing=Drawing(('["', '"]'), "box"))


def _pong(node: NodeCall) -> dict[str, Any]:
    return {"outcome": "ok", "output": {"pong": node.spec.host}}


def _real_entries() -> list[tuple[type[NodeSpec], Any]]:
    return list(EXECUTORS.items())


def test_every_registered_kind_has_one_executor_of_a_known_shape() -> None:
    assert set(EXECUTORS) == set(KINDS.specs) and len(EXECUTORS) == len(KINDS)
    for kind in KINDS:
        assert isinstance(EXECUTORS[kind.spec], (Run, Ask, Wait)), kind.name
    shapes = {kind.name: type(EXECUTORS[kind.spec]).__name__ for kind in KINDS}
    assert shapes == {"compute": "Run", "action": "Run", "shell": "Run", "notify": "Run", "checkpoint": "Ask",
                      "agent": "Ask", "human_decision": "Ask", "sleep": "Wait", "wait_message": "Wait", "wait_event": "Wait",
                      "run_workflow": "Wait", "map_workflow": "Wait", "parallel": "Wait"}
    # What the engine pipelines: the pure nodes' results only.
    assert sorted(k.name for k in KINDS if getattr(EXECUTORS[k.spec], "pipelined", False)) == ["compute", "notify"]
    # What asks the host whether its wait exists first: the child runs, computed once.
    assert sorted(k.name for k in KINDS if getattr(EXECUTORS[k.spec], "probe", False)) == [
        "map_workflow", "parallel", "run_workflow"]


def test_a_spec_finds_its_executor_and_a_subclass_its_parents() -> None:
    class Timed(ComputeSpec):
        pass

    assert executor_for(compute(run=len)) is EXECUTORS[ComputeSpec]
    assert executor_for(Timed(run=len)) is EXECUTORS[ComputeSpec]
    assert executor_for(PingSpec(host="h")) is None


def test_a_kind_without_an_executor_is_named() -> None:
    kinds = KindRegistry([*KINDS, PING])
    with pytest.raises(NodeKindError, match=r"^node kind 'ping': no executor: add PingSpec to the worker's table "
                                            r"\(worker/executors/__init__.py\)$"):
        executor_table(_real_entries(), kinds)
    table = executor_table([*_real_entries(), (PingSpec, Run(_pong))], kinds)
    assert table[PingSpec] == Run(_pong)


def test_a_table_entry_must_be_a_registered_kind_once_with_an_executor() -> None:
    with pytest.raises(NodeKindError, match=r"^node kind 'ping': the executor table lists PingSpec, which is not a "
                                            r"registered kind \(workflows/kinds/__init__.py\)$"):
        executor_table([*_real_entries(), (PingSpec, Run(_pong))], KINDS)
    with pytest.raises(NodeKindError, match=r"^node kind 'compute': the executor table lists it twice$"):
        executor_table([*_real_entries(), (ComputeSpec, Run(_pong))], KINDS)
    with pytest.raises(NodeKindError, match=r"^node kind 'ping': its executor must be a Run, an Ask or a Wait, "
                                            r"got function$"):
        executor_table([*_real_entries(), (PingSpec, _pong)], KindRegistry([*KINDS, PING]))


def test_the_import_of_the_worker_stops_on_a_kind_without_an_executor() -> None:
    """The check runs when worker/executors/ is imported (as a worker does), before any run: a process
    that registers one more kind first cannot import the table, and says which kind, in one line."""
    code = textwrap.dedent("""
        import sys
        from dataclasses import dataclass
        from typing import ClassVar
        import piwf_actors.workflows.kinds as kinds
        from piwf_actors.workflows.kinds.base import Drawing, KindRegistry, NodeKind
        from piwf_actors.workflows.model import NodeSpec

        @dataclass(frozen=True, kw_only=True, slots=True)
        class PingSpec(NodeSpec):
            kind: ClassVar[str] = "ping"

        kinds.KINDS = KindRegistry([*kinds.KINDS, NodeKind(spec=PingSpec, check=lambda n, s: {},
                                    describe=lambda s: [], drawing=Drawing(('["', '"]'), "box"))])
        try:
            import piwf_actors.worker.executors
        except Exception as exc:
            print(type(exc).__name__, exc)
            sys.exit(3)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == ("NodeKindError node kind 'ping': no executor: add PingSpec to the worker's table "
                                   "(worker/executors/__init__.py)")


def test_a_run_executor_gets_the_attempt_and_returns_the_report_fields() -> None:
    ctx = NodeContext(input={"who": "x"}, outputs={}, run_id="run-1", node_id="n", attempt_id="a-1")
    notes: list[dict[str, Any]] = []
    released: list[bool] = []
    node = NodeCall("n", "a-1", checked_node("n", notify(message=lambda ctx: f"hi {ctx.input['who']}",
                                                             audience="ops")),
                    ctx, notes.append, lambda pid, created: None, lambda: released.append(True))
    run = executor_for(node.spec)
    assert isinstance(run, Run)
    assert run.call(node) == {"outcome": "ok", "output": {"message": "hi x"}, "notification": "hi x",
                              "notification_audience": "ops"}
    said = NodeCall("s", "a-2", checked_node("s", shell(["echo", "hi"])), ctx, notes.append,
                    lambda pid, created: None, lambda: released.append(True))
    report = executor_for(said.spec).call(said)  # type: ignore[union-attr]
    assert report["outcome"] == "ok" and report["output"]["stdout"] == "hi\n" and released == [True]
    assert any(note.get("node_id") == "s" for note in notes)  # its output, streamed to the supervisor


def test_a_wait_executor_computes_its_request_in_the_worker() -> None:
    ctx = NodeContext(input={}, outputs={}, run_id="run-1", node_id="z", attempt_id="a-1")
    wait = executor_for(sleep(until=lambda ctx: 1_900_000_000))
    assert isinstance(wait, Wait) and not wait.probe
    assert wait.request(None, sleep(until=lambda ctx: 1_900_000_000), ctx) == {  # type: ignore[arg-type]
        "kind": "sleep", "until": 1_900_000_000.0}
