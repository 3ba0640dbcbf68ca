"""The web console's sessions: http_session.open and http_session.close (recorded client commands).

A session is a signed-in browser (docs/http.md, "Console"). The door makes its cookie (256 random
bits) and sends only the cookie's sha256 with the sha256 of the token it signed in with, so neither
the command record nor the table can give a cookie back. A session opens pages while its token is
live and until `expires_at` (absolute: SESSION_LIFETIME_S after the sign-in, never extended);
`http_token.revoke` deletes the token's sessions, sign-out deletes its own. Expired rows are
deleted by the next sign-in, and a token keeps at most MAX_SESSIONS_PER_TOKEN (the oldest go first),
so the table stays small however many browsers sign in.

Portable SQL only (the store also runs on PostgreSQL).
"""

from __future__ import annotations

import re
from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command

#: How long a console session opens pages after its sign-in (12 h: a working day; then sign in again).
SESSION_LIFETIME_S = 12 * 3600.0
#: Sessions kept per token; a sign-in past it ends that token's oldest session.
MAX_SESSIONS_PER_TOKEN = 256
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _digest(args: dict[str, Any], name: str) -> str:
    value = args[name]
    if not _SHA256.fullmatch(value):
        raise Rejected(f"{name} must be 64 lowercase hex digits")
    return str(value)


@command("http_session.open")
def open_session(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Store a session for the live token with `token_sha256`; refused when that token is unknown or revoked."""

    def apply() -> dict[str, Any]:
        session, token = _digest(args, "session_sha256"), _digest(args, "token_sha256")
        row = ctx.conn.execute("SELECT name, role FROM http_token WHERE token_sha256 = ? AND revoked_at IS NULL",
                               (token,)).fetchone()
        if row is None:
            raise Rejected("unknown or revoked token")
        ctx.conn.execute("DELETE FROM http_session WHERE expires_at <= ?", (ctx.now,))
        kept = ctx.conn.execute("SELECT session_sha256 FROM http_session WHERE token_sha256 = ? "
                                "ORDER BY created_at DESC, session_sha256", (token,)).fetchall()
        for (old,) in kept[MAX_SESSIONS_PER_TOKEN - 1:]:
            ctx.conn.execute("DELETE FROM http_session WHERE session_sha256 = ?", (old,))
        expires_at = ctx.now + SESSION_LIFETIME_S
        ctx.conn.execute("INSERT INTO http_session (session_sha256, token_sha256, created_at, expires_at) "
                         "VALUES (?, ?, ?, ?)", (session, token, ctx.now, expires_at))
        ctx.changes.touch("http_session")
        return {"name": row[0], "role": row[1], "expires_at": expires_at}

    return recorded(ctx, args, apply)


@command("http_session.close")
def close_session(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Delete the session with `session_sha256` (sign-out); closing one that is gone changes nothing."""

    def apply() -> dict[str, Any]:
        session = _digest(args, "session_sha256")
        found = ctx.conn.execute("SELECT 1 FROM http_session WHERE session_sha256 = ?", (session,)).fetchone()
        if found is not None:
            ctx.conn.execute("DELETE FROM http_session WHERE session_sha256 = ?", (session,))
            ctx.changes.touch("http_session")
        return {"closed": found is not None}

    return recorded(ctx, args, apply)
