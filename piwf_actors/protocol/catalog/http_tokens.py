"""The HTTP door's tokens: http_token.add, http_token.revoke (recorded) and http_token.list (read-only);
and the console's sessions: http_session.open, http_session.close (recorded).

No route of the HTTP door names them (piwf_actors/http/routes.py), so a token cannot make or revoke
tokens; the socket admits only the host's uid. `http_token.add` carries the token's sha256, never the
token: `piwf http token add` makes the token and prints it once (docs/http.md). The console's
sign-in and sign-out make the session operations themselves (`http/console/actions.py`), after
checking the token, so a session is written by the host's writer like every other row.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol.catalog.registry import BuildEnv, OperationContext, client_args, operation, write_operation
from piwf_actors.protocol.envelope import Request
from piwf_actors.store import http_queries
from piwf_actors.store.requests import WriteCommand


def _send_and_tell_the_doors(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """Write, and once committed tell the doors before answering: the HTTP door caches live tokens
    (actors/http_door.py), so a revoked token is refused from the first request after the answer on."""

    def committed(_value: dict[str, Any]) -> bool:  # in the gateway's thread, before the answer goes out
        ctx.services.tokens_changed()
        return False  # and answer as usual

    ctx.write(ctx.build(payload), committed)


@write_operation("http_token.add", payload={"name": ("str", True), "role": ("str", True),
                                            "token_sha256": ("str", True)}, handler=_send_and_tell_the_doors)
@write_operation("http_token.revoke", payload={"name": ("str", True)}, handler=_send_and_tell_the_doors)
@write_operation("http_session.open", payload={"session_sha256": ("str", True), "token_sha256": ("str", True)})
@write_operation("http_session.close", payload={"session_sha256": ("str", True)})
def token_change(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    return WriteCommand(request.operation, {**client_args(request), **payload})


@operation("http_token.list", read_only=True)
def token_list(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    ctx.reply("accepted", receipt={"tokens": http_queries.tokens(ctx.reader)})
