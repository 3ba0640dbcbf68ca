"""Reads of the HTTP door's tokens (`http_token`, schema v18): the door's sign-in and `http_token.list`."""

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
