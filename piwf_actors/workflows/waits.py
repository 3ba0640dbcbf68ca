"""The waiting node kinds and the concurrency limit: their specs, helpers and checks.

- `sleep(seconds=… | until=fn(ctx))`: the run parks with a durable wake-up time and no worker;
  its output is `{"slept_until": epoch seconds}`.
- `wait_message(topic, timeout_s=None, on_timeout=None)`: the next message on `topic` in the
  run's mailbox (sent with `message.send`, `piwf send`, `ctx.send_message`); its output is the
  message's payload. After `timeout_s` the node outputs `on_timeout` when one is given, else it
  fails `message_timeout` (routed like any failure).
- `run_workflow(child, input=fn(ctx))`, `map_workflow(child, items=fn(ctx), input=fn(item, ctx),
  max_parallel=N, on_failure=…)` and `parallel({name: workflow}, input=fn(name, ctx))` start child
  runs (ordinary runs with `parent_run_id` set) and park until they end.
- `limit(n, key=fn(input))` for `define_workflow(concurrency=…)`: at most `n` active runs of the
  workflow per key.

Every wait is a durable row (store/commands/waits.py); the run holds no worker while it waits.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from piwf_actors.errors import BadLimitKey, WorkflowDefinitionError
from piwf_actors.workflows.limit_keys import EXPECTED, KeyValueError, key_text
from piwf_actors.workflows.model import Callback, NodeSpec, Workflow, duration_problem, freeze
from piwf_actors.workflows.user_code import KEY, phase

#: Children one node may start.
MAX_CHILDREN = 10_000
ON_FAILURE = ("fail_fast", "collect")


@dataclass(frozen=True, kw_only=True, slots=True)
class SleepSpec(NodeSpec):
    """Park until `seconds` after the node starts, or until the time `until(ctx)` returns."""

    kind: ClassVar[str] = "sleep"
    seconds: float | None = None
    until: Callback | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitMessageSpec(NodeSpec):
    """Wait for the next message on `topic` (a string or a callable of ctx)."""

    kind: ClassVar[str] = "wait_message"
    topic: Any
    on_timeout: Any = None  # the output after `timeout_s` (frozen JSON); None: fail `message_timeout`


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunsSpec(NodeSpec):
    """Start child runs and wait for them (the three helpers differ in how children are listed)."""

    kind: ClassVar[str] = ""
    on_failure: str = "fail_fast"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunWorkflowSpec(ChildRunsSpec):
    kind: ClassVar[str] = "run_workflow"
    child: Workflow
    input: Callback | None = None  # fn(ctx); None: the parent node's ctx.input


@dataclass(frozen=True, kw_only=True, slots=True)
class MapWorkflowSpec(ChildRunsSpec):
    kind: ClassVar[str] = "map_workflow"
    child: Workflow
    items: Callback  # fn(ctx) -> list
    input: Callback | None = None  # fn(item, ctx); None: the item itself
    max_parallel: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelSpec(ChildRunsSpec):
    kind: ClassVar[str] = "parallel"
    workflows: Mapping[str, Workflow]
    input: Callback | None = None  # fn(name, ctx); None: the parent node's ctx.input


@dataclass(frozen=True, kw_only=True, slots=True)
class ConcurrencyLimit:
    """At most `max` active runs (started, not finished) per value of `key(input)` (no key: per workflow)."""

    max: int
    key: Callback | None = None


WAIT_KINDS = (SleepSpec, WaitMessageSpec, ChildRunsSpec)


# --- helpers ----------------------------------------------------------------------------------


def sleep(seconds: float | None = None, until: Callback | None = None) -> SleepSpec:
    """A durable sleep: `seconds` from when the node starts, or until `until(ctx)` (epoch seconds
    or an aware datetime). A time that has passed already goes on at once."""
    return SleepSpec(seconds=seconds, until=until)


def wait_message(topic: Any, timeout_s: float | None = None, on_timeout: Any = None) -> WaitMessageSpec:
    """The next message on `topic`; after `timeout_s` the output is `on_timeout`, or the node fails
    `message_timeout` when there is none."""
    return WaitMessageSpec(topic=topic, timeout_s=timeout_s, on_timeout=on_timeout)


def run_workflow(child: Workflow, input: Callback | None = None, retries: int = 0) -> RunWorkflowSpec:
    """Run `child` as a child run and output its output; a failed or cancelled child fails the node."""
    return RunWorkflowSpec(child=child, input=input, retries=retries)


def map_workflow(child: Workflow, items: Callback, input: Callback | None = None, max_parallel: int | None = None,
                 on_failure: str = "fail_fast", retries: int = 0) -> MapWorkflowSpec:
    """One child run of `child` per item of `items(ctx)`, at most `max_parallel` at once; the output is
    their outputs in item order (`collect`: `{outputs, failed: [{index, run_id, error}]}`)."""
    return MapWorkflowSpec(child=child, items=items, input=input, max_parallel=max_parallel,
                           on_failure=on_failure, retries=retries)


def parallel(workflows: Mapping[str, Workflow], input: Callback | None = None, on_failure: str = "fail_fast",
             retries: int = 0) -> ParallelSpec:
    """One child run per named workflow, all at once; the output maps each name to its child's output."""
    return ParallelSpec(workflows=workflows, input=input, on_failure=on_failure, retries=retries)


