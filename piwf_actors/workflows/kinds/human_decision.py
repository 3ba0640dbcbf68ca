"""human_decision: typed choices for a person, delivered to an audience's channels, with an optional
text input per choice and an optional deadline with a default response.

Its output is the accepted response `{choice, input?}` (`check_decision_response` says whether one
fits). A `switch` on `$.choice` from it must have one case per choice (`define_workflow` checks).
The worker asks the host for the request (worker/executors/human_decision.py).

`Choice`, `TextInput` and `DecisionTimeout` stay in `model.py`: their qualified class names are part
of every stored definition digest that holds a decision (workflows/digest.py), so moving them would
change the digest of every such workflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import (
    check_node_id,
    checked_seconds,
    common,
    fail,
    is_json_value,
    shown,
    timeout,
)
from piwf_actors.workflows.kinds.summary import seconds
from piwf_actors.workflows.model import Choice, DecisionTimeout, NodeSpec, TextInput, freeze, thaw


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanDecisionSpec(NodeSpec):
    """Typed choices delivered to an audience's channels.

    The output is the accepted response `{choice, input?}`; check a response
    with `workflows.validation.check_decision_response`.
    """

    kind: ClassVar[str] = "human_decision"
    audience: str
    choices: Mapping[str, Choice]
    request: Any  # Mapping[str, Any] (frozen) | Callback
    # A DecisionTimeout or a callable of ctx (returning the raw dict or None) once defined; helpers
    # leave the raw dict here.
    on_timeout: Any = None


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


# --- checks -------------------------------------------------------------------------------------------------


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


def check(node_id: str, spec: HumanDecisionSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
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
    deadline = spec.on_timeout
    if deadline is not None and not isinstance(deadline, DecisionTimeout) and not callable(deadline):
        # A callable is checked when the worker calls it (`decision_timeout_for`); so is a callable after_s.
        deadline = _decision_timeout(node_id, dataclasses.replace(spec, choices=choices), deadline, computed=True)
    return changes | {"choices": choices, "request": request, "on_timeout": deadline}


def _decision_timeout(node_id: str, spec: HumanDecisionSpec, value: Any, *, computed: bool) -> DecisionTimeout:
    """`{"after_s": seconds, "response": {...}}` checked against `spec`'s choices; `computed`: after_s
    may be a callable of ctx (as written in a workflow, not as returned by a callable on_timeout)."""
    if not isinstance(value, Mapping) or set(value) != {"after_s", "response"}:
        raise fail(node_id, "on_timeout must be {'after_s': seconds, 'response': {'choice': ...}} "
                            f"(or a callable of ctx returning one, or None), got {shown(value)}")
    after_s = value["after_s"]
    if not (computed and callable(after_s)):
        after_s = float(timeout(node_id, after_s, False, "on_timeout.after_s") or 0.0)
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
    deadline = spec.on_timeout
    if callable(deadline):
        value = thaw(deadline(ctx))
        return None if value is None else _decision_timeout(node_id, spec, value, computed=False)
    if deadline is not None and callable(deadline.after_s):
        after_s = checked_seconds(node_id, deadline.after_s(ctx), "on_timeout.after_s")
        return None if after_s is None else dataclasses.replace(deadline, after_s=after_s)
    return deadline  # type: ignore[no-any-return]


# --- description -------------------------------------------------------------------------------------------


def describe(spec: HumanDecisionSpec) -> list[str]:
    """The audience and the choices, and the deadline with the choice it takes."""
    parts = [f"{spec.audience} · {' | '.join(spec.choices)}"]
    if callable(spec.on_timeout):
        parts.append("timeout (computed)")
    elif spec.on_timeout is not None:
        parts.append(f"timeout {seconds(spec.on_timeout.after_s)} → {spec.on_timeout.choice}")
    return parts


def switch_cases(spec: HumanDecisionSpec) -> Mapping[str, Choice]:
    """The keys a switch on `$.choice` must cover, exactly: the choices."""
    return spec.choices


KIND = NodeKind(spec=HumanDecisionSpec, check=check, describe=describe,
                drawing=Drawing(('{{"', '"}}'), "hexagon"), switch_cases=switch_cases)
