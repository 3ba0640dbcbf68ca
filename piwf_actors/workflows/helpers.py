"""The helpers a workflow file calls to describe nodes and routes.

Helpers only record their arguments. `define_workflow` validates them, so a
mistake is reported with the id of the node it belongs to (a helper does not
know that id yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from piwf_actors.workflows.model import (
    ActionSpec,
    AgentSpec,
    Callback,
    CheckpointSpec,
    Choice,
    ComputeSpec,
    Edge,
    HumanDecisionSpec,
    Include,
    NotifySpec,
    RouteDef,
    ShellSpec,
    Switch,
    TextInput,
    Workflow,
)


def compute(
    run: Callback, timeout_s: float | None = 900, retries: int = 0, retry_backoff_s: float = 0.0, output: Any = None
) -> ComputeSpec:
    """A pure function `run(ctx) -> JSON-able output`; `timeout_s=None` for no timeout. `output` (a shape
    or a Python type, see `shapes.py`) is checked in the worker when `run` returns: a mismatch fails the
    attempt `output_invalid`."""
    return ComputeSpec(run=run, timeout_s=timeout_s, retries=retries, retry_backoff_s=retry_backoff_s,
                       output_shape=output)


def action(
    run: Callback,
    idempotent: bool = False,
    timeout_s: float | None = 900,
    retries: int = 0,
    retry_backoff_s: float = 0.0,
    output: Any = None,
) -> ActionSpec:
    """A side effect `run(ctx) -> JSON-able output`; `idempotent` allows re-running after a crash.
    `output` is checked like compute's, but a mismatch is not retried: `run` returned, so the effect
    happened (it is recorded `applied`)."""
    return ActionSpec(
        run=run, idempotent=idempotent, timeout_s=timeout_s, retries=retries,
        retry_backoff_s=retry_backoff_s, output_shape=output,
    )


def shell(
    command: Any,
    shell: bool = False,
    cwd: Any = None,
    env: Any = None,
    timeout_s: float | None = 900,
    allow_nonzero_exit: bool = False,
    idempotent: bool = False,
    retries: int = 0,
    retry_backoff_s: float = 0.0,
) -> ShellSpec:
    """A command (list or string, or a callable of ctx returning one).

    Output `{stdout, stderr, exit_code, duration_ms}`; a nonzero exit fails the
    node unless `allow_nonzero_exit`. `env` is merged onto the worker's
    environment (a value of None removes the variable).
    """
    return ShellSpec(
        command=command, shell=shell, cwd=cwd, env=env, timeout_s=timeout_s,
        allow_nonzero_exit=allow_nonzero_exit, idempotent=idempotent, retries=retries,
        retry_backoff_s=retry_backoff_s,
    )


def checkpoint(prompt: Any = "", timeout_s: Any = None, audience: str | None = None) -> CheckpointSpec:
    """Wait for an answer; `prompt` is a string or a callable of ctx. With an `audience`, the
    channels that route it (channels.toml) deliver the prompt too, answered there by a reply.
    `timeout_s` (seconds, None for none) may be a callable of ctx: the worker calls it when the
    request is made, and a result that is not a positive number or None fails the node."""
    return CheckpointSpec(prompt=prompt, timeout_s=timeout_s, audience=audience)


def notify(message: Any, audience: str | None = None) -> NotifySpec:
    """Deliver `message` (a string or a callable of ctx) to the run's session outbox; with an
    `audience`, also to the chats of the channel profiles that route it (channels.toml), once."""
    return NotifySpec(message=message, audience=audience)


def agent(
    prompt: Any,
    expected_output: Any = None,
    validate: Callback | None = None,
    max_submissions: int = 3,
    timeout_s: float | None = None,
) -> AgentSpec:
    """An agent step; see `AgentSpec` for how submissions are checked. `expected_output` is a shape
    or a Python type such as a dataclass (`shapes.py`)."""
    return AgentSpec(
        prompt=prompt, expected_output=expected_output, validate=validate,
        max_submissions=max_submissions, timeout_s=timeout_s,
    )


def text_input(name: str, prompt: str, min_length: int = 0, max_length: int = 4000) -> TextInput:
    """A text field for a choice; the answer's `input` maps `name` to the text."""
    return TextInput(name=name, prompt=prompt, min_length=min_length, max_length=max_length)


def choice(label: str, input: TextInput | None = None) -> Choice:
    """One choice of a human decision."""
    return Choice(label=label, input=input)


def human_decision(
    audience: str,
    choices: Mapping[str, Choice],
    request: Any,
    on_timeout: Any = None,
    timeout_s: float | None = None,
) -> HumanDecisionSpec:
    """A typed decision for `audience`.

    `on_timeout={"after_s": s, "response": {"choice": key, "input"?: {...}}}`
    answers the decision by itself after `s` seconds; it is checked against
    `choices` when the workflow is defined. Computed from the run: `after_s`
    may be a callable of ctx, or `on_timeout` itself a callable of ctx
    returning such a dict (or None: no deadline); the worker calls it when the
    request is made and checks the result as a constant one is checked (a
    result that does not fit fails the node with one line naming it).
    """
    # The raw on_timeout dict stays in the spec until define_workflow turns it
    # into a DecisionTimeout (and can name the node in an error).
    return HumanDecisionSpec(
        audience=audience, choices=choices, request=request, on_timeout=on_timeout,
        timeout_s=timeout_s,
    )


def include_workflow(workflow: Workflow, input: Callback | None = None) -> Include:
    """Mount `workflow` under the node id this is given in `nodes`.

    Route into it with an edge to that id; leave it through `"id.exit"`, where
    the exits are the child's terminal nodes. `input(ctx)` becomes the child's
    `ctx.input` (default: the enclosing scope's input).
    """
    return Include(workflow=workflow, input=input)


def edge(source: str, target: str) -> RouteDef:
    """Always route `source` to `target` (a node id, an include id, or `END`)."""
    return RouteDef(source=source, route=Edge(target))


def switch(
    source: str, on: str, cases: Mapping[str, str], default: str | None = None
) -> RouteDef:
    """Route `source` by a value of its result.

    `on` is `$.field[.sub]` / `$output.field[.sub]` (the output) or
    `$result.outcome` (`"ok"`/`"failed"`); see `routing.route` for matching.
    """
    return RouteDef(source=source, route=Switch(on=on, cases=cases, default=default))


def decision_switch(source: str, cases: Mapping[str, str]) -> RouteDef:
    """`switch(source, on="$.choice", cases=cases)`: one case per choice."""
    return switch(source, on="$.choice", cases=cases)
