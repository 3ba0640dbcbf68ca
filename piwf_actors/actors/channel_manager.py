"""`ChannelManager`: the configured channel profiles and the adapter actor of each.

Reads the configuration (`channels/config.py`) at start and on
`channel.reload`, starts one `ChannelAdapter` per profile that can start,
and supervises them one-for-one: an adapter that fails is started again
after a pause (1 s, as in the host this project reproduces) under a new
adapter epoch, which fences off anything the failed one still tries to
write and marks what it left `applying` as ambiguous. A broken profile or
file never stops the host: its reason is in `channel.status`.

Started by the host after the scheduler and stopped before it (so after and
before the writer); publishes its status on the host board ("channels").
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, safe_tell
from piwf_actors.actors.channel import ChannelAdapter
from piwf_actors.actors.channel_polling import ChannelHealth, ChannelRefused
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.channels.config import ChannelsConfig, Secret, load_channels
from piwf_actors.channels.registry import adapter_options, channel_module, update_order
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol.gateway_messages import ChannelsReloaded, ReloadChannels
from piwf_actors.store.commands.channels import ADAPTER_EXITED, HOST_RESTARTED

log = logging.getLogger(__name__)

RESTART_AFTER_S = 1.0


def stream_key(channel_type: str, token: Secret) -> str:
    """The update stream a profile reads: the bot, by a fingerprint of its token (not the token:
    a digest of a high-entropy secret gives nothing away). Another bot under the same profile name
    has update ids of its own, so it gets a cursor of its own."""
    digest = hashlib.sha256(b"piwf-channel-stream-v1\0" + token.reveal().encode()).hexdigest()[:20]
    return f"{channel_type}:{digest}"


@dataclass(frozen=True, slots=True)
class ManagerTick:
    pass


@dataclass
class _Running:
    ref: pykka.ActorRef[Any]
    fingerprint: str
    epoch: str


class ChannelManager(CoreActor):
    actor_name = "channels"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, config_dir: Path,
                 supervisor: pykka.ActorRef[Any] | None, board: HostBoard | None = None,
                 channel_options: Mapping[str, Mapping[str, Any]] | None = None, poll_timeout_s: float = 25.0,
                 load: Callable[[Path], ChannelsConfig] = load_channels) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._database = database
        self._config_dir = config_dir
        self._board = board
        # Per channel type: the settings its adapter makes its `options` of (`registry.adapter_options`).
        self._channel_options = dict(channel_options or {})
        self._poll_timeout_s = poll_timeout_s
        self._load = load
        self._config: ChannelsConfig | None = None
        self._running: dict[str, _Running] = {}
        self._restart_due: dict[str, float] = {}
        self._failures: dict[str, str] = {}
        self._problems: dict[str, str] = {}  # what a running adapter says is wrong
        self._refused: dict[str, str] = {}  # profiles that must not start again until a reload
        self._started_once: set[str] = set()
        self._ticker: Ticker | None = None
        self._stopping = False

    def on_start(self) -> None:
        """Runs in the manager's thread: reads the configuration and starts the adapters."""
        self._apply(self._read())
        self._ticker = Ticker(self.actor_ref, ManagerTick(), 0.5, "channels").start()

    def release_resources(self) -> None:
        self._stopping = True
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        for profile in list(self._running):
            self._stop_adapter(profile)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ActorFailed: self._adapter_failed, ReloadChannels: self._reload, ManagerTick: self._tick,
                ChannelHealth: self._health, ChannelRefused: self._refused_profile}

    # --- configuration ----------------------------------------------------------------------

    def _read(self) -> ChannelsConfig:
        config = self._load(self._config_dir)
        if config.file_error:
            log.warning("channels: %s", config.file_error)
        for profile, reason in sorted(config.errors.items()):
            log.warning("channel %s does not start: %s", profile, reason)
        return config

    def _apply(self, config: ChannelsConfig) -> None:
        """Stop profiles that went or changed, start those that are new or changed."""
        old = self._config
        self._config = config
        wanted = set(config.startable())
        for profile in list(self._running):
            if profile not in wanted or config.fingerprint(profile) != self._running[profile].fingerprint:
                self._stop_adapter(profile)
        for profile in list(self._restart_due):
            if profile not in wanted:
                del self._restart_due[profile]
        self._refused.clear()  # a reload is the person's word that the cause is gone
        for profile in sorted(wanted - set(self._running)):
            self._start_adapter(profile)
        if old is not None:
            log.info("channels reloaded: %s", ", ".join(sorted(self._running)) or "none running")
        self._publish()

    def _start_adapter(self, profile: str) -> None:
        assert self._config is not None
        settings, token = self._config.profiles[profile], self._config.tokens[profile]
        epoch = f"adapter-{uuid.uuid4().hex}"
        # The first adapter of a profile in this host finds what the previous host left in flight.
        reason = ADAPTER_EXITED if profile in self._started_once else HOST_RESTARTED
        module = channel_module(settings.channel_type)
        options = adapter_options(settings.channel_type, self._channel_options.get(settings.channel_type))
        ref = ChannelAdapter.start(
            self._writer, self._database, profile=settings,
            open_io=lambda: module.open_channel(settings, token, options),
            updates=update_order(settings.channel_type), adapter_epoch=epoch, start_reason=reason, manager=self.actor_ref,
            stream=stream_key(settings.channel_type, token), poll_timeout_s=self._poll_timeout_s,
            text_limit=getattr(module, "TEXT_LIMIT", 4096))
        self._started_once.add(profile)
        self._failures.pop(profile, None)
        self._problems.pop(profile, None)
        self._running[profile] = _Running(ref, self._config.fingerprint(profile), epoch)

    def _stop_adapter(self, profile: str) -> None:
        running = self._running.pop(profile, None)
        if running is None:
            return
        try:
            running.ref.stop(block=True, timeout=15)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass

    # --- supervision (one-for-one) -------------------------------------------------------------

    def _health(self, message: ChannelHealth) -> None:
        if message.profile not in self._running:
            return
        if message.problem is None:
            self._problems.pop(message.profile, None)
        else:
            self._problems[message.profile] = message.problem
        self._publish()

    def _refused_profile(self, message: ChannelRefused) -> None:
        """The adapter stops itself; it is not started again until `channel.reload`."""
        self._refused[message.profile] = message.reason
        self._failures[message.profile] = message.reason
        self._problems.pop(message.profile, None)
        self._restart_due.pop(message.profile, None)
        self._running.pop(message.profile, None)
        self._publish()

    def _adapter_failed(self, message: ActorFailed) -> None:
        for profile in list(self._running):
            if message.actor == f"channel {profile}":
                del self._running[profile]
                self._failures[profile] = message.reason
                if not self._stopping:
                    log.warning("channel %s failed (%s); starting it again in %g s", profile, message.reason,
                                RESTART_AFTER_S)
                    self._restart_due[profile] = time.monotonic() + RESTART_AFTER_S
                self._publish()
                return

    def _tick(self, _message: ManagerTick) -> None:
        now = time.monotonic()
        for profile, due in list(self._restart_due.items()):
            if due <= now and not self._stopping:
                del self._restart_due[profile]
                if (self._config is not None and profile in self._config.startable() and profile not in self._running
                        and profile not in self._refused):
                    self._start_adapter(profile)
                    self._publish()

    def _reload(self, message: ReloadChannels) -> None:
        self._apply(self._read())
        safe_tell(message.reply_to, ChannelsReloaded(message.token, self.status()))

    # --- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """{configured, config_dir, error?, profiles: [{profile, running, error?}]} (no secrets)."""
        config = self._config
        profiles = []
        names = sorted(set(config.profiles) | set(config.errors)) if config is not None else []
        for profile in names:
            entry: dict[str, Any] = {"profile": profile, "running": profile in self._running}
            reason = (config.errors.get(profile) if config is not None else None) or self._failures.get(profile)
            if reason and not entry["running"]:
                entry["error"] = reason
            if entry["running"] and profile in self._problems:
                entry["problem"] = self._problems[profile]
            profiles.append(entry)
        status: dict[str, Any] = {"configured": bool(config and config.configured), "config_dir": str(self._config_dir),
                                  "profiles": profiles}
        if config is not None and config.file_error:
            status["error"] = config.file_error
        return status

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish(Section.CHANNELS, self.status())
