"""The host: host.status (read-only) and host.stop (not recorded: it stops this host, standby or not)."""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol import views
from piwf_actors.protocol.catalog.registry import OperationContext, operation


@operation("host.status", read_only=True)
def host_status(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    """The host's view (`views.host_view`), the gateway's own figures and the workflow code it runs
    (`user_code`: calls running, hung past their limits, the limits: workflows/user_code.py)."""
    view = views.host_view(ctx.reader, ctx.board)
    view["gateway"] = {"connections": ctx.services.connections(), "watches": len(ctx.views.watches),
                       "requests": ctx.services.stats.requests}
    view["user_code"] = ctx.services.env.resolver.user_code.status()
    ctx.reply("accepted", receipt=view)


@operation("host.stop")
def host_stop(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    """Answered first: the stop then closes the socket this answer goes out on."""
    ctx.reply("accepted", receipt={"stopping": True})
    if ctx.services.shutdown is not None:
        ctx.services.shutdown(f"host.stop from client {ctx.request.client_id}")
