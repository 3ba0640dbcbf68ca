"""People and agents in the loop: interaction.list (read-only), checkpoint.answer, decision.answer,
interaction.submit and interaction.ack (recorded).

An answer's write command carries the payload's fields, the whole payload
(fingerprinted) and the peer that sent it (kept with the submission, not in
the fingerprint). interaction.submit is answered only once the worker decided
on the submission: the request waits in `GatewayServices.verdicts` and the
gateway calls `check_verdicts` when a change notice names the tables a
verdict writes (`VERDICT_TABLES`).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol import views
from piwf_actors.protocol.catalog.registry import (
    BuildEnv,
    GatewayServices,
    OperationContext,
    Spec,
    client_args,
    operation,
    write_operation,
)
from piwf_actors.protocol.envelope import Request
from piwf_actors.store import queries
from piwf_actors.store.requests import WriteCommand

_ANSWER_COMMON: Spec = {"request_id": ("str", True), "submission_id": ("str", False), "session_id": ("str", False)}
#: The tables whose change may decide a submission that interaction.submit waits for.
VERDICT_TABLES = frozenset({"interactive_submission", "interactive_request", "run"})


@operation("interaction.list", payload={"session_id": ("str", False)}, read_only=True)
def interaction_list(ctx: OperationContext, payload: dict[str, Any]) -> None:
    ctx.reply("accepted", receipt=views.interactions_view(ctx.reader, payload.get("session_id")))


def _submit(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The submitter waits for the worker's verdict on its submission."""
    ctx.write(ctx.build(payload), verdict=lambda value: _await_verdict(ctx, value))


@write_operation("checkpoint.answer", payload={**_ANSWER_COMMON, "input": ("any", False)})
@write_operation("decision.answer", payload={**_ANSWER_COMMON, "response": ("map", True)})
@write_operation("interaction.submit", payload={**_ANSWER_COMMON, "value": ("any", False)}, handler=_submit)
@write_operation("interaction.ack", payload={"message_id": ("str", True)})
def answer(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    args = {**client_args(request), **payload}
    args["payload"] = request.payload
    args["peer"] = request.peer  # who answered, kept with the submission (not in the fingerprint)
    return WriteCommand(request.operation, args)


def _await_verdict(ctx: OperationContext, value: dict[str, Any]) -> bool:
    """Hold the answer to interaction.submit until the submission is decided. True if answered now."""
    receipt = value.get("receipt") or {}
    submission_id = receipt.get("submission_id")
    if submission_id is None:
        return False
    ctx.services.verdicts[submission_id] = (ctx, value.get("outcome", "accepted"))
    check_verdicts(ctx.services)
    return True


def check_verdicts(services: GatewayServices) -> None:
    """Answer every waiting interaction.submit whose submission is decided (or whose request was cancelled)."""
    for submission_id, (ctx, outcome) in list(services.verdicts.items()):
        decided = queries.submission_state(services.reader, submission_id)
        if decided is None or not decided["decided"]:
            continue
        del services.verdicts[submission_id]
        receipt = {"submission_id": submission_id, "request_id": decided["request_id"],
                   "outcome": decided["outcome"]}
        if decided["outcome"] == "accepted":
            ctx.reply(outcome if outcome == "adopted" else "accepted", receipt=receipt)
        elif decided["outcome"] == "rejected":
            ctx.reply("rejected", receipt=receipt,
                      error=(decided.get("receipt") or {}).get("error") or "submission rejected")
        else:
            ctx.reply("rejected", receipt=receipt,
                      error="the request was cancelled before the submission was validated")