def limit(max: int, key: Callback | None = None) -> ConcurrencyLimit:
    """For `define_workflow(concurrency=…)`: at most `max` active runs per `key(input)`."""
    return ConcurrencyLimit(max=max, key=key)


def wait_topics(workflow: Workflow) -> list[str] | None:
    """The topics a run of `workflow` can wait for a message on: the constant topics of its
    `wait_message` nodes (an included workflow's are among its nodes), sorted; None when one is
    computed by a function, so any topic could be. Reads the definition only (no callback is called):
    the host stores it with each run it makes, for `message.send` to tell a topic nobody waits on."""
    topics: set[str] = set()
    for spec in workflow.nodes.values():
        if isinstance(spec, WaitMessageSpec):
            if not isinstance(spec.topic, str):
                return None
            topics.add(spec.topic)
    return sorted(topics)


# --- checks -----------------------------------------------------------------------------------


def _fail(node_id: str, problem: str) -> WorkflowDefinitionError:
    return WorkflowDefinitionError(f"node {node_id!r}: {problem}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _workflow(node_id: str, value: Any, what: str) -> Workflow:
    if not isinstance(value, Workflow):
        raise _fail(node_id, f"{what} must be a Workflow (from define_workflow), got {type(value).__name__}")
    return value


def _optional_callable(node_id: str, name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise _fail(node_id, f"{name} must be callable, got {type(value).__name__}")


def checked_wait(node_id: str, spec: NodeSpec, is_json: Any) -> dict[str, Any]:
    """The normalized fields of a waiting node (for `dataclasses.replace`), or an error naming `node_id`."""
    if isinstance(spec, SleepSpec):
        if (spec.seconds is None) == (spec.until is None):
            raise _fail(node_id, "sleep needs exactly one of seconds= or until=")
        problem = None if spec.seconds is None else duration_problem(spec.seconds, positive=False)
        if problem is not None:
            raise _fail(node_id, f"sleep seconds must be {problem}")
        _optional_callable(node_id, "until", spec.until)
        return {"seconds": None if spec.seconds is None else float(spec.seconds)}
    if isinstance(spec, WaitMessageSpec):
        if not (isinstance(spec.topic, str) and spec.topic.strip()) and not callable(spec.topic):
            raise _fail(node_id, "topic must be a non-empty string or a callable of ctx")
        if spec.on_timeout is not None and not is_json(spec.on_timeout):
            raise _fail(node_id, "on_timeout must be JSON-shaped (string keys, finite numbers)")
        if spec.on_timeout is not None and spec.timeout_s is None:
            raise _fail(node_id, "on_timeout needs timeout_s")
        return {"on_timeout": freeze(spec.on_timeout)}
    assert isinstance(spec, RunWorkflowSpec | MapWorkflowSpec | ParallelSpec)  # the child-run kinds
    if spec.on_failure not in ON_FAILURE:
        raise _fail(node_id, f"on_failure must be one of {', '.join(ON_FAILURE)}, got {spec.on_failure!r}")
    if spec.timeout_s is not None:
        raise _fail(node_id, "child runs take no timeout_s (a child's own nodes have theirs)")
    _optional_callable(node_id, "input", spec.input)
    if isinstance(spec, RunWorkflowSpec):
        _workflow(node_id, spec.child, "child")
        return {}
    if isinstance(spec, MapWorkflowSpec):
        _workflow(node_id, spec.child, "child")
        if not callable(spec.items):
            raise _fail(node_id, f"items must be a callable of ctx returning a list, got {type(spec.items).__name__}")
        if spec.max_parallel is not None and not _positive_int(spec.max_parallel):
            raise _fail(node_id, f"max_parallel must be a positive integer, got {spec.max_parallel!r}")
        return {}
    assert isinstance(spec, ParallelSpec)
    if not isinstance(spec.workflows, Mapping) or not spec.workflows:
        raise _fail(node_id, "parallel needs a non-empty mapping of name to workflow")
    for name, workflow in spec.workflows.items():
        if not isinstance(name, str) or not name:
            raise _fail(node_id, f"parallel names must be non-empty strings, got {name!r}")
        _workflow(node_id, workflow, f"parallel workflow {name!r}")
    return {"workflows": freeze(dict(spec.workflows))}


def checked_limit(name: str, value: Any) -> ConcurrencyLimit | None:
    if value is None:
        return None
    if not isinstance(value, ConcurrencyLimit):
        raise WorkflowDefinitionError(f"workflow {name!r}: concurrency must be built with limit(n, key=…)")
    if not _positive_int(value.max):
        raise WorkflowDefinitionError(f"workflow {name!r}: limit needs a positive integer, got {value.max!r}")
    if value.key is not None and not callable(value.key):
        raise WorkflowDefinitionError(f"workflow {name!r}: limit key must be a callable of the run input")
    return replace(value)


# --- the limit's key --------------------------------------------------------------------------


def concurrency_key(workflow: Workflow, run_input: Any) -> tuple[str, int] | None:
    """The (key, max) a run of `workflow` with `run_input` counts against, or None: `deploy` for a
    limit without a key, `deploy[eu]` for a key function returning "eu", `deploy[{"cluster":"eu"}]`
    for one returning {"cluster": "eu"} (the canonical text: workflows/limit_keys.py).

    The key function gets a copy of the input, so whatever it changes is not what the run stores or
    sees. It runs inside a `KEY` phase (workflows/user_code.py: bounded when on a host's user-code
    thread). Its exception propagates (the start is refused); a value that is not JSON-like raises
    BadLimitKey naming the workflow."""
    limit_ = workflow.concurrency
    if limit_ is None:
        return None
    if limit_.key is None:
        return workflow.name, int(limit_.max)
    with phase(KEY, f"workflow {workflow.name!r}: its concurrency key"):
        value = limit_.key(copy.deepcopy(run_input))
        try:  # in the phase too: reading the value may run the workflow's code (a mapping's own items())
            text = key_text(value)
        except KeyValueError as exc:
            raise BadLimitKey(workflow.name, EXPECTED, str(exc)) from None
    return f"{workflow.name}[{text}]", int(limit_.max)


def runs_user_code(workflow: Workflow) -> bool:
    """Whether `concurrency_key` calls the workflow's own code (a key function)."""
    return workflow.concurrency is not None and workflow.concurrency.key is not None
