"""Messages to a running run: message.send.

The message goes into the run's durable mailbox (store/commands/mailbox.py); a `wait_message` on
its topic takes it, once, in send order, also when it was sent before the run reached the wait or
while no worker runs it. Recorded under the client's idempotency key: a resend is the same message.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol.catalog.registry import BuildEnv, client_args, write_operation
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.store.commands.mailbox import MAX_TOPIC_CHARS
from piwf_actors.store.requests import WriteCommand


@write_operation("message.send", payload={"run_id": ("str", True), "topic": ("str", True), "payload": ("any", False),
                                          "strict": ("bool", False)})
def message_send(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    topic = payload["topic"]
    if not topic.strip() or len(topic) > MAX_TOPIC_CHARS:
        raise BadRequest(f"message.send: a topic is a non-empty string of at most {MAX_TOPIC_CHARS} characters",
                         request.request_id)
    args = {**client_args(request), "to_run_id": payload["run_id"], "topic": topic, "message": payload.get("payload")}
    args["peer"] = request.peer  # who sent it, kept with the message (not in the fingerprint)
    args["strict"] = bool(payload.get("strict"))  # refuse a topic no node of the run's workflow waits on
    return WriteCommand("message.send", args)
