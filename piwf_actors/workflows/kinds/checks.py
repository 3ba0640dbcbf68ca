"""The checks every node kind shares: common options, callables, text, durations, shapes, ids.

Each raises a `WorkflowDefinitionError` whose message starts with the node id (`fail`). A kind's
own module combines them into its `check`; `validation.checked_node` runs that check and what holds
for every kind (idempotency, `output=`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.json_values import MAX_VALUE_DEPTH
from piwf_actors.workflows.model import NodeSpec, duration_problem, is_number
from piwf_actors.workflows.rate_limits import node_rate_problem
from piwf_actors.workflows.shapes import ShapeError, checked_shape

# `/` and `.` are reserved: `/` qualifies included nodes, `.` names include exits.
NODE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def fail(node_id: str, problem: str) -> WorkflowDefinitionError:
    """The error for `problem` at node `node_id` (returned, for `raise fail(...)`)."""
    return WorkflowDefinitionError(f"node {node_id!r}: {problem}")


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


def timeout(node_id: str, value: Any, optional: bool, name: str = "timeout_s") -> float | None:
    """A positive duration of at most 100 years (model.duration_problem); None stands for none when `optional`."""
    if value is None and optional:
        return None
    problem = duration_problem(value, positive=True)
    if problem is not None:
        raise fail(node_id, f"{name} must be {problem}")
    return float(value)


def shown(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut: a computed value may be anything, and an error stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def checked_seconds(node_id: str, value: Any, name: str = "timeout_s") -> float | None:
    """What a computed deadline (`checkpoint(timeout_s=fn)`, `on_timeout={"after_s": fn, …}`) returned,
    checked in the worker as a constant one is when the workflow is defined: a positive number of
    seconds, or None for no deadline. Anything else raises a WorkflowDefinitionError naming the node."""
    return timeout(node_id, value, True, name)


def common(node_id: str, spec: NodeSpec, computed_timeout: bool = False) -> dict[str, Any]:
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
    rate_problem = node_rate_problem(spec.rate)
    if rate_problem is not None:
        raise fail(node_id, rate_problem)
    computed = computed_timeout and callable(spec.timeout_s)
    return {
        "timeout_s": spec.timeout_s if computed else timeout(node_id, spec.timeout_s, True),
        "retry_backoff_s": float(spec.retry_backoff_s),
    }


def require_callable(node_id: str, name: str, value: Any) -> None:
    if not callable(value):
        raise fail(node_id, f"{name} must be callable, got {type(value).__name__}")


def optional_callable(node_id: str, name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise fail(node_id, f"{name} must be callable, got {type(value).__name__}")


def text_or_callable(node_id: str, name: str, value: Any) -> None:
    if not isinstance(value, str) and not callable(value):
        raise fail(node_id, f"{name} must be a string or a callable of ctx, got {type(value).__name__}")


def optional_audience(node_id: str, audience: Any) -> None:
    """A checkpoint's or a notification's `audience`: None, or the name of one (docs/channels.md)."""
    if audience is not None and (not isinstance(audience, str) or not audience.strip()):
        raise fail(node_id, "audience must be a non-empty string (or None)")


def shape(node_id: str, value: Any, root: str) -> Any:
    """`value` (a shape, or a Python type such as a dataclass) as a checked shape, or a definition error naming the node."""
    try:
        return checked_shape(value, root)
    except ShapeError as exc:
        raise fail(node_id, str(exc)) from None


def positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
