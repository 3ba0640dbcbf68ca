"""Checks of single nodes, names and decision responses.

`checked_node(node_id, spec)` validates a helper-built spec and returns its
normalized copy (floats, frozen mappings, tuples); every error is a
`WorkflowDefinitionError` whose message starts with the node id. Graph-level
checks (edges, reachability, includes) live in `define.py`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.json_values import MAX_VALUE_DEPTH, json_value_problem
from piwf_actors.workflows.model import (
    ActionSpec,
    AgentSpec,
    CheckpointSpec,
    Choice,
    ComputeSpec,
    DecisionTimeout,
    HumanDecisionSpec,
    NodeSpec,
    NotifySpec,
    ShellSpec,
    TextInput,
    duration_problem,
    freeze,
    is_number,
    thaw,
)
from piwf_actors.workflows.shapes import ShapeError, checked_shape
from piwf_actors.workflows.waits import WAIT_KINDS, checked_wait

_Spec = TypeVar("_Spec", bound=NodeSpec)

WORKFLOW_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
# `/` and `.` are reserved: `/` qualifies included nodes, `.` names include exits.
NODE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def fail(node_id: str, problem: str) -> WorkflowDefinitionError:
    """The error for `problem` at node `node_id` (returned, for `raise fail(...)`)."""
    return WorkflowDefinitionError(f"node {node_id!r}: {problem}")


def check_workflow_name(name: Any) -> None:
    if not isinstance(name, str) or not WORKFLOW_NAME.fullmatch(name):
        raise WorkflowDefinitionError(
            f"workflow name {name!r} is invalid: it must match [a-z0-9][a-z0-9_-]*"
        )


def check_node_id(node_id: Any, what: str = "node id") -> None:
    if not isinstance(node_id, str) or not NODE_ID.fullmatch(node_id):
        raise WorkflowDefinitionError(
            f"{what} {node_id!r} is invalid: it must match [A-Za-z0-9_][A-Za-z0-9_-]* "
            "('/' and '.' are reserved for included workflows)"
        )


def is_json_value(value: Any, depth: int = 0) -> bool:
    """True for values that round-trip through JSON (str keys, finite numbers), nested at most
    MAX_VALUE_DEPTH lists and maps deep (a definition's constants become node outputs; `depth`:
    the containers around `value`)."""
    if value is None or isinstance(value, (str, bool)):
        return True
    if isinstance(value, (int, float)):
        return is_number(value)
    if depth >= MAX_VALUE_DEPTH:  # a container here nests one deeper than the limit
        return False
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and is_json_value(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_json_value(v, depth + 1) for v in value)
    return False


def _timeout(node_id: str, value: Any, optional: bool, name: str = "timeout_s") -> float | None:
    """A positive duration of at most 100 years (model.duration_problem); None stands for none when `optional`."""
    if value is None and optional:
        return None
    problem = duration_problem(value, positive=True)
    if problem is not None:
        raise fail(node_id, f"{name} must be {problem}")
    return float(value)


def _shown(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut: a computed value may be anything, and an error stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def checked_seconds(node_id: str, value: Any, name: str = "timeout_s") -> float | None:
    """What a computed deadline (`checkpoint(timeout_s=fn)`, `on_timeout={"after_s": fn, …}`) returned,
    checked in the worker as a constant one is when the workflow is defined: a positive number of
    seconds, or None for no deadline. Anything else raises a WorkflowDefinitionError naming the node."""
    return _timeout(node_id, value, True, name)


def _common(node_id: str, spec: NodeSpec, computed_timeout: bool = False) -> dict[str, Any]:
    """Checked common options as keyword arguments for `dataclasses.replace`. `timeout_s=None` is no
    timeout, for every kind (the README's promise; a kind with nothing to time out refuses any other);
    with `computed_timeout`, `timeout_s` may be a callable of ctx (checked with `checked_seconds` when
    it is called)."""
    if isinstance(spec.retries, bool) or not isinstance(spec.retries, int) or spec.retries < 0:
        raise fail(node_id, f"retries must be a non-negative integer, got {spec.retries!r}")
    backoff_problem = duration_problem(spec.retry_backoff_s, positive=False)
    if backoff_problem is not None:
        raise fail(node_id, f"retry_backoff_s must be {backoff_problem}")
    if not isinstance(spec.idempotent, bool):
        raise fail(node_id, f"idempotent must be true or false, got {spec.idempotent!r}")
    computed = computed_timeout and callable(spec.timeout_s)
    return {
        "timeout_s": spec.timeout_s if computed else _timeout(node_id, spec.timeout_s, True),
        "retry_backoff_s": float(spec.retry_backoff_s),
    }


def _callable(node_id: str, name: str, value: Any) -> None:
    if not callable(value):
        raise fail(node_id, f"{name} must be callable, got {type(value).__name__}")


def _text_or_callable(node_id: str, name: str, value: Any) -> None:
    if not isinstance(value, str) and not callable(value):
        raise fail(node_id, f"{name} must be a string or a callable of ctx, got {type(value).__name__}")


def _shell(node_id: str, spec: ShellSpec) -> dict[str, Any]:
    command = spec.command
    if isinstance(command, (list, tuple)):
        if not command or not all(isinstance(part, str) for part in command):
            raise fail(node_id, "command must be a non-empty list of strings")
        command = tuple(command)
    elif isinstance(command, str):
        if not command.strip():
            raise fail(node_id, "command must not be empty")
    elif not callable(command):
        raise fail(node_id, f"command must be a list, a string or a callable of ctx, got {type(command).__name__}")
    if not isinstance(spec.shell, bool) or not isinstance(spec.allow_nonzero_exit, bool):
        raise fail(node_id, "shell and allow_nonzero_exit must be true or false")
    if spec.cwd is not None and not isinstance(spec.cwd, str) and not callable(spec.cwd):
        raise fail(node_id, f"cwd must be a string or a callable of ctx, got {type(spec.cwd).__name__}")
    env = spec.env
    if isinstance(env, Mapping):
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or not (value is None or isinstance(value, str)):
                raise fail(node_id, f"env entry {key!r} must map a variable name to a string or None")
        env = freeze(env)
    elif env is not None and not callable(env):
        raise fail(node_id, f"env must be a mapping or a callable of ctx, got {type(env).__name__}")
    return {"command": command, "env": env}


def _agent(node_id: str, spec: AgentSpec) -> dict[str, Any]:
    _text_or_callable(node_id, "prompt", spec.prompt)
    schema = _shape(node_id, spec.expected_output, "expected_output")  # a shape, or a Python type (shapes.py)
    if spec.validate is not None:
        _callable(node_id, "validate", spec.validate)
    count = spec.max_submissions
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise fail(node_id, f"max_submissions must be a positive integer, got {count!r}")
    return {"expected_output": schema}


def _choice(node_id: str, key: Any, value: Any) -> Choice:
    check_node_id(key, f"node {node_id!r}: choice key")
    if not isinstance(value, Choice):
        raise fail(node_id, f"choice {key!r} must be built with choice(), got {type(value).__name__}")
    if not isinstance(value.label, str) or not value.label.strip():
        raise fail(node_id, f"choice {key!r} needs a non-empty label")
    field = value.input
    if field is None:
        return value
    if not isinstance(field, TextInput):
        raise fail(node_id, f"choice {key!r}: input must be built with text_input()")
    check_node_id(field.name, f"node {node_id!r}: choice {key!r} text input name")
    if not isinstance(field.prompt, str):
        raise fail(node_id, f"choice {key!r}: text input prompt must be a string")
    lengths = (field.min_length, field.max_length)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in lengths) or not (
        0 <= field.min_length <= field.max_length and field.max_length >= 1
    ):
        raise fail(node_id, f"choice {key!r}: text input needs 0 <= min_length <= max_length, max_length >= 1")
    return value


def check_decision_response(spec: HumanDecisionSpec, response: Any) -> str | None:
    """Why `response` is not an acceptable answer to `spec`, or None if it is.

    A response is `{"choice": key}` plus `"input": {name: text}` exactly when
    the choice has a text input; the text must respect its length bounds.
    """
    if not isinstance(response, Mapping) or set(response) - {"choice", "input"}:
        return "a response is an object with 'choice' and optionally 'input'"
    key = response.get("choice")
    chosen = spec.choices.get(key) if isinstance(key, str) else None
    if chosen is None:
        return f"unknown choice {key!r} (choices: {', '.join(spec.choices)})"
    given = response.get("input")
    field = chosen.input
    if field is None:
        return None if given is None else f"choice {key!r} takes no input"
    if not isinstance(given, Mapping) or set(given) != {field.name}:
        return f"choice {key!r} needs input {{{field.name!r}: text}}"
    text = given[field.name]
    if not isinstance(text, str) or not field.min_length <= len(text) <= field.max_length:
        return f"input {field.name!r} must be text of {field.min_length}..{field.max_length} characters"
    return None


def _human_decision(node_id: str, spec: HumanDecisionSpec) -> dict[str, Any]:
    if not isinstance(spec.audience, str) or not spec.audience.strip():
        raise fail(node_id, "audience must be a non-empty string")
    if not isinstance(spec.choices, Mapping) or not spec.choices:
        raise fail(node_id, "choices must be a non-empty mapping of key to choice()")
    choices = freeze({key: _choice(node_id, key, value) for key, value in spec.choices.items()})
    request = spec.request
    if isinstance(request, Mapping):
        if not is_json_value(request):
            raise fail(node_id, "request must be JSON-shaped (string keys, finite numbers)")
        request = freeze(request)
    elif not callable(request):
        raise fail(node_id, f"request must be a mapping or a callable of ctx, got {type(request).__name__}")
    timeout = spec.on_timeout
    if timeout is not None and not isinstance(timeout, DecisionTimeout) and not callable(timeout):
        # A callable is checked when the worker calls it (`checked_decision_timeout`); so is a callable after_s.
        timeout = _decision_timeout(node_id, dataclasses.replace(spec, choices=choices), timeout, computed=True)
    return {"choices": choices, "request": request, "on_timeout": timeout}


def _decision_timeout(node_id: str, spec: HumanDecisionSpec, value: Any, *, computed: bool) -> DecisionTimeout:
    """`{"after_s": seconds, "response": {...}}` checked against `spec`'s choices; `computed`: after_s
    may be a callable of ctx (as written in a workflow, not as returned by a callable on_timeout)."""
    if not isinstance(value, Mapping) or set(value) != {"after_s", "response"}:
        raise fail(node_id, "on_timeout must be {'after_s': seconds, 'response': {'choice': ...}} "
                            f"(or a callable of ctx returning one, or None), got {_shown(value)}")
    after_s = value["after_s"]
    if not (computed and callable(after_s)):
        after_s = float(_timeout(node_id, after_s, False, "on_timeout.after_s") or 0.0)
    problem = check_decision_response(spec, value["response"])
    if problem:
        raise fail(node_id, f"on_timeout.response: {problem}")
    given = value["response"].get("input")
    return DecisionTimeout(after_s=after_s, choice=value["response"]["choice"],
                           input=freeze(given) if given is not None else None)


def decision_timeout_for(node_id: str, spec: HumanDecisionSpec, ctx: Any) -> DecisionTimeout | None:
    """The default a decision's request takes by itself, with its time in seconds: `on_timeout` as
    defined, or computed from `ctx` — a callable `on_timeout` returning None (no deadline) or
    `{"after_s": seconds, "response": …}`, or a callable `after_s` returning seconds or None — and
    checked as a constant one is when the workflow is defined. Called in the worker (it runs user
    code); anything that does not fit raises a WorkflowDefinitionError naming the node."""
    timeout = spec.on_timeout
    if callable(timeout):
        value = thaw(timeout(ctx))
        return None if value is None else _decision_timeout(node_id, spec, value, computed=False)
    if timeout is not None and callable(timeout.after_s):
        after_s = checked_seconds(node_id, timeout.after_s(ctx), "on_timeout.after_s")
        return None if after_s is None else dataclasses.replace(timeout, after_s=after_s)
    return timeout  # type: ignore[no-any-return]


def _output_shape(node_id: str, spec: NodeSpec) -> Any:
    """The node's checked `output=` shape: only compute and action nodes return what their author
    writes (a shell's output, an answer, a child's output have shapes of their own)."""
    if spec.output_shape is None:
        return None
    if not isinstance(spec, (ComputeSpec, ActionSpec)):
        raise fail(node_id, f"output= applies to compute and action nodes, not {spec.kind}")
    return _shape(node_id, spec.output_shape, "output")


def _shape(node_id: str, value: Any, root: str) -> Any:
    """`value` (a shape, or a Python type such as a dataclass) as a checked shape, or a definition error naming the node."""
    try:
        return checked_shape(value, root)
    except ShapeError as exc:
        raise fail(node_id, str(exc)) from None


def checked_node(node_id: str, spec: _Spec) -> _Spec:
    """`spec` validated and normalized, or a WorkflowDefinitionError naming `node_id`."""
    if not isinstance(spec, NodeSpec) or type(spec) is NodeSpec:
        raise fail(node_id, f"expected a node helper (compute, shell, …), got {type(spec).__name__}")
    if isinstance(spec, (ComputeSpec, ActionSpec)):
        _callable(node_id, "run", spec.run)
        changes = _common(node_id, spec)
    elif isinstance(spec, ShellSpec):
        changes = _common(node_id, spec) | _shell(node_id, spec)
    elif isinstance(spec, CheckpointSpec):
        _text_or_callable(node_id, "prompt", spec.prompt)
        if spec.audience is not None and (not isinstance(spec.audience, str) or not spec.audience.strip()):
            raise fail(node_id, "audience must be a non-empty string (or None)")
        changes = _common(node_id, spec, computed_timeout=True)
    elif isinstance(spec, NotifySpec):
        _text_or_callable(node_id, "message", spec.message)
        if spec.audience is not None and (not isinstance(spec.audience, str) or not spec.audience.strip()):
            raise fail(node_id, "audience must be a non-empty string (or None)")
        changes = _common(node_id, spec)
    elif isinstance(spec, AgentSpec):
        changes = _common(node_id, spec) | _agent(node_id, spec)
    elif isinstance(spec, HumanDecisionSpec):
        changes = _common(node_id, spec) | _human_decision(node_id, spec)
    elif isinstance(spec, WAIT_KINDS):
        changes = _common(node_id, spec) | checked_wait(node_id, spec, is_json_value)
    else:
        raise fail(node_id, f"unsupported node kind {spec.kind!r}")
    if not spec.has_side_effect:
        # Only action and shell nodes may declare themselves non-idempotent.
        changes["idempotent"] = True
    changes["output_shape"] = _output_shape(node_id, spec)
    normalized: _Spec = dataclasses.replace(spec, **changes)
    return normalized


def json_problem(value: Any) -> str | None:
    """Why `value` cannot be a node output or a run input (json_values.json_value_problem: not JSON, or
    nested deeper than a view can show), or None."""
    problem = json_value_problem(value, "$")
    return None if problem is None else f"output is not a value a run can hold: {problem}"
