"""The host's wiring: the functions that start one host's actors in dependency order.

`start_parts(config)` starts them — lock file, store check, supervisor
(`actors/supervisor.py`), writer, lease, orphan reaping, then the rest — and
returns what it started (`HostParts`); `piwf_actors.embedding.start_host`
wraps that in a `HostHandle`. Stopping (`HostParts.shut_down`) goes in
reverse, writer last, lock file after it. Nothing here is global: two hosts
on two state directories can run in one process beside an application's own
pykka actors, and stopping one never touches anything it did not start (no
`ActorRegistry.shut_down()`).

Standby: on a database that is not the state directory's own (`--database`,
which several hosts may name) another host may hold the lease. Then the host
starts as a **standby**: writer, gateway (reads only; mutations are answered
`unavailable` with a hint) and a `StandbyWatch` that takes the lease once it
runs out. The supervisor then starts the active parts (`_activate`, the same
function an active start uses) on a short-lived takeover thread it owns, and
turns the gateway active.

Runner host (`config.role == "runner"`, docs/runners.md): no host lease at
all. It takes a runner lease (`RunnerLease`), stamps its runner identity on
the writer handle, and starts a scheduler without the host's duties (no
reconciles; no housekeeper, so no deadlines or pruning) and a gateway that
serves reads (`_start_runner`). The active host watches the
runner leases (`RunnerWatch`) and recovers the work of a runner whose lease
is gone.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, Ping, safe_tell
from piwf_actors.actors.channel_manager import ChannelManager
from piwf_actors.actors.event_keeper import EventKeeper
from piwf_actors.actors.gateway import BecomeActive, ClientGateway
from piwf_actors.actors.hostlock import HostLock
from piwf_actors.actors.housekeeping import Housekeeper
from piwf_actors.actors.http_door import HttpDoor
from piwf_actors.actors.lease import HostLease, LeaseClaim, acquire_lease, new_host_id
from piwf_actors.actors.runner_lease import RunnerLease, acquire_runner_lease, new_runner_id
from piwf_actors.actors.runner_watch import RunnerWatch
from piwf_actors.actors.scheduler import Scheduler
from piwf_actors.actors.schedules import ScheduleKeeper
from piwf_actors.actors.standby import LeaseTaken, StandbyWatch
from piwf_actors.actors.supervisor import HostParts, HostSupervisor, Shutdown, stop_ref
from piwf_actors.actors.tracing import check_tracer_setting, start_run_tracer
from piwf_actors.actors.writer import WriterHandle, start_writer
from piwf_actors.board import Section
from piwf_actors.channels.config import default_config_dir
from piwf_actors.config import HostConfig
from piwf_actors.errors import HostAlreadyRunning, HostError, StoreRefused
from piwf_actors.http.address import parse_http_address, require_http_extra
from piwf_actors.http.hook_config import HookConfigError, load_hooks
from piwf_actors.paths import StatePaths, ensure_private_dir
from piwf_actors.store import queries
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.reader import StoreReader
from piwf_actors.tracing.ids import TRACE_CONTEXT_ENV
from piwf_actors.worker.termination import is_same_process, machine_identity, terminate_tree
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.user_code import UserCode

log = logging.getLogger(__name__)


def start_parts(config: HostConfig) -> tuple[StatePaths, HostParts, pykka.ActorRef[Any]]:
    """Start a host's parts on `config.state_dir` in dependency order; (paths, parts, supervisor).

    What `piwf_actors.embedding.start_host` wraps in a `HostHandle`. Raises HostAlreadyRunning,
    StoreRefused, UnsafePath or LeaseLost and then leaves nothing running. Runs in the caller's thread.
    """
    try:
        paths = StatePaths.resolve(config.state_dir, config.database)
    except ValueError as exc:
        raise StoreRefused(str(config.database), str(exc)) from None
    if config.role == "runner" and paths.default_database:
        raise HostError("a runner host needs --database naming the database the active host uses "
                        "(it shares that host's queue; see docs/runners.md)")
    ensure_private_dir(paths.root)
    parts = HostParts(resolver=WorkflowResolver(user_code=UserCode(config.user_code_limits())))
    parts.lock = HostLock.acquire(paths.lock, str(paths.root))
    supervisor: pykka.ActorRef[Any] | None = None
    try:
        options = StoreOptions(synchronous=config.synchronous.upper())
        open_store(paths.database, options).close()
        supervisor = HostSupervisor.start(parts, functools.partial(_take_over, parts, config, paths))
        if config.metrics_address is not None:
            from piwf_actors.metrics import HostMetrics

            parts.metrics = HostMetrics(config.metrics_address, paths.database, options, parts.board)
        parts.writer = start_writer(paths.database, options, supervisor=supervisor, board=parts.board,
                                    batch_observer=parts.metrics.observe_batch if parts.metrics else None,
                                    timer_clock=config.timer_clock)
        _require_started("writer", parts.writer.ref)
        if config.tracer_provider is not None:
            check_tracer_setting(config.tracer_provider)  # the tracer starts when the host is active
        if config.role == "runner":
            _start_runner(parts, config, paths, supervisor)
            if parts.metrics is not None:
                parts.metrics.start()
            assert parts.runner is not None
            log.info("runner host %s started at runner lease epoch %d (pid %d, %d worker(s), state %s, database %s)",
                     parts.runner.runner_id, parts.runner.epoch, parts.runner.pid, config.max_workers, paths.root,
                     paths.database)
            return paths, parts, supervisor
        host_id = config.host_id or new_host_id()
        reader = StoreReader(paths.database, options)
        try:
            claim = acquire_lease(parts.writer, lambda: queries.lease_holder(reader), lease_s=config.lease_s,
                                  state_dir=str(paths.root), host_id=host_id,
                                  lock_guards_database=paths.default_database)
        except HostAlreadyRunning:
            if paths.default_database or not config.standby:
                raise
            claim = None
        finally:
            reader.close()
        if claim is not None:
            channels, keeper = _activate(parts, config, paths, claim, supervisor)
            _start_gateway(parts, config, paths, supervisor, channels=channels, schedules=keeper, standby=False)
        else:
            parts.board.publish(Section.ROLE, {"role": "standby", "host_id": host_id})
            _start_gateway(parts, config, paths, supervisor, channels=None, schedules=None, standby=True)
            watch = StandbyWatch.start(parts.writer, paths.database, supervisor=supervisor, host_id=host_id,
                                       lease_s=config.lease_s, state_dir=str(paths.root), board=parts.board)
            parts.actors.append(("standby", watch))
            _require_started("standby", watch)
        if parts.metrics is not None:
            parts.metrics.start()  # after every actor: a scrape sees the host whole
        # Logged once everything runs: a client may connect from this line on.
        if claim is not None:
            log.info("host started at epoch %d (pid %d, state %s)", claim.epoch, claim.pid, paths.root)
        else:
            log.info("host started as standby %s (pid %d, state %s, database %s); it takes over when the active "
                     "host's lease runs out", host_id, os.getpid(), paths.root, paths.database)
    except BaseException:
        parts.shut_down("start-up failed")
        if supervisor is not None:
            stop_ref("supervisor", supervisor)
        raise
    return paths, parts, supervisor


def _activate(parts: HostParts, config: HostConfig, paths: StatePaths, claim: LeaseClaim,
              supervisor: pykka.ActorRef[Any]) -> tuple[pykka.ActorRef[Any], pykka.ActorRef[Any] | None]:
    """Start what only the lease holder runs, in order: lease renewal, orphan reaping, recovery of
    earlier hosts' runs, the waits that came due meanwhile, scheduler, housekeeper (deadlines, pruning), runner watch, channels,
    schedules. Returns the channel manager and the schedule keeper (None when `config.schedules` is
    off): the gateway needs them.

    Runs in start_host's thread, or in a standby's takeover thread; either may block on the writer.
    """
    assert parts.writer is not None
    _start_tracer(parts, config, paths)
    parts.claim = claim
    parts.writer.advance_epoch(claim.epoch)  # the one handle every part holds stamps the epoch from now on
    parts.lease = HostLease.start(parts.writer, claim, supervisor=supervisor, board=parts.board,
                                  claim_lease_s=config.claim_lease_s)
    _require_started("lease", parts.lease)
    reader = StoreReader(paths.database)
    try:
        reap_orphans(reader, parts.writer, grace_s=config.reap_grace_s, epoch=claim.epoch)
        recovered = parts.writer.call("host.recover", {})["runs"]
        if recovered:
            log.info("recovered %d run(s) from earlier hosts: %s", len(recovered),
                     ", ".join(f"{run_id} → {status}" for run_id, status in recovered.items()))
        reconciles = parts.writer.call("resource.recover", {})
        if reconciles:
            log.info("reconciles interrupted by an earlier host, due again: %s", ", ".join(reconciles))
        # Sleeps and message timeouts that came due while no host ran wake before the scheduler
        # starts: their runs are queued among the woken, in wake order, ahead of every fresh run.
        woken = 0
        while True:
            answer = parts.writer.call("waits.wake", {})
            woken += len(answer["woken"])
            if not answer["more"]:
                break
        if woken:
            log.info("woke %d wait(s) that came due while no host ran", woken)
    finally:
        reader.close()
    _start_scheduler(parts, config, paths, supervisor, host_duties=True)
    # After the scheduler: it reads the scheduler's board section (is any run active?).
    housekeeper = Housekeeper.start(parts.writer, paths.database, supervisor=supervisor, board=parts.board,
                                    retention_days=config.retention_days, prune_every_s=config.prune_every_s,
                                    idempotency_days=config.idempotency_days, timer_clock=config.timer_clock)
    parts.actors.append(("housekeeper", housekeeper))
    _require_started("housekeeper", housekeeper)
    # Runner hosts that share the queue: their leases are watched, the work of a dead one recovered.
    watch = RunnerWatch.start(parts.writer, paths.database, supervisor=supervisor, board=parts.board,
                              poll_s=min(max(config.lease_s / 10, 0.05), 0.5), grace_s=config.reap_grace_s)
    parts.actors.append(("runner-watch", watch))
    _require_started("runner-watch", watch)
    channels = ChannelManager.start(
        parts.writer, paths.database,
        config_dir=Path(config.config_dir) if config.config_dir is not None else default_config_dir(),
        supervisor=supervisor, board=parts.board, poll_timeout_s=config.channel_poll_timeout_s,
        channel_options=config.channel_options)
    parts.actors.append(("channels", channels))
    _require_started("channels", channels)
    keeper = None
    if config.schedules:  # only the active host fires schedules (actors/schedules.py)
        keeper = ScheduleKeeper.start(parts.writer, paths.database, projects=config.projects,
                                      supervisor=supervisor, board=parts.board, resolver=parts.resolver,
                                      # fires are timer time (piwf_actors/clock.py)
                                      clock=config.timer_clock.now if config.timer_clock else time.time)
        parts.actors.append(("schedules", keeper))
        _require_started("schedules", keeper)
        # Runs that events start (actors/event_keeper.py): the same directories, the same switch.
        events = EventKeeper.start(parts.writer, paths.database, projects=config.projects, supervisor=supervisor,
                                   resolver=parts.resolver,
                                   # batches fall due on timer time (piwf_actors/clock.py)
                                   clock=config.timer_clock.now if config.timer_clock else time.time)
        parts.actors.append(("events", events))
        _require_started("events", events)
    parts.board.publish(Section.ROLE, {"role": "active", "host_id": claim.host_id})
    parts.active.set()
    return channels, keeper


def _start_tracer(parts: HostParts, config: HostConfig, paths: StatePaths) -> None:
    """The run tracer (when `config.tracer_provider` is set), started when the host becomes active (or a
    runner host starts), before any part that commits a run's events. Its floor is then: spans that ended
    before were the earlier host's to emit, so a standby that takes over days after it started does not
    emit again what the old active host exported. (`start_parts` checks the setting before: a standby
    with a bad one is refused at its start, not at its takeover.)"""
    assert parts.writer is not None
    if config.tracer_provider is None:
        return
    tracer = start_run_tracer(parts.writer.ref, paths.database, config.tracer_provider)
    parts.actors.append(("tracer", tracer))
    _require_started("tracer", tracer)


def _start_scheduler(parts: HostParts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any], *,
                     host_duties: bool) -> None:
    """The scheduler and its worker slots: the active host's (`host_duties`: also reconciles), or a runner
    host's (runs only; it looks at the shared queue every 0.1 s, since the runs other hosts queue send it no
    change notice)."""
    assert parts.writer is not None
    scheduler = Scheduler.start(parts.writer, paths.database, max_workers=config.max_workers,
                                supervisor=supervisor, claim_lease_s=config.claim_lease_s,
                                warm_workers=config.warm_workers, grace_s=config.reap_grace_s,
                                board=parts.board, watchdog_grace_s=config.watchdog_grace_s,
                                worker_ready_timeout_s=config.worker_ready_timeout_s,
                                worker_log_level=config.log_level, worker_log_format=config.log_format,
                                host_duties=host_duties, tick_s=0.5 if host_duties else 0.1,
                                worker_env=_worker_env(config))
    parts.actors.append(("scheduler", scheduler))
    _require_started("scheduler", scheduler)


def _worker_env(config: HostConfig) -> dict[str, str] | None:
    """Variables added to the workers' environment: a test's timer clock (retry back-offs follow it:
    piwf_actors/clock.py), and, when the host traces, that nodes get their trace context (docs/tracing.md)."""
    env = dict(config.timer_clock.worker_env()) if config.timer_clock else {}
    if config.tracer_provider is not None:
        env[TRACE_CONTEXT_ENV] = "1"
    return env or None


def _start_runner(parts: HostParts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any]) -> None:
    """A runner host's parts, in order: its runner lease (taken here, renewed by `RunnerLease`), the writer
    handle stamped with its runner identity, the scheduler (runs only), the gateway (reads only).
    Nothing of the active host's: no host lease, recovery, reaping, housekeeper (deadlines, pruning),
    channels or schedules."""
    assert parts.writer is not None
    claim = acquire_runner_lease(parts.writer, runner_id=config.host_id or new_runner_id(), lease_s=config.lease_s,
                                 max_workers=config.max_workers, state_dir=str(paths.root))
    parts.runner = claim
    parts.writer.as_runner(claim.runner_id, claim.epoch)
    _start_tracer(parts, config, paths)
    parts.lease = RunnerLease.start(parts.writer, claim, supervisor=supervisor, board=parts.board)
    _require_started("runner-lease", parts.lease)
    parts.board.publish(Section.ROLE, {"role": "runner", "host_id": claim.runner_id})
    _start_scheduler(parts, config, paths, supervisor, host_duties=False)
    _start_gateway(parts, config, paths, supervisor, channels=None, schedules=None, standby=True, runner=True)


def _start_gateway(parts: HostParts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any], *,
                   channels: pykka.ActorRef[Any] | None, schedules: pykka.ActorRef[Any] | None,
                   standby: bool, runner: bool = False) -> None:
    assert parts.writer is not None
    gateway = ClientGateway.start(
        parts.writer, paths.database, paths.socket, host_epoch=parts.claim.epoch if parts.claim else 0,
        supervisor=supervisor, board=parts.board, limits=config.limits, resolver=parts.resolver,
        channels=channels, schedules=schedules, shutdown=lambda reason: supervisor.tell(Shutdown(reason)),
        standby=standby, runner=runner, timer_clock=config.timer_clock)
    parts.actors.append(("gateway", gateway))
    _require_started("gateway", gateway)
    if config.http_address is not None:
        try:
            require_http_extra()
        except ImportError as exc:
            raise HostError(str(exc)) from None
        # After the gateway: the door hands it every request (a standby's serves reads only).
        try:
            hooks = load_hooks(paths.root)  # the state directory's hooks.toml and secret files
        except HookConfigError as err:
            raise HostError(f"webhooks: {err}") from None
        door = HttpDoor.start(gateway, paths.database, parse_http_address(config.http_address), supervisor=supervisor,
                              hooks=hooks)
        parts.actors.append(("http", door))
        _require_started("http", door)


def _take_over(parts: HostParts, config: HostConfig, paths: StatePaths, message: LeaseTaken,
               supervisor: pykka.ActorRef[Any]) -> None:
    """A standby took the lease: start the active parts, then turn the gateway active.

    Runs on the supervisor's takeover thread, holding the stop lock (a stop
    waits, then stops all of it). A failure here stops the host: it holds a
    lease it cannot serve; the stop gives it back.
    """
    claim = message.claim
    try:
        with parts.stop_lock:
            if parts.stopped.is_set() or parts.stop_reason is not None:
                log.info("took the lease at epoch %d while stopping; giving it back", claim.epoch)
                if parts.writer is not None:
                    parts.writer.execute("lease.release", claim.identity_args(), timeout=5)
                return
            channels, keeper = _activate(parts, config, paths, claim, supervisor)
            for name, ref in list(parts.actors):
                if name == "gateway":
                    safe_tell(ref, BecomeActive(claim.epoch, channels, keeper))
                elif name == "standby":  # the watch has done its job
                    parts.actors.remove((name, ref))
                    stop_ref(name, ref)
        log.warning("host active at epoch %d: took over from %s (epoch %d)", claim.epoch,
                    message.previous_host_id or "no host", message.previous_epoch)
    except Exception as exc:
        log.exception("taking over failed")
        safe_tell(supervisor, ActorFailed("takeover", f"{type(exc).__name__}: {exc}"))


def _require_started(name: str, ref: pykka.ActorRef[Any]) -> None:
    try:
        ref.ask(Ping(), timeout=30)
    except pykka.ActorDeadError:
        raise HostError(f"{name} failed to start (see the log)") from None


def reap_orphans(reader: StoreReader, writer: WriterHandle, *, grace_s: float, epoch: int | None = None,
                 machine_id: str | None = None) -> int:
    """Terminate every registered child an earlier host left running on this machine; return how many.

    Each child is matched by (pid, create_time), so a pid reused by an
    unrelated process is never signalled, and by the machine that
    registered it (`machine_id`, default this one's): a pid registered on
    another machine means nothing here, so such a child is only released
    (the runs it served are recovered all the same) and never signalled.
    A row without a machine (registered before schema v7) is from this
    machine: the state directory's own database was the only one then.
    A runner host's children are not an earlier host's: they are left to
    the runner while its lease lives and to `RunnerWatch` after.
    Children registered at `epoch` or later are not an earlier host's and
    are left alone. Runs before the scheduler starts.
    """
    here = machine_identity() if machine_id is None else machine_id
    reaped = 0
    for child in queries.unreleased_children(reader):
        if epoch is not None and child["host_epoch"] >= epoch:
            continue
        if child["runner_id"] is not None:
            continue  # a runner host's: its own while its lease lives, then RunnerWatch's (runners.recover)
        elsewhere = child["machine_id"] not in (None, here)
        if elsewhere:
            log.info("released %s pid %d (run %s) of machine %s without signalling it: not this machine",
                     child["kind"], child["pid"], child["run_id"], child["machine_id"])
        elif is_same_process(child["pid"], child["create_time"]):
            terminate_tree(child["pid"], child["create_time"], grace_s=grace_s)
            reaped += 1
            log.info("reaped orphan %s pid %d (run %s)", child["kind"], child["pid"], child["run_id"])
        writer.call("child.release", {"pid": child["pid"], "create_time": child["create_time"],
                                      "run_id": child["run_id"]})
    return reaped
