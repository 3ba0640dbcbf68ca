"""What `HostHandle.wait_for_run` says when its deadline passes: where the run stands and, when it waits
for a person, which request and the call that answers it.

A leaf (plain data in, a string out): the handle reads the run and its pending requests and passes
them here, so the text is tested without a host. `wait_for_run` keeps waiting through a park — an
answer may come from another thread, a channel or `piwf answer` — so the timeout is where an
embedding program that forgot the run's checkpoint learns it.
"""

from __future__ import annotations

from typing import Any

#: Said at the end of every "waits for a person" message: the other way out of the wait.
_OR_RETURN = "or pass statuses=(..., 'parked') to return at the park"


def _answer_call(request: Any) -> str:
    request_id, kind = request.request_id, request.kind
    contract = request.contract if isinstance(request.contract, dict) else {}
    if kind == "decision":
        choices = ", ".join(str(key) for key in contract.get("choices") or {})
        return f"answer it with answer_decision({request_id!r}, choice) (choices: {choices})"
    if kind == "checkpoint":
        return f"answer it with answer_checkpoint({request_id!r}, value)"
    return f"submit its output with submit_agent({request_id!r}, value)"


def _asks(request: Any) -> str:
    contract = request.contract if isinstance(request.contract, dict) else {}
    text = contract.get("title") if request.kind == "decision" else contract.get("prompt")
    return f": {str(text)[:200]!r}" if text else ""


def timeout_message(run_id: str, view: Any, pending: list[Any], timeout: float) -> str:
    """The TimeoutError text of a wait for `run_id` that lasted `timeout` seconds.

    `view` is the run's last `RunView` (None: no such run); `pending` its open interactive requests.
    """
    waited = f"after {timeout:g} s"
    if view is None:
        return f"run {run_id} was not found {waited}"
    if view.status != "parked":
        return f"run {run_id} is still {view.status} {waited}"
    if view.park_reason == "waiting" and pending:
        request = pending[0]
        kind = "agent step" if request.kind == "agent" else request.kind
        return (f"run {run_id} is still parked {waited}: it waits for an answer to {kind} {request.node_id!r} "
                f"(request {request.request_id}{_asks(request)}); {_answer_call(request)}, {_OR_RETURN}")
    if view.park_reason == "waiting":
        return f"run {run_id} is still parked {waited}: it waits (a sleep, a message or its child runs)"
    if view.park_reason == "ambiguous_effect":
        return (f"run {run_id} is still parked {waited}: the outcome of effect {view.park_detail} is unknown; "
                f"settle it with resolve_effect({view.park_detail!r}, 'confirm' or 'retry'), {_OR_RETURN}")
    if view.park_reason == "paused":
        return f"run {run_id} is still parked {waited}: it is paused; resume_run({run_id!r}) goes on"
    return f"run {run_id} is still parked ({view.park_reason}) {waited}"
