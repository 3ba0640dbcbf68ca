"""The durable calls that wait, ask or start other runs: `sleep`, `sleep_until`, `wait_message`,
`decide`, `checkpoint`, `agent`, `run_child`, `map_children`, and `send_message`.

Each builds the spec of the graph node kind that does the same (a `sleep` node, a `human_decision`…),
checked as a definition checks it, and hands it to the run's replay (durable/replay.py): the run
parks on the same durable rows a graph node parks on, and holds no worker while it waits. Each takes
an optional `name=` (its id; default the call's kind, `#2`, `#3`… for the following ones). Deadlines
are plain values computed in the function.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from piwf_actors.durable.replay import checked_name, current_replay
from piwf_actors.workflows.kinds.agent import AgentSpec
from piwf_actors.workflows.kinds.checkpoint import CheckpointSpec
from piwf_actors.workflows.kinds.human_decision import HumanDecisionSpec, choice
from piwf_actors.workflows.kinds.map_workflow import MapWorkflowSpec
from piwf_actors.workflows.kinds.run_workflow import RunWorkflowSpec
from piwf_actors.workflows.kinds.sleep import SleepSpec
from piwf_actors.workflows.kinds.wait_event import WaitEventSpec
from piwf_actors.workflows.kinds.wait_message import WaitMessageSpec
from piwf_actors.workflows.model import Choice, Workflow
from piwf_actors.workflows.typed_values import to_json
from piwf_actors.workflows.validation import checked_node

#: The audience of a decision or checkpoint when none is given (channels route audiences: channels.md).
DEFAULT_AUDIENCE = "operator"
_NO_DEFAULT: Any = object()


def _call(what: str, name: str, spec: Any, *, answered_by: bool = False) -> Any:
    replay = current_replay(f"{what}()")
    return replay.call(name, checked_node(checked_name(name, what), spec), answered_by=answered_by)


def sleep(seconds: float, *, name: str = "sleep") -> None:
    """Wait `seconds` (durably: the run parks, no worker is held; a pause stops the clock's effect as
    for a `sleep` node — the wake-up time stands, the run goes on when resumed)."""
    _call("sleep", name, SleepSpec(seconds=seconds))


def sleep_until(when: float | _dt.datetime, *, name: str = "sleep") -> None:
    """Wait until `when` (epoch seconds, or an aware datetime); a time past goes on at once."""
    _call("sleep_until", name, SleepSpec(until=lambda _ctx: when))


def wait_message(topic: str, timeout_s: float | None = None, default: Any = _NO_DEFAULT, *,
                 name: str = "wait_message") -> Any:
    """The payload of the next message on `topic` in this run's mailbox (sent before the wait or
    after, taken once, in send order). After `timeout_s` without one: `default` when given, else
    StepFailed with code `message_timeout`."""
    on_timeout = None if default is _NO_DEFAULT else to_json(default)
    if default is not _NO_DEFAULT and on_timeout is None:
        raise ValueError("wait_message(default=None) cannot be told from no default: give a value")
    return _call("wait_message", name, WaitMessageSpec(topic=topic, timeout_s=timeout_s, on_timeout=on_timeout))


def wait_event(event: str, match: Any = None, timeout_s: float | None = None, default: Any = _NO_DEFAULT, *,
               lookback_s: float | None = None, name: str = "wait_event") -> dict[str, Any]:
    """The first event `event` whose data matches `match` (a map of data paths to values, such as
    `{"order_id": order_id}`; None: any), emitted after this run was created or at most `lookback_s`
    before the wait, taken once: `{event_id, name, key, data, emitted_at}`. After `timeout_s` without
    one: `default` when given, else StepFailed with code `event_timeout` (workflows/kinds/wait_event.py)."""
    on_timeout = None if default is _NO_DEFAULT else to_json(default)
    if default is not _NO_DEFAULT and on_timeout is None:
        raise ValueError("wait_event(default=None) cannot be told from no default: give a value")
    spec = WaitEventSpec(name=event, match=to_json(match) if not callable(match) else match, timeout_s=timeout_s,
                         on_timeout=on_timeout, lookback_s=lookback_s)
    return _call("wait_event", name, spec)


@dataclass(frozen=True, slots=True)
class Answer:
    """A decision's answer: the `choice` key, the text `input` of a choice that asks for one
    ({name: text}, else {}), and who answered when the host recorded it (`answered_by`: the client,
    channel or deadline that gave it; None for a default taken at the deadline)."""

    choice: str
    input: Mapping[str, str] = field(default_factory=dict)
    answered_by: Mapping[str, Any] | None = None

    def text(self, name: str, default: str = "") -> str:
        """The text input `name` (or `default`)."""
        return str(self.input.get(name, default))


def decide(name: str, *, title: str, choices: Mapping[str, str | Choice], timeout_s: float | None = None,
           default: str | None = None, audience: str | None = None, description: str = "",
           blocks: Sequence[Mapping[str, Any]] = ()) -> Answer:
    """Ask a person to choose; the run parks (no worker) until someone answers through
    `decision.answer` (`piwf answer`, piwf-top, a channel such as Telegram, a client program).

    `name` is the decision's id. `choices` maps each choice key to its label, or to a
    `choice(label, input=text_input(name, prompt))` asking for text too. `timeout_s` with `default`
    (a choice key) answers it by itself after that many seconds (a value computed in the function
    is fine). `audience` (default "operator") routes it to channels; `description` and `blocks` are
    shown under the title (docs/interactions.md)."""
    built = {key: value if isinstance(value, Choice) else choice(str(value)) for key, value in choices.items()}
    if (timeout_s is None) != (default is None):
        raise ValueError(f"decide({name!r}): timeout_s and default go together (the answer taken at the deadline)")
    on_timeout = None if timeout_s is None else {"after_s": timeout_s, "response": {"choice": default}}
    request: dict[str, Any] = {"title": title, "summary": description}
    if blocks:
        request["blocks"] = [dict(block) for block in blocks]
    spec = HumanDecisionSpec(audience=audience or DEFAULT_AUDIENCE, choices=built, request=request,
                             on_timeout=on_timeout)
    answer = _call("decide", name, spec, answered_by=True)
    return Answer(choice=str(answer["choice"]), input=dict(answer.get("input") or {}),
                  answered_by=answer.get("answered_by"))


def checkpoint(name: str, *, title: str, timeout_s: float | None = None, audience: str | None = None) -> Any:
    """Wait for a person to answer `title` with a value (`piwf answer RUN --input …`); returns it."""
    return _call("checkpoint", name, CheckpointSpec(prompt=title, timeout_s=timeout_s, audience=audience))


def agent(name: str, *, prompt: str, expected_output: Any = None, max_submissions: int = 3,
          timeout_s: float | None = None) -> Any:
    """Wait for an agent session to submit a value (of `expected_output`'s shape when given; a shape or
    a type); returns the accepted submission."""
    return _call("agent", name, AgentSpec(prompt=prompt, expected_output=expected_output,
                                          max_submissions=max_submissions, timeout_s=timeout_s))


def run_child(workflow: Workflow, input: Any = None, *, name: str = "child") -> Any:
    """Start a child run of `workflow` (a function or graph workflow, a module attribute of this file
    or imported into it) with `input`, wait for it, and return its output; StepFailed if it fails."""
    child_input = to_json(input)
    return _call("run_child", name, RunWorkflowSpec(child=workflow, input=lambda _ctx: child_input))


def map_children(workflow: Workflow, items: Sequence[Any], max_parallel: int | None = None, *,
                 name: str = "map", on_failure: str = "fail_fast") -> Any:
    """A child run of `workflow` per item (its input), at most `max_parallel` at once; their outputs
    in item order. `on_failure="fail_fast"`: StepFailed at the first failure; `"collect"`: returns
    `{outputs, failed: [{index, run_id, error}]}`."""
    inputs = [to_json(item) for item in items]
    return _call("map_children", name, MapWorkflowSpec(child=workflow, items=lambda _ctx: inputs,
                                                       max_parallel=max_parallel, on_failure=on_failure))


def send_message(run_id: str, topic: str, payload: Any = None) -> dict[str, Any]:
    """Put `payload` in run `run_id`'s mailbox on `topic` (a `wait_message` there takes it). Sent once:
    a replay of this call sends nothing again. Returns the receipt {message_id, run_id, topic, seq,
    status}."""
    return current_replay("send_message()").send_message(run_id, topic, to_json(payload))
