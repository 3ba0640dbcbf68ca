"""Workflows as plain Python functions (docs/functions.md).

    from piwf_actors.durable import workflow, step, decide, sleep

    @step
    def build(service: str) -> str: ...

    @workflow(name="release")
    def release(service: str) -> dict:
        artifact = build(service)
        ...

A `@workflow` function is run by the host from the top on every launch; each durable call (a `@step`
function, `sleep`, `decide`, `run_child`…) is a node of the run whose committed result is returned
on replay, never computed again. See docs/functions.md for the replay rules.
"""

from piwf_actors.durable.commands import shell
from piwf_actors.durable.define import workflow
from piwf_actors.durable.replay import RunInfo, StepFailed, current_run
from piwf_actors.durable.steps import Step, step
from piwf_actors.durable.waits import (
    Answer,
    agent,
    checkpoint,
    decide,
    map_children,
    run_child,
    send_message,
    sleep,
    sleep_until,
    wait_event,
    wait_message,
)
from piwf_actors.workflows.events import batch, on_event
from piwf_actors.workflows.function_parts import function_parts
from piwf_actors.workflows.kinds.human_decision import choice, text_input
from piwf_actors.workflows.rate_limits import debounce, rate_limit, rate_limiter
from piwf_actors.workflows.schedules import define_schedule
from piwf_actors.workflows.waits import limit

__all__ = [
    "Answer", "RunInfo", "Step", "StepFailed", "agent", "checkpoint", "choice", "current_run", "decide",
    "define_schedule",
    "function_parts", "limit", "map_children", "run_child", "send_message", "shell", "sleep", "sleep_until", "step",
    "text_input", "wait_message", "workflow",
    "debounce", "rate_limit", "rate_limiter",
    "batch", "on_event", "wait_event",
]
