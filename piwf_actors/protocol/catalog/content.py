"""Content and ids: content.read (a chunk of a large stored value) and ids.match (ids by prefix or end), both
read-only; content.upload (a chunk of a large value a request of the same connection refers to), which
changes no durable state."""

from __future__ import annotations

from typing import Any

from piwf_actors.protocol.catalog.registry import OperationContext, operation
from piwf_actors.protocol.envelope import BadRequest
from piwf_actors.store import id_queries, queries


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


@operation("content.upload", payload={"digest": ("str", True), "offset": ("int", True), "total": ("int", True),
                                      "data": ("bin", True)})
def content_upload(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """One chunk of a value that a later request of this connection refers to in its `refs`
    (`protocol/uploads.py`): held for this connection only, until a request takes it or the connection
    closes. Chunks of a value arrive in order; a chunk at offset 0 starts the value again."""
    received = ctx.services.uploads.add(ctx.conn_id, payload, ctx.request.request_id)
    ctx.reply("accepted", receipt={"digest": payload["digest"], "received": received, "total": payload["total"]})


@operation("ids.match", payload={"kind": ("str", True), "prefix": ("str", False), "suffix": ("str", False),
                                 "limit": ("int", False)}, read_only=True)
def ids_match(ctx: OperationContext, payload: dict[str, Any]) -> None:
    """The full ids that start with a prefix (what `piwf` does with `piwf show run_01m8`), or that end
    with a suffix (`piwf show …2mvr1rtt`, as piwf-top shows ids): exactly one of the two."""
    kind, prefix, suffix = payload["kind"], payload.get("prefix"), payload.get("suffix")
    if kind not in id_queries.ID_KINDS:
        raise BadRequest(f"ids.match: unknown kind {kind!r} (kinds: {', '.join(id_queries.ID_KINDS)})",
                         ctx.request.request_id)
    if prefix is None and suffix is None:
        raise BadRequest("ids.match: payload.prefix is required (or payload.suffix)", ctx.request.request_id)
    if prefix is not None and suffix is not None:
        raise BadRequest("ids.match: give payload.prefix or payload.suffix, not both", ctx.request.request_id)
    if not (prefix or suffix):
        raise BadRequest(f"ids.match: {'prefix' if prefix is not None else 'suffix'} must not be empty",
                         ctx.request.request_id)
    limit = min(payload.get("limit") or id_queries.ID_MATCH_DEFAULT, id_queries.ID_MATCH_MAX)
    if suffix is not None:
        matches, more = id_queries.match_id_ends(ctx.reader, kind, suffix, limit)
    else:
        assert prefix is not None  # exactly one of the two, checked above
        matches, more = id_queries.match_ids(ctx.reader, kind, prefix, limit)
    ctx.reply("accepted", receipt={"matches": matches, "more": more})
