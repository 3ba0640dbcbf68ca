"""`define_schedule`: start a workflow by the clock.

A workflow file exposes schedules as module attributes, like workflows::

    nightly = define_schedule(
        name="nightly-report", workflow=report, cron="0 3 * * *", timezone="Europe/Berlin",
        input=lambda fire_time: {"day": fire_time.date().isoformat()},
    )

The host loads them from `$XDG_CONFIG_HOME/piwf/workflows/*.py` and from
each `piwf-host --project DIR`'s `.piwf/workflows/*.py`
(`schedule_discovery.py`), and its schedule keeper starts one run per fire
(`actors/schedules.py`). Every argument is checked here, when the file is
loaded; a problem is a `WorkflowDefinitionError` whose one-line message
names the schedule.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.digest import fingerprint
from piwf_actors.workflows.model import Workflow, freeze, thaw
from piwf_actors.workflows.schedule_time import CATCH_UP_MODES, Timing, TimingError, zone
from piwf_actors.workflows.shapes import input_refusal
from piwf_actors.workflows.validation import WORKFLOW_NAME, json_problem

InputFn = Callable[[_dt.datetime], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule. Build it with `define_schedule`.

    `workflow` is the Workflow object or the spec (a discovered name,
    `module:attr`, `path.py[:attr]`) it starts; `input` a frozen mapping or
    a function of the fire time (an aware datetime in `timing.timezone`).
    `digest` covers everything that decides what a fire does (a function
    by its code), so an edited definition is noticed on reload.
    """

    name: str
    workflow: Workflow | str
    timing: Timing
    input: Any
    catch_up: str
    max_catch_up: int
    description: str
    digest: str

    @property
    def workflow_name(self) -> str:
        return self.workflow.name if isinstance(self.workflow, Workflow) else self.workflow

    def input_for(self, fire_time: float) -> Any:
        """The run input of the fire at `fire_time` (calls the input function, which may raise)."""
        if callable(self.input):
            return self.input(_dt.datetime.fromtimestamp(fire_time, zone(self.timing.timezone)))
        return thaw(self.input)


def _fail(name: Any, problem: str) -> WorkflowDefinitionError:
    return WorkflowDefinitionError(f"schedule {name!r}: {problem}")


def define_schedule(
    name: str,
    workflow: Workflow | str,
    *,
    cron: str | None = None,
    every_s: float | None = None,
    input: Mapping[str, Any] | InputFn | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    max_catch_up: int = 10,
    description: str = "",
) -> Schedule:
    """A validated `Schedule` that starts `workflow` on `cron` (in `timezone`) or every `every_s` seconds.

    `input`: a JSON object given to every run, or a function `fn(fire_time)
    -> dict` called at each fire with the fire time as an aware datetime in
    `timezone`. `catch_up` says what happens to fires missed while no host
    ran: `latest` starts only the most recent, `skip` none, `all` each of
    them, the most recent `max_catch_up` at most.
    """
    if not isinstance(name, str) or not WORKFLOW_NAME.fullmatch(name):
        raise _fail(name, "the name must match [a-z0-9][a-z0-9_-]*")
    if isinstance(workflow, str):
        if not workflow:
            raise _fail(name, "workflow must be a Workflow or a workflow name")
    elif not isinstance(workflow, Workflow):
        raise _fail(name, f"workflow must be a Workflow or a workflow name, got {type(workflow).__name__}")
    if (cron is None) == (every_s is None):
        raise _fail(name, "give exactly one of cron= and every_s=")
    if isinstance(every_s, int) and not isinstance(every_s, bool):
        every_s = float(every_s)
    try:
        timing = Timing(cron=cron, every_s=every_s, timezone=timezone)
    except TimingError as exc:
        raise _fail(name, str(exc)) from None
    if catch_up not in CATCH_UP_MODES:
        raise _fail(name, f"catch_up must be one of {', '.join(CATCH_UP_MODES)}, got {catch_up!r}")
    if isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int) or not 1 <= max_catch_up <= 100:
        raise _fail(name, f"max_catch_up must be an integer from 1 to 100, got {max_catch_up!r}")
    if not isinstance(description, str):
        raise _fail(name, "description must be a string")
    if input is None:
        frozen: Any = freeze({})
    elif callable(input):
        frozen = input
    elif isinstance(input, Mapping):
        problem = json_problem(dict(input))
        if problem is not None:
            raise _fail(name, f"input: {problem.replace('output is', 'it is')}")
        frozen = freeze(dict(input))
    else:
        raise _fail(name, f"input must be a JSON object or a function of the fire time, got {type(input).__name__}")
    if isinstance(workflow, Workflow) and not callable(frozen):
        # A fixed input is known now; one from a function (or for a workflow named by a string) is
        # checked at each fire, when its run is started (and a fire it refuses starts no run).
        refusal = input_refusal(workflow.input_shape, thaw(frozen))
        if refusal is not None:
            raise _fail(name, refusal)
    digest = fingerprint({
        "name": name, "workflow": workflow.digest if isinstance(workflow, Workflow) else workflow,
        "timing": timing.key(), "input": frozen, "catch_up": catch_up, "max_catch_up": max_catch_up,
        "description": description,
    })
    return Schedule(name=name, workflow=workflow, timing=timing, input=frozen, catch_up=catch_up,
                    max_catch_up=max_catch_up, description=description, digest=digest)
