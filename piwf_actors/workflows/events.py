"""Event triggers of a workflow: `on_event(NAME, filter=fn, input=fn)` and `batch(max_items=N,
max_wait_s=T, key=fn)` for `define_workflow(on_event=…, batch=…)` and `@workflow(on_event=…, batch=…)`.

A workflow with `on_event` is a subscriber: the active host's event keeper (actors/event_keeper.py)
finds it in the host's workflow directories, as the schedule keeper finds schedules, and starts one
run per matching event (`filter(event)` true), with `input(event)` as its input (default: the event's
`data`). With `batch`, matching events are collected per `key(event)` and one run starts per
`max_items` events, or once `max_wait_s` passed since the batch's first event, with the input
`{"events": [event, ...], "key": key}`.

An event, as these functions see it: `{"event_id", "name", "key", "data", "emitted_at"}`. They are the
workflow file's code: the keeper calls them on a user-code thread, bounded in time (never on a door's
thread, never in the writer); one that raises records the event's delivery as `failed` with its line.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.limit_keys import key_text
from piwf_actors.workflows.user_code import KEY, phase

#: An event name: what `piwf emit NAME` gives (printable, no spaces at the ends).
MAX_EVENT_NAME_CHARS = 200
#: At most this many events per batch.
MAX_BATCH_ITEMS = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class OnEvent:
    """Start a run of the workflow for every event `name` for which `filter(event)` is true."""

    name: str
    filter: Callable[[Mapping[str, Any]], Any] | None = None
    input: Callable[[Mapping[str, Any]], Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """Collect the matching events per `key(event)`: a run per `max_items`, or after `max_wait_s`."""

    max_items: int
    max_wait_s: float
    key: Callable[[Mapping[str, Any]], Any] | None = None


def on_event(name: str, filter: Callable[[Mapping[str, Any]], Any] | None = None,
             input: Callable[[Mapping[str, Any]], Any] | None = None) -> OnEvent:
    """For `define_workflow(on_event=…)`: a run per event `name` that passes `filter(event)`, with
    `input(event)` as input (default: the event's data)."""
    return OnEvent(name=name, filter=filter, input=input)


def batch(max_items: int, max_wait_s: float, key: Callable[[Mapping[str, Any]], Any] | None = None) -> Batch:
    """For `define_workflow(on_event=…, batch=…)`: a run per `max_items` matching events of one
    `key(event)`, or for the events collected so far once `max_wait_s` passed since the first."""
    return Batch(max_items=max_items, max_wait_s=max_wait_s, key=key)


def check_event_name(name: Any, what: str = "an event name") -> str | None:
    """None for a valid event name, else the problem (one line)."""
    if not isinstance(name, str) or not name.strip() or name != name.strip() or len(name) > MAX_EVENT_NAME_CHARS:
        return f"{what} is a non-empty string of at most {MAX_EVENT_NAME_CHARS} characters, no spaces at the ends"
    if not name.isprintable():
        return f"{what} has no control characters"
    return None


def checked_triggers(workflow: str, trigger: Any, batching: Any) -> tuple[OnEvent | None, Batch | None]:
    """The checked (on_event, batch) of a definition; WorkflowDefinitionError naming the workflow."""
    if trigger is None:
        if batching is not None:
            raise WorkflowDefinitionError(f"workflow {workflow!r}: batch needs on_event (it batches events)")
        return None, None
    if not isinstance(trigger, OnEvent):
        raise WorkflowDefinitionError(f"workflow {workflow!r}: on_event must be built with on_event(NAME, ...)")
    problem = check_event_name(trigger.name, "on_event's name")
    if problem is not None:
        raise WorkflowDefinitionError(f"workflow {workflow!r}: {problem}")
    for label, fn in (("filter", trigger.filter), ("input", trigger.input)):
        if fn is not None and not callable(fn):
            raise WorkflowDefinitionError(f"workflow {workflow!r}: on_event {label} must be a function of the event")
    if batching is None:
        return trigger, None
    if not isinstance(batching, Batch):
        raise WorkflowDefinitionError(f"workflow {workflow!r}: batch must be built with batch(max_items=N, ...)")
    items = batching.max_items
    if isinstance(items, bool) or not isinstance(items, int) or not 1 <= items <= MAX_BATCH_ITEMS:
        raise WorkflowDefinitionError(f"workflow {workflow!r}: batch max_items must be an integer from 1 to "
                                      f"{MAX_BATCH_ITEMS}, got {items!r}")
    wait = batching.max_wait_s
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not math.isfinite(wait) or wait <= 0:
        raise WorkflowDefinitionError(f"workflow {workflow!r}: batch max_wait_s must be a positive number of "
                                      f"seconds, got {wait!r}")
    if batching.key is not None and not callable(batching.key):
        raise WorkflowDefinitionError(f"workflow {workflow!r}: batch key must be a function of the event")
    if trigger.input is not None:
        raise WorkflowDefinitionError(f"workflow {workflow!r}: a batch's input is its events; on_event(input=...) "
                                      "does not apply")
    return trigger, Batch(max_items=items, max_wait_s=float(wait), key=batching.key)


# --- what the keeper calls (on a user-code thread) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Routed:
    """What one event means for one subscriber: skipped (`filtered`), its run's `input`, its batch `key`
    (canonical text), or the `error` its functions raised (one line)."""

    filtered: bool = False
    input: Any = None
    key: str | None = None
    error: str | None = None


def route_event(workflow: str, trigger: OnEvent, batching: Batch | None, event: Mapping[str, Any]) -> Routed:
    """Call the subscriber's filter, then its input or batch key function, each on a copy of the event
    (what a function changes is not what another sees). Runs workflow code: call it on a user-code
    thread; an exception becomes `Routed(error=…)`, a time limit propagates (UserCodeTimeout)."""
    try:
        if trigger.filter is not None:
            with phase(KEY, f"workflow {workflow!r}: its on_event filter"):
                if not trigger.filter(copy.deepcopy(dict(event))):
                    return Routed(filtered=True)
        if batching is not None:
            if batching.key is None:
                return Routed(key="")
            with phase(KEY, f"workflow {workflow!r}: its batch key"):
                return Routed(key=key_text(batching.key(copy.deepcopy(dict(event)))))
        if trigger.input is None:
            return Routed(input=copy.deepcopy(event.get("data")))
        with phase(KEY, f"workflow {workflow!r}: its on_event input"):
            return Routed(input=trigger.input(copy.deepcopy(dict(event))))
    except Exception as exc:  # the workflow's own code: its line is the delivery's error
        return Routed(error=" ".join(f"{type(exc).__name__}: {exc}".split())[:500])


def batch_input(events: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """A batch run's input: its events in emit order and the batch's key ("" when there is no key function)."""
    return {"events": [dict(event) for event in events], "key": key}


__all__ = ["MAX_BATCH_ITEMS", "MAX_EVENT_NAME_CHARS", "Batch", "OnEvent", "Routed", "batch", "batch_input",
           "check_event_name", "checked_triggers", "on_event", "route_event"]
