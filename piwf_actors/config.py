"""Host configuration: one frozen record, built by `piwf-host` or an embedding app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piwf_actors.channels.registry import adapter_options
from piwf_actors.clock import TimerClock
from piwf_actors.http.address import parse_http_address
from piwf_actors.wire.limits import Limits
from piwf_actors.workflows.user_code import UserCodeLimits


@dataclass(frozen=True, slots=True)
class HostConfig:
    state_dir: str | Path | None = None  # None: $PIWF_STATE_DIR, $XDG_STATE_HOME/piwf, ~/.local/state/piwf
    # The database (piwf_actors.paths.parse_database_url): None: $PIWF_DATABASE_URL, else <state_dir>/state.db.
    database: str | None = None
    # On a database other hosts may name (not <state_dir>/state.db) whose lease another host holds: wait
    # as a standby and take over when that lease runs out (True), or refuse to start (False).
    standby: bool = True
    max_workers: int = 4
    lease_s: float = 15.0
    synchronous: str = "FULL"
    reap_grace_s: float = 3.0
    host_id: str | None = None
    claim_lease_s: float = 30.0
    warm_workers: int | None = None  # idle worker processes kept ready; default max_workers
    limits: Limits = field(default_factory=Limits)  # client socket limits (frame size, connections …)
    retention_days: float = 30.0  # finished runs older than this are pruned when the host is idle; 0 = never
    prune_every_s: float = 3600.0  # how often the idle host looks for runs to prune
    idempotency_days: float = 365.0  # client request records kept (after their runs) for replays; 0 = forever
    watchdog_grace_s: float = 5.0  # a node still running this long past its timeout_s is killed from outside
    worker_ready_timeout_s: float = 30.0  # a worker that sends nothing for this long after a launch is replaced
    # Decision channels: channels.toml and credentials.toml live here (None: $PIWF_CONFIG_DIR,
    # else $XDG_CONFIG_HOME/piwf, else ~/.config/piwf).
    config_dir: str | Path | None = None
    # Per channel type, what its adapter is told (channels/registry.py; docs/channels.md), as a plain mapping the
    # adapter checks: {"telegram": {"api_base": "http://127.0.0.1:8765"}} (Telegram's default base is
    # $PIWF_TELEGRAM_API_BASE, else https://api.telegram.org).
    channel_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    channel_poll_timeout_s: float = 25.0  # how long one long poll for channel updates waits
    # "host:port" where the Prometheus exporter listens (piwf_actors.metrics; port 0 picks a free one);
    # None: no exporter, no socket, no thread.
    metrics_address: str | None = None
    # `[HOST:]PORT` where the HTTP door listens (docs/http.md; the `http` extra): a bare port is 127.0.0.1
    # only, port 0 picks a free one; None: no HTTP door, no thread, no socket.
    http_address: str | None = None
    log_level: str = "WARNING"  # the workers' log level (piwf-host passes its --log-level)
    log_format: str = "text"  # text | json, for the workers (piwf-host passes its --log-format)
    # Projects whose `.piwf/workflows/*.py` schedules this host runs (piwf-host --project, repeatable), besides
    # those of $XDG_CONFIG_HOME/piwf/workflows/; `schedules=False` runs no schedule keeper at all.
    projects: tuple[str, ...] = ()
    schedules: bool = True
    # "host": contend for the host lease (active or standby). "runner": a runner host (docs/runners.md): holds
    # no host lease, claims runs from the shared queue (`database` must name it) under its own runner lease,
    # named `host_id` (default runner-<random>), and executes them in its own `max_workers` workers.
    role: str = "host"
    # The clock workflow timers run on (piwf_actors/clock.py): None is the system clock. Embedding only (no
    # piwf-host flag): the test kit (piwf_actors.testing) passes one it moves forward.
    timer_clock: TimerClock | None = None
    # OpenTelemetry traces of runs (the `otel` extra; docs/tracing.md): None traces nothing and loads no
    # opentelemetry; an application's TracerProvider; "global" (opentelemetry.trace.get_tracer_provider() at
    # start); "env" (a provider of the host's own, configured by the OTEL_* variables: what piwf-host uses).
    tracer_provider: Any = None
    # Workflow code the host runs itself (workflows/user_code.py; docs/workflows.md "Limits on workflow code
    # the host runs"): a concurrency key function (or a schedule's input function) gets `key_timeout_s`, executing one
    # workflow file `load_timeout_s`; a slower one is refused and its thread abandoned; while
    # `max_hung_user_code` such threads still run, every start that needs workflow code is refused.
    key_timeout_s: float = 5.0
    load_timeout_s: float = 30.0
    max_hung_user_code: int = 8

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        if self.lease_s <= 0:
            raise ValueError("lease_s must be positive")
        if self.retention_days < 0 or self.prune_every_s <= 0:
            raise ValueError("retention_days must be >= 0 and prune_every_s > 0")
        if self.idempotency_days < 0:
            raise ValueError("idempotency_days must be >= 0")
        if self.watchdog_grace_s < 0 or self.worker_ready_timeout_s <= 0:
            raise ValueError("watchdog_grace_s must be >= 0 and worker_ready_timeout_s > 0")
        if isinstance(self.projects, (str, Path)):
            raise ValueError("projects must be a sequence of project directories, not one path")
        object.__setattr__(self, "projects", tuple(str(project) for project in self.projects))
        if self.http_address is not None:
            parse_http_address(self.http_address)  # ValueError: one line naming the flag
        if self.role not in ("host", "runner"):
            raise ValueError(f"unknown role {self.role!r} (host or runner)")
        if self.synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"unknown synchronous mode {self.synchronous!r}")
        self.user_code_limits()  # checks the three limits
        options = {str(channel_type): dict(settings) for channel_type, settings in self.channel_options.items()}
        for channel_type, settings in options.items():
            try:
                adapter_options(channel_type, settings)  # imports only the adapters named here
            except LookupError as exc:
                raise ValueError(f"channel_options: {exc.args[0]}") from None
        object.__setattr__(self, "channel_options", options)

    def user_code_limits(self) -> UserCodeLimits:
        """The limits on workflow code this host runs (raises ValueError for a bad one)."""
        return UserCodeLimits(key_timeout_s=self.key_timeout_s, load_timeout_s=self.load_timeout_s,
                              max_hung=self.max_hung_user_code)
