"""The executor of human decisions: the request the host presents (its presentation, the choices
and their text inputs) and its default response with the deadline, computed here from the run when
the definition says so (kinds/human_decision.py `decision_timeout_for`)."""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Ask
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.contracts import presentation
from piwf_actors.workflows.kinds.human_decision import decision_timeout_for
from piwf_actors.workflows.model import thaw


def contract(node_id: str, spec: Any, ctx: NodeContext) -> tuple[dict[str, Any], float | None, Any]:
    shown = presentation(thaw(evaluate(spec.request, ctx)))
    choices = {key: {"label": choice.label,
                     "input": None if choice.input is None else {
                         "name": choice.input.name, "prompt": choice.input.prompt,
                         "min_length": choice.input.min_length, "max_length": choice.input.max_length}}
               for key, choice in spec.choices.items()}
    timeout = decision_timeout_for(node_id, spec, ctx)
    default = timeout.response() if timeout is not None else None
    contract = {"kind": "decision", "audience": spec.audience, **shown, "choices": choices,
                "default_response": default, "timeout_s": timeout.after_s if timeout is not None else None}
    return contract, (timeout.after_s if timeout is not None else None), default


HUMAN_DECISION = Ask(contract)
