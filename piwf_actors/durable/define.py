"""`@workflow`: a plain function made a workflow the host runs durably.

The decorator returns a `Workflow` (workflows/model.py) whose `function` is the decorated function and
whose graph is empty, so discovery, `run.start`, schedules, limits, children and the test kit take it
as they take a graph workflow. Its parameters are the run's input (their shape is `input_shape`
unless `input=` gives one); its code, and the code of the same-module steps it calls, is its digest.

What can be read of it without running it (the steps and workflows its code names, what `piwf graph
WORKFLOW` lists) is workflows/function_parts.py.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.digest import workflow_digest
from piwf_actors.workflows.events import checked_triggers
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.rate_limits import checked_debounce, checked_rate
from piwf_actors.workflows.shapes import ShapeError, checked_shape
from piwf_actors.workflows.typed_values import parameters_shape
from piwf_actors.workflows.validation import check_workflow_name
from piwf_actors.workflows.waits import checked_limit

#: A function workflow's step limit when none is given: every step call, wait and the return count one.
DEFAULT_MAX_STEPS = 1000
_FROM_PARAMETERS: Any = object()


def workflow(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
             max_steps: int = DEFAULT_MAX_STEPS, concurrency: Any = None, input: Any = _FROM_PARAMETERS,
             rate: Any = None, debounce: Any = None, on_event: Any = None, batch: Any = None) -> Any:
    """Make `fn` a durable workflow (`@workflow` or `@workflow(name=…, …)`); returns its `Workflow`.

    `name` (default: the function's name), `description` (default: the docstring's first line),
    `max_steps`, `concurrency=limit(n, key=fn(input))` and `input=` (a shape or type overriding the
    one read from the parameters), `rate=rate_limit(…)`, `debounce=debounce(…)`, `on_event=` and `batch=`
    (workflows/rate_limits.py, workflows/events.py) as for `define_workflow`."""
    def make(function: Callable[..., Any]) -> Workflow:
        return _define(function, name=name, description=description, max_steps=max_steps,
                       concurrency=concurrency, input=input, rate=rate, debounce=debounce,
                       on_event=on_event, batch=batch)

    return make(fn) if fn is not None else make


def _define(fn: Callable[..., Any], *, name: str | None, description: str | None, max_steps: int,
            concurrency: Any, input: Any, rate: Any = None, debounce: Any = None, on_event: Any = None,
            batch: Any = None) -> Workflow:
    if not isinstance(fn, types.FunctionType):
        raise WorkflowDefinitionError(f"@workflow needs a function, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
        raise WorkflowDefinitionError(f"@workflow {fn.__name__}: a plain function, not async or a generator")
    name = fn.__name__ if name is None else name
    check_workflow_name(name)
    if description is None:
        description = (inspect.getdoc(fn) or "").strip().split("\n", 1)[0]
    if not isinstance(description, str):
        raise WorkflowDefinitionError(f"workflow {name!r}: description must be a string")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0:
        raise WorkflowDefinitionError(f"workflow {name!r}: max_steps must be a positive integer, got {max_steps!r}")
    limit = checked_limit(name, concurrency)
    rate_limit_, debounce_ = checked_rate(name, rate), checked_debounce(name, debounce)
    trigger, batching = checked_triggers(name, on_event, batch)
    try:
        shape = parameters_shape(fn) if input is _FROM_PARAMETERS else input
        input_shape = checked_shape(shape, "input")
    except (ShapeError, TypeError, ValueError) as exc:
        raise WorkflowDefinitionError(f"workflow {name!r}: {exc}") from None
    empty: Any = MappingProxyType({})
    digest = workflow_digest(name=name, description=description, start_at="", max_steps=max_steps, nodes=empty,
                             routes=empty, mounts=empty, concurrency=limit, input_shape=input_shape, function=fn,
                             rate=rate_limit_, debounce=debounce_)
    filename = fn.__code__.co_filename
    return Workflow(name=name, start_at="", nodes=empty, routes=empty, max_steps=max_steps, digest=digest,
                    source_path=os.path.abspath(filename) if os.path.isfile(filename) else None,
                    description=description, concurrency=limit, input_shape=input_shape, function=fn,
                    rate=rate_limit_, debounce=debounce_, on_event=trigger, batch=batching)
