"""Reads of the HTTP door's tokens (`http_token`, schema v18) and console sessions (`http_session`, schema v19):
the door's sign-in, its sessions, and `http_token.list`."""

from __future__ import annotations

from typing import Any

from piwf_actors.store.reader import StoreReader


def live_token(reader: StoreReader, token_sha256: str) -> dict[str, Any] | None:
    """{name, role} of the live (not revoked) token with this sha256, or None."""
    row = reader.one("SELECT name, role FROM http_token WHERE token_sha256 = ? AND revoked_at IS NULL",
                     (token_sha256,))
    return None if row is None else {"name": row[0], "role": row[1]}


def tokens(reader: StoreReader) -> list[dict[str, Any]]:
    """Every token by name, revoked ones included (never its hash)."""
    return [{"name": name, "role": role, "created_at": created_at, "revoked_at": revoked_at}
            for name, role, created_at, revoked_at in reader.all(
                "SELECT name, role, created_at, revoked_at FROM http_token ORDER BY name")]


def live_session(reader: StoreReader, session_sha256: str, now: float) -> dict[str, Any] | None:
    """{name, role, token_sha256} of the unexpired session with this sha256 whose token is live, or None."""
    row = reader.one("SELECT t.name, t.role, t.token_sha256 FROM http_session s JOIN http_token t "
                     "ON t.token_sha256 = s.token_sha256 WHERE s.session_sha256 = ? AND s.expires_at > ? "
                     "AND t.revoked_at IS NULL", (session_sha256, now))
    return None if row is None else {"name": row[0], "role": row[1], "token_sha256": row[2]}


def sessions(reader: StoreReader) -> list[dict[str, Any]]:
    """Every stored session (expired ones included until a sign-in deletes them): its token's name and
    times, oldest first; never a hash."""
    return [{"token": name, "created_at": created_at, "expires_at": expires_at}
            for name, created_at, expires_at in reader.all(
                "SELECT t.name, s.created_at, s.expires_at FROM http_session s JOIN http_token t "
                "ON t.token_sha256 = s.token_sha256 ORDER BY s.created_at, s.session_sha256")]
