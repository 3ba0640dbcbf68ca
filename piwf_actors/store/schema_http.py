"""The tables of the HTTP door: bearer tokens (schema v18) and console sessions (schema v19). Listed in
store/schema.py with every other table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class HttpToken(Base):
    """One bearer token of the HTTP door (docs/http.md), by name.

    Only the sha256 of the token is stored (the token is 256 random bits, printed once by
    `piwf http token add` and never sent to the host): a copy of the database cannot sign in.
    `role` is `viewer` or `operator`. A revoked token keeps its row (`revoked_at`) so its name
    stays in the provenance of what it did; a new token may take the name again only after.
    """

    name = pw.TextField(primary_key=True)
    token_sha256 = pw.TextField(unique=True)
    role = pw.TextField()
    created_at = pw.FloatField()
    revoked_at = pw.FloatField(null=True)

    class Meta:
        table_name = "http_token"


class HttpSession(Base):
    """One signed-in browser of the web console (docs/http.md, "Console"), by the sha256 of its cookie.

    The cookie is 256 random bits the door sets once; only its hash is stored, so a copy of the
    database opens no session. `token_sha256` is the token it was signed in with: the session opens
    pages while that token is live (a revoke also deletes its sessions). `expires_at` is absolute
    (created_at + the door's session lifetime); expired rows are deleted by the next sign-in.
    """

    session_sha256 = pw.TextField(primary_key=True)
    token_sha256 = pw.TextField(index=True)
    created_at = pw.FloatField()
    expires_at = pw.FloatField(index=True)

    class Meta:
        table_name = "http_session"
