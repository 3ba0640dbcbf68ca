"""The client operations: one table, the single source of what each operation takes and does.

Each topic module below registers its operations, with their catalog
entries, by decorator (`registry.operation`, `registry.write_operation`);
this package imports every one of them by name — a new topic is one more
line here, never a scan of the folder — and exposes the finished table as
`OPERATIONS`. The gateway dispatches from it and checks payloads against it;
the embedding API builds its write commands through it (`write_command`);
tests check docs/protocol.md against it.
"""

from __future__ import annotations

from collections.abc import Mapping

from piwf_actors.protocol.catalog import (
    channels,
    content,
    events,
    host,
    http_tokens,
    interactions,
    messages,
    resources,
    runs,
    schedules,
    state,
    watches,
)
from piwf_actors.protocol.catalog.registry import TABLE, BuildEnv, Operation
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.protocol.payloads import check_payload
from piwf_actors.store.requests import WriteCommand

#: The topic modules, in the order they fill the table.
TOPICS = (host, runs, interactions, messages, state, schedules, resources, channels, content, watches, http_tokens,
          events)

#: Every client operation by name (read-only).
OPERATIONS: Mapping[str, Operation] = TABLE


def write_command(request: Request, env: BuildEnv) -> WriteCommand:
    """The write command of `request`, built as the gateway builds it: the payload checked against the
    operation's entry (`check_payload`), then the operation's own builder. Raises BadRequest for a
    payload or envelope that does not fit, or an operation that builds no write command."""
    operation = OPERATIONS.get(request.operation)
    if operation is None or operation.build is None:
        raise BadRequest(f"{request.operation} is not a write operation", request.request_id)
    return operation.build(env, request, check_payload(request, operation))


__all__ = ["OPERATIONS", "TOPICS", "BuildEnv", "Operation", "write_command"]
