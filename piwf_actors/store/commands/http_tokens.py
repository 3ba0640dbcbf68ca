"""The HTTP door's bearer tokens: http_token.add and http_token.revoke (recorded client commands).

The host never sees a token: `piwf http token add` makes it, prints it once and sends only its
sha256 (docs/http.md), so neither the command record nor the table can give it back. A name names
one live token at a time; revoking keeps the row (the name stays in what the token did), deletes
the console sessions signed in with it (`http_session`) and frees the name for a new token.

Portable SQL only (the store also runs on PostgreSQL).
"""

from __future__ import annotations

import re
from typing import Any

from piwf_actors.errors import Conflict, NotFound, Rejected
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command

ROLES = ("viewer", "operator")
#: A token's name: what provenance shows (`via http, token NAME`) and what `revoke` takes.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@command("http_token.add")
def add_token(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Store a token's hash under `name` with `role`; a live token of that name is a conflict."""

    def apply() -> dict[str, Any]:
        name, role, digest = args["name"], args["role"], args["token_sha256"]
        if not NAME.fullmatch(name):
            raise Rejected("a token's name is 1-64 letters, digits and _.- (starting with a letter or digit)")
        if role not in ROLES:
            raise Rejected(f"a token's role is one of {', '.join(ROLES)}, not {role!r}")
        if not _SHA256.fullmatch(digest):
            raise Rejected("token_sha256 must be 64 lowercase hex digits")
        row = ctx.conn.execute("SELECT revoked_at FROM http_token WHERE name = ?", (name,)).fetchone()
        if row is not None and row[0] is None:
            raise Conflict(f"a token named {name} exists: revoke it first")
        if ctx.conn.execute("SELECT 1 FROM http_token WHERE token_sha256 = ?", (digest,)).fetchone():
            raise Conflict("that token was stored before: make a new one")
        if row is not None:
            ctx.conn.execute("DELETE FROM http_token WHERE name = ?", (name,))
        ctx.conn.execute("INSERT INTO http_token (name, token_sha256, role, created_at, revoked_at) "
                         "VALUES (?, ?, ?, ?, NULL)", (name, digest, role, ctx.now))
        ctx.changes.touch("http_token")
        return {"name": name, "role": role, "created_at": ctx.now}

    return recorded(ctx, args, apply)


@command("http_token.revoke")
def revoke_token(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Revoke the live token named `name`: from this commit on it signs in nowhere, and its console
    sessions are gone."""

    def apply() -> dict[str, Any]:
        name = args["name"]
        row = ctx.conn.execute("SELECT revoked_at, token_sha256 FROM http_token WHERE name = ?", (name,)).fetchone()
        if row is None or row[0] is not None:
            raise NotFound("token", name)
        ctx.conn.execute("UPDATE http_token SET revoked_at = ? WHERE name = ?", (ctx.now, name))
        ctx.conn.execute("DELETE FROM http_session WHERE token_sha256 = ?", (row[1],))
        ctx.changes.touch("http_token")
        ctx.changes.touch("http_session")
        return {"name": name, "revoked_at": ctx.now}

    return recorded(ctx, args, apply)
