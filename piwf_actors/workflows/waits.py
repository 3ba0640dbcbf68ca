"""Flow control: the concurrency limit of a workflow, and the bounds of the waiting node kinds.

- `limit(n, key=fn(input))` for `define_workflow(concurrency=…)`: at most `n` active runs of the
  workflow per key; `concurrency_key` computes a run's key.
- The waiting node kinds (`sleep`, `wait_message`, `run_workflow`, `map_workflow`, `parallel`) are
  each a module of `workflows/kinds/`; `wait_topics` (kinds/wait_message.py) is re-exported here
  for the host, which stores a run's topics with it.

Every wait is a durable row (store/commands/waits.py); the run holds no worker while it waits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from piwf_actors.errors import BadLimitKey, WorkflowDefinitionError
from piwf_actors.workflows.kinds.checks import positive_int
from piwf_actors.workflows.kinds.wait_message import wait_topics
from piwf_actors.workflows.limit_keys import EXPECTED, KeyValueError, key_text
from piwf_actors.workflows.model import Callback, Workflow
from piwf_actors.workflows.user_code import KEY, phase

#: Children one node may start.
MAX_CHILDREN = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class ConcurrencyLimit:
    """At most `max` active runs (started, not finished) per value of `key(input)` (no key: per workflow)."""

    max: int
    key: Callback | None = None


def limit(max: int, key: Callback | None = None) -> ConcurrencyLimit:
    """For `define_workflow(concurrency=…)`: at most `max` active runs per `key(input)`."""
    return ConcurrencyLimit(max=max, key=key)


def checked_limit(name: str, value: Any) -> ConcurrencyLimit | None:
    if value is None:
        return None
    if not isinstance(value, ConcurrencyLimit):
        raise WorkflowDefinitionError(f"workflow {name!r}: concurrency must be built with limit(n, key=…)")
    if not positive_int(value.max):
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


__all__ = ["MAX_CHILDREN", "ConcurrencyLimit", "checked_limit", "concurrency_key", "limit", "runs_user_code",
           "wait_topics"]
