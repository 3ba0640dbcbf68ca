"""Content and ids: content.read (a chunk of a large stored value) and ids.match (ids by prefix). Read-only."""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol.catalog.registry import OperationContext, operation
from piwf_actors.protocol.envelope import BadRequest
from piwf_actors.store import queries


@operation("content.read", payload={"digest": ("str", True), "offset": ("int", False), "length": ("int", False)},
           read_only=True)
def content_read(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """A chunk of a stored value that a view showed as `{"$content": digest, …}`."""
    length = payload.get("length")
    chunk = queries.content_chunk(ctx.reader, payload["digest"], payload.get("offset") or 0,
                                  queries.CONTENT_CHUNK_BYTES if length is None else length)
    if chunk is None:
        ctx.reply("notFound", error=f"no content {payload['digest'][:64]}")
        return
    ctx.reply("accepted", receipt=chunk)


@operation("ids.match", payload={"kind": ("str", True), "prefix": ("str", True), "limit": ("int", False)},
           read_only=True)
def ids_match(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The full ids that start with a prefix (what `piwf` does with `piwf show run_01m8`)."""
    kind, prefix = payload["kind"], payload["prefix"]
    if kind not in queries.ID_KINDS:
        raise BadRequest(f"ids.match: unknown kind {kind!r} (kinds: {', '.join(queries.ID_KINDS)})",
                         ctx.request.request_id)
    if not prefix:
        raise BadRequest("ids.match: prefix must not be empty", ctx.request.request_id)
    limit = min(payload.get("limit") or queries.ID_MATCH_DEFAULT, queries.ID_MATCH_MAX)
    matches, more = queries.match_ids(ctx.reader, kind, prefix, limit)
    ctx.reply("accepted", receipt={"matches": matches, "more": more})
