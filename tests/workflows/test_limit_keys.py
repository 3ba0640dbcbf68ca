"""Concurrency keys mean what they say: a canonical encoding of JSON-like values, never cut into a
collision, anything else refused with one line naming the workflow; the key function gets a copy of
the input, so what is stored is exactly what was sent.

The keys are computed where the host computes them, by `start_run_command` with a real resolver over a
workflow file written per test, and in the worker's child-run path (`runner.executors`)."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from piwf_actors.errors import Rejected, UserCodeTimeout
from piwf_actors.protocol.catalog.runs import start_run_command
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.user_code import UserCode, UserCodeLimits

KEYED = '''
import collections, collections.abc, decimal, enum, os
from piwf_actors.workflows import compute, define_workflow, limit


class Thing:
    pass


class EndlessMap(collections.abc.Mapping):
    """A key value whose items do not end while the test runs: reading it is the workflow's code too.

    The host abandons the reading thread, which would go on taking the GIL from every later test of
    the process; so its items end once the test creates `endless.release` beside this file."""

    def __getitem__(self, key):
        return 1

    def __len__(self):
        return 1

    def __iter__(self):
        release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "endless.release")
        while not os.path.exists(release):
            for _ in range(1000):
                yield "k"


class Tier(str, enum.Enum):
    GOLD = "gold"


def _key(run_input):
    kind = run_input["kind"]
    if kind == "value":
        return run_input["value"]
    if kind == "object":
        return Thing()
    if kind == "generator":
        return (part for part in run_input["value"])
    if kind == "set":
        return {"a", "b"}
    if kind == "bytes":
        return b"eu"
    if kind == "int_keys":
        return {1: "a"}
    if kind == "nan":
        return float("nan")
    if kind == "decimal":
        return decimal.Decimal("1.5")
    if kind == "tuple":
        return ("eu", 1)
    if kind == "enum":
        return Tier.GOLD
    if kind == "ordered":
        return collections.OrderedDict([("b", 1), ("a", 2)])
    if kind == "deep":
        value = "bottom"
        for _ in range(40):
            value = [value]
        return value
    if kind == "endless_map":
        return EndlessMap()
    if kind == "mutates":
        run_input.setdefault("added", {"by": "key"})
        run_input.pop("drop")
        run_input["nested"]["list"].append(99)
        return run_input["cluster"]
    raise AssertionError(kind)


keyed = define_workflow(name="keyed", start_at="a", concurrency=limit(1, key=_key),
                        nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[])
'''


@pytest.fixture(scope="module")
def resolver() -> WorkflowResolver:
    return WorkflowResolver()


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("keys") / "keyed.py"
    path.write_text(textwrap.dedent(KEYED))
    return f"{path}:keyed"


def key_of(resolver: WorkflowResolver, spec: str, run_input: dict[str, Any]) -> str:
    command = start_run_command(resolver, workflow=spec, input=run_input)
    assert command.args["spec"]["concurrency_max"] == 1
    return command.args["spec"]["concurrency_key"]


def value_key(resolver: WorkflowResolver, spec: str, value: Any) -> str:
    return key_of(resolver, spec, {"kind": "value", "value": value})


@pytest.mark.parametrize(("kind", "what"), [
    ("object", "a Thing"), ("generator", "a generator"), ("set", "a set"), ("bytes", "a bytes"),
    ("int_keys", "a map key 1 (int)"), ("nan", "nan"), ("decimal", "a Decimal"),
    ("deep", "nesting deeper than 32"),
])
def test_a_key_that_is_not_json_like_is_refused_with_one_line_naming_the_workflow(
        resolver: WorkflowResolver, spec: str, kind: str, what: str) -> None:
    with pytest.raises(Rejected) as caught:
        start_run_command(resolver, workflow=spec, input={"kind": kind, "value": "ab"})
    line = caught.value.one_line()
    assert line.startswith("workflow 'keyed': its concurrency key must be JSON-like (a string, number, boolean, "
                           "None, or a list or map with string keys of them), got "), line
    assert what in line and "\n" not in line and len(line) <= 1000, line


def test_reading_the_value_a_key_function_returned_is_bounded_by_the_key_limit(spec: str) -> None:
    """The value is the workflow's own object: turning it into the key's text may run its code (a mapping's
    items), so that is timed as the key function is."""
    resolver = WorkflowResolver(user_code=UserCode(UserCodeLimits(key_timeout_s=0.5)))
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            start_run_command(resolver, workflow=spec, input={"kind": "endless_map"})
        except BaseException as exc:  # noqa: BLE001 - recorded, asserted below
            outcome.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    try:
        thread.join(15)
    finally:
        (Path(spec.partition(":")[0]).parent / "endless.release").touch()  # the abandoned reading ends
    assert outcome, "reading the key's value was not bounded"
    assert isinstance(outcome[0], UserCodeTimeout), outcome
    assert outcome[0].one_line() == "workflow 'keyed': its concurrency key did not return within 0.5 s (key_timeout_s)"


def test_a_refused_key_is_recorded_as_the_outcome_of_a_recorded_start(resolver: WorkflowResolver, spec: str) -> None:
    command = start_run_command(resolver, workflow=spec, input={"kind": "generator", "value": "ab"},
                                client_id="c", idempotency_key="k")
    assert "spec" not in command.args
    assert command.args["refusal"]["code"] == "rejected"
    assert "got a generator" in command.args["refusal"]["message"]


def test_maps_whose_flattened_text_matched_are_different_keys(resolver: WorkflowResolver, spec: str) -> None:
    assert value_key(resolver, spec, {"a": "1,b=2"}) != value_key(resolver, spec, {"a": "1", "b": "2"})
    assert value_key(resolver, spec, ["a,b"]) != value_key(resolver, spec, ["a", "b"])
    assert value_key(resolver, spec, {"a": "1,b=2"}) == 'keyed[{"a":"1,b=2"}]'


@pytest.mark.parametrize(("first", "second"), [
    ("1", 1), ("true", True), ("null", None), (1, True), (0, False), ("", None), ("[1]", [1]), ("a", ["a"]),
    ('{"a":1}', {"a": 1}), ("1.5", 1.5),
])
def test_values_of_different_types_are_different_keys(resolver: WorkflowResolver, spec: str, first: Any,
                                                      second: Any) -> None:
    assert value_key(resolver, spec, first) != value_key(resolver, spec, second)


def test_equal_values_are_equal_keys(resolver: WorkflowResolver, spec: str) -> None:
    assert value_key(resolver, spec, {"b": 1, "a": [2, 3]}) == value_key(resolver, spec, {"a": [2, 3], "b": 1})
    assert key_of(resolver, spec, {"kind": "tuple"}) == value_key(resolver, spec, ["eu", 1])
    assert key_of(resolver, spec, {"kind": "ordered"}) == value_key(resolver, spec, {"a": 2, "b": 1})
    assert key_of(resolver, spec, {"kind": "enum"}) == value_key(resolver, spec, "gold")
    assert value_key(resolver, spec, 2.0) == value_key(resolver, spec, 2)  # one number, one key


def test_plain_keys_read_as_they_did(resolver: WorkflowResolver, spec: str) -> None:
    """A string that reads as no JSON value, a number, a boolean and None keep the text they had
    before keys were canonical (README, "Keys": runs queued across an upgrade)."""
    assert value_key(resolver, spec, "eu") == "keyed[eu]"
    assert value_key(resolver, spec, "eu west") == "keyed[eu west]"
    assert value_key(resolver, spec, 7) == "keyed[7]"
    assert value_key(resolver, spec, 1.5) == "keyed[1.5]"
    assert value_key(resolver, spec, True) == "keyed[true]"
    assert value_key(resolver, spec, None) == "keyed[null]"
    assert value_key(resolver, spec, "1") == 'keyed["1"]'  # would read as the number


def test_long_keys_are_hashed_never_cut_into_a_collision(resolver: WorkflowResolver, spec: str) -> None:
    first = value_key(resolver, spec, "x" * 250 + "a")
    second = value_key(resolver, spec, "x" * 250 + "b")
    assert first != second
    for key in (first, second):
        assert key.startswith("keyed[" + "x" * 100) and key.endswith("]")
        assert len(key) <= 240
    assert value_key(resolver, spec, "x" * 250 + "a") == first  # stable
    short = value_key(resolver, spec, "y" * 200)
    assert short == "keyed[" + "y" * 200 + "]"  # up to 200 characters, kept whole
    assert value_key(resolver, spec, {"k": "z" * 300}) != value_key(resolver, spec, {"k": "z" * 301})


def test_the_key_function_gets_a_copy_and_the_stored_input_is_what_was_sent(resolver: WorkflowResolver,
                                                                            spec: str) -> None:
    sent = {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}
    command = start_run_command(resolver, workflow=spec, input=sent)
    assert command.args["spec"]["concurrency_key"] == "keyed[eu]"
    assert command.args["spec"]["input"] == {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}
    assert sent == {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}


def test_a_child_runs_key_function_gets_a_copy_too(tmp_path: Path) -> None:
    from piwf_actors.worker.executors import wait_payload
    from piwf_actors.workflows import load_snapshot
    from piwf_actors.workflows.context import NodeContext

    path = tmp_path / "parent.py"
    path.write_text(textwrap.dedent(KEYED) + textwrap.dedent('''
        from piwf_actors.workflows import run_workflow
        parent = define_workflow(name="parent", start_at="spawn", nodes={"spawn": run_workflow(keyed)}, edges=[])
    '''))
    source = path.read_bytes()
    digest = WorkflowResolver().resolve(f"{path}:parent", None).workflow.digest
    parent = load_snapshot(source, str(path), "parent", digest, None)
    sent = {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}
    ctx = NodeContext(input=sent, outputs={}, run_id="run_1", node_id="spawn", attempt_id="att_1")
    payload = wait_payload(parent, parent.nodes["spawn"], ctx)
    child = payload["children"][0]
    assert child["concurrency_key"] == "keyed[eu]"
    assert child["input"] == {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}
    assert ctx.input == {"kind": "mutates", "cluster": "eu", "drop": 1, "nested": {"list": [1]}}
