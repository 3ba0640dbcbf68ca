"""The messages the client gateway hands to other actors of the host, and the answers they send back.

A leaf: the gateway's operations (`protocol.catalog`) build these without
importing `actors/`, and the actors that receive them (`ChannelManager`,
`ScheduleKeeper`) import them from here. Frozen dataclasses, told between
actors of one process (never on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pykka


@dataclass(frozen=True, slots=True)
class ReloadChannels:
    """Re-read the files and restart changed profiles; answered to `reply_to` with ChannelsReloaded."""

    reply_to: pykka.ActorRef[Any] | None
    token: str


@dataclass(frozen=True, slots=True)
class ChannelsReloaded:
    """The channel manager's answer to ReloadChannels: its status once the files are applied."""

    token: str
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TriggerSchedule:
    """From the gateway: fire schedule `name` now. The writer answers `reply_to` under `token`."""

    name: str
    token: str
    client_args: dict[str, Any]
    reply_to: pykka.ActorRef[Any]
