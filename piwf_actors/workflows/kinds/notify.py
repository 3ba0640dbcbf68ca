"""notify: a message to the run's session outbox, and with an `audience` to the chats of the
channels that route it (at most once each, docs/channels.md). Its output is `{message}`.

Pure: it runs again only when its result was not committed, and only a committed result is
delivered; the worker pipelines it (worker/executors/notify.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, optional_audience, text_or_callable
from piwf_actors.workflows.kinds.summary import text_of
from piwf_actors.workflows.model import NodeSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class NotifySpec(NodeSpec):
    """Delivers a message to the run's session outbox, and with an `audience` to the chats of the
    channels that route it (at most once each, docs/channels.md). Pure: it runs again only when its
    result was not committed, and only a committed result is delivered."""

    kind: ClassVar[str] = "notify"
    message: Any  # str | Callback
    audience: str | None = None


def notify(message: Any, audience: str | None = None) -> NotifySpec:
    """Deliver `message` (a string or a callable of ctx) to the run's session outbox; with an
    `audience`, also to the chats of the channel profiles that route it (channels.toml), once."""
    return NotifySpec(message=message, audience=audience)


def check(node_id: str, spec: NotifySpec) -> dict[str, Any]:
    text_or_callable(node_id, "message", spec.message)
    optional_audience(node_id, spec.audience)
    return common(node_id, spec)


def describe(spec: NotifySpec) -> list[str]:
    return [text_of(spec.message), *([] if spec.audience is None else [f"to {spec.audience}"])]


KIND = NodeKind(spec=NotifySpec, check=check, describe=describe, drawing=Drawing(('>"', '"]'), "note"))
