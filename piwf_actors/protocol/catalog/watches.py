"""Watches: watch and unwatch (read-only; the subscriptions live in the gateway's `LiveViews`)."""

from __future__ import annotations

import time
from typing import Any

from piwf_actors.protocol.catalog.registry import OperationContext, operation
from piwf_actors.protocol.watches import WatchRefused
from piwf_actors.wire import pack

#: A `run` view of a run that does not exist, packed.
NO_VIEW = pack(None)


@operation("watch", payload={"subscription_id": ("str", True), "topic": ("str", True), "run_id": ("str", False),
                             "session_id": ("str", False), "output_so_far": ("bool", False)}, read_only=True)
def watch(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """Subscribe, answer, then send the first event at once (a run watch of a run that does not exist
    is refused `notFound` and not kept). A `run` watch with `output_so_far` first gets, as `node_output`
    events, what the run's running node printed before it subscribed (`piwf logs -f`, like `tail -f`)."""
    run_id = payload.get("run_id") or ctx.request.run_id
    try:
        added = ctx.views.watches.add(ctx.conn_id, payload["subscription_id"], payload["topic"], run_id,
                                      payload.get("session_id"))
    except WatchRefused as refused:
        ctx.reply("rejected", error=str(refused))
        return
    if added.topic != "run":
        ctx.reply("accepted", receipt={"subscription_id": added.subscription_id, "topic": added.topic})
        ctx.views.refresh([added], time.monotonic(), fresh=True)
        return
    first = ctx.views.first_view(added)  # one read: the view, and whether the run exists
    if first == NO_VIEW:
        ctx.views.watches.remove(ctx.conn_id, added.subscription_id)
        ctx.reply("notFound", error=f"run {run_id} not found")
        return
    ctx.reply("accepted", receipt={"subscription_id": added.subscription_id, "topic": added.topic})
    if payload.get("output_so_far"):
        ctx.views.replay_output(added)
    ctx.views.send_first(added, first, time.monotonic())


@operation("unwatch", payload={"subscription_id": ("str", True)}, read_only=True)
def unwatch(ctx: OperationContext, payload: dict[str, Any]) -> None:
    if not ctx.views.watches.remove(ctx.conn_id, payload["subscription_id"]):
        ctx.reply("notFound", error=f"no subscription {payload['subscription_id']}")
        return
    ctx.reply("accepted", receipt={"subscription_id": payload["subscription_id"]})
