"""Decision channels: channel.status (read-only), channel.reload (not recorded), channel.recover (recorded).

channel.reload is answered by the channel manager: the request waits in
`GatewayServices.reloads` under a token until its `ChannelsReloaded` comes
back to the gateway, which hands it to `channels_reloaded`.
"""

from __future__ import annotations

import secrets
from typing import Any

from piwf_actors.actor_refs import safe_tell
from piwf_actors.board import Section
from piwf_actors.protocol.catalog.registry import (
    BuildEnv,
    GatewayServices,
    OperationContext,
    client_args,
    operation,
    write_operation,
)
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.protocol.gateway_messages import ChannelsReloaded, ReloadChannels
from piwf_actors.store import channel_queries
from piwf_actors.store.requests import WriteCommand


@operation("channel.status", read_only=True)
def channel_status(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    status = dict(ctx.board.snapshot(Section.CHANNELS) or {"configured": False, "profiles": []})
    status.update(channel_queries.deliveries_status(ctx.reader))
    ctx.reply("accepted", receipt=status)


@operation("channel.reload")
def channel_reload(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    if ctx.services.channels is None:
        ctx.reply("unavailable", error="decision channels are not running in this host")
        return
    token = f"reload:{ctx.conn_id}:{secrets.token_hex(6)}"
    ctx.services.reloads[token] = ctx
    safe_tell(ctx.services.channels, ReloadChannels(ctx.services.gateway, token))


def channels_reloaded(services: GatewayServices, message: ChannelsReloaded) -> None:
    """The channel manager's answer to a reload: the waiting request gets its status and the deliveries'."""
    waiting = services.reloads.pop(message.token, None)
    if waiting is not None:
        waiting.reply("accepted", receipt={**message.status, **channel_queries.deliveries_status(services.reader)})


@write_operation("channel.recover", payload={"profile": ("str", True), "message_id": ("str", True),
                                             "action": ("str", True)})
def channel_recover(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    if payload["action"] not in ("confirm", "retry"):
        raise BadRequest("channel.recover: action must be confirm or retry", request.request_id)
    return WriteCommand("channel.recover", {**client_args(request), "profile": payload["profile"],
                                            "message_id": payload["message_id"], "action": payload["action"]})
