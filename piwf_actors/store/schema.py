"""The durable schema, as peewee models.

Models are deliberately unbound (no global database): two hosts can live in
one process, each with its own file, so every query is executed through an
explicit database (`db.execute(query)`) or connection. The models are the
single description of the tables; `migrations.py` creates them.

The tables of six areas have modules of their own, listed here with the rest:
the run counters (`schema_counts.py`), the chat channels (`schema_channels.py`),
schedules (`schema_schedules.py`), the HTTP door's tokens (`schema_http.py`),
resource managers (`schema_resources.py`) and waiting runs (`schema_waits.py`).

Times are REAL seconds since the epoch. JSON documents are stored as text
(canonical JSON, readable with the sqlite3 shell); large payloads live once
in `blob`, keyed by sha256.
"""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base
from piwf_actors.store.schema_channels import (  # ChannelCursor: the v3 table migrations still name
    ChannelAdapterEpoch,
    ChannelChatMove,
    ChannelCursor,  # noqa: F401
    ChannelEffect,
    ChannelStream,
)
from piwf_actors.store.schema_counts import RUN_COUNT_TRIGGERS, RunCount  # noqa: F401  (RUN_COUNT_TRIGGERS: read as schema.*)
from piwf_actors.store.schema_events import EVENT_MODELS
from piwf_actors.store.schema_http import HttpSession, HttpToken
from piwf_actors.store.schema_rates import FLOW_MODELS, FlowTimer
from piwf_actors.store.schema_resources import RESOURCE_MODELS
from piwf_actors.store.schema_schedules import ScheduleFire, ScheduleRecord
from piwf_actors.store.schema_waits import RunMessage, RunWait


class HostState(Base):
    """The single host lease row (id = 1)."""

    id = pw.IntegerField(primary_key=True)
    epoch = pw.IntegerField(default=0)
    host_id = pw.TextField(null=True)
    token_hash = pw.TextField(null=True)
    pid = pw.IntegerField(null=True)
    process_start_identity = pw.TextField(null=True)
    started_at = pw.FloatField(null=True)
    heartbeat_at = pw.FloatField(null=True)
    expires_at = pw.FloatField(null=True)
    released_at = pw.FloatField(null=True)

    class Meta:
        table_name = "host_state"


class HostCommand(Base):
    """A client command recorded for idempotency (client id, idempotency key)."""

    client_id = pw.TextField()
    idempotency_key = pw.TextField()
    request_id = pw.TextField()
    operation = pw.TextField()
    run_id = pw.TextField(null=True)
    fingerprint = pw.TextField()
    outcome = pw.TextField()
    revision = pw.IntegerField(null=True)
    receipt = pw.TextField(null=True)
    error = pw.TextField(null=True)
    host_epoch = pw.IntegerField()
    created_at = pw.FloatField()

    class Meta:
        table_name = "host_command"
        primary_key = pw.CompositeKey("client_id", "idempotency_key")
        indexes = ((("client_id", "request_id"), True), (("created_at",), False))


class Blob(Base):
    sha256 = pw.TextField(primary_key=True)
    size = pw.IntegerField()
    data = pw.BlobField()
    created_at = pw.FloatField()

    class Meta:
        table_name = "blob"


class Run(Base):
    run_id = pw.TextField(primary_key=True)
    workflow = pw.TextField()
    workflow_path = pw.TextField(null=True)
    workflow_attr = pw.TextField(null=True)
    definition_digest = pw.TextField(null=True)
    source_sha256 = pw.TextField(null=True)
    # A value is kept inline as canonical JSON (`*_json`) when small (schema v6), else as a blob
    # (`*_sha256`): see store/values.py.
    input_sha256 = pw.TextField(null=True)
    output_sha256 = pw.TextField(null=True)
    input_json = pw.TextField(null=True)
    output_json = pw.TextField(null=True)
    project_path = pw.TextField(null=True)
    session_id = pw.TextField(null=True)
    parent_run_id = pw.TextField(null=True)
    status = pw.TextField()
    park_reason = pw.TextField(null=True)
    park_detail = pw.TextField(null=True)
    error_code = pw.TextField(null=True)
    error_message = pw.TextField(null=True)
    current_node = pw.TextField(null=True)
    steps = pw.IntegerField(default=0)
    pause_requested = pw.BooleanField(default=False)
    cancel_requested = pw.BooleanField(default=False)
    revision = pw.IntegerField(default=1)
    # Bumped by every accepted worker transition only: the fence a worker's
    # `expected_revision` is checked against. Client operations (pause,
    # cancel) change `revision` but must not invalidate the worker's view.
    progress = pw.IntegerField(default=0)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()
    finished_at = pw.FloatField(null=True)
    # Claim order of a queued run (schema v2): 0 = a submission waits for
    # validation, 1 = woken (answer, deadline, resume, requeue), 2 = fresh;
    # within a class, the time it entered the queue.
    queue_class = pw.IntegerField(default=2, constraints=[pw.SQL("DEFAULT 2")])
    queued_at = pw.FloatField(null=True)
    # Launches in a row whose worker never became ready (schema v2).
    start_failures = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # The last claim generation handed out (grows on every claim; schema v6, was run_generation).
    generation = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # Schema v14 (docs/durability.md "Waiting, children and flow control"). Fresh runs are claimed
    # higher `priority` first, after the classes before them. A run with a `concurrency_key` counts
    # against `concurrency_max` active runs of that key (its workflow's `limit`). A child run names
    # the node and wait of its parent that started it (`parent_node_id` set: `parent_run_id` is then
    # its parent; without it `parent_run_id` is the run a restart came from), its index there, and
    # the fan-out's `max_parallel` (`fanout_max`, counted per `parent_wait_id`). `copied_from`: a
    # child of a restarted parent that re-used the finished child of the run restarted.
    priority = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    concurrency_key = pw.TextField(null=True)
    concurrency_max = pw.IntegerField(null=True)
    parent_node_id = pw.TextField(null=True)
    parent_wait_id = pw.TextField(null=True)
    child_index = pw.IntegerField(null=True)
    fanout_max = pw.IntegerField(null=True)
    copied_from = pw.TextField(null=True)
    # What a held run (queue_class 3) waits for: `concurrency_key:<key>`, `parent_wait_id:<wait>` or
    # `parent_run_id:<run>` (a paused parent); what frees that lets it go (store/commands/holds.py).
    held_by = pw.TextField(null=True)
    # Schema v16: the blob of the definition's graph as data (workflows/graph_data.py), stored when the
    # run starts, so drawing the run (`run.graph`, `piwf graph RUN`, piwf-top) runs none of its code.
    # Equal definitions share one blob. NULL: a run stored before v16 (drawn from the nodes it reached).
    graph_sha256 = pw.TextField(null=True)
    # Schema v20 (workflows/rate_limits.py): a fresh run with a `rate_key` starts only while fewer than
    # `rate_max` runs of that key started in the last `rate_per_s` seconds (store/rates.py).
    rate_key = pw.TextField(null=True)
    rate_max = pw.IntegerField(null=True)
    rate_per_s = pw.FloatField(null=True)

    class Meta:
        table_name = "run"
        indexes = ((("status", "created_at"), False), (("finished_at",), False), (("created_at",), False))


class RunnerHost(Base):
    """A runner host's lease (schema v10, docs/runners.md): one row per runner id, its epoch grows
    with every start; renewed every third of its length; fences every write the runner sends."""

    runner_id = pw.TextField(primary_key=True)
    epoch = pw.IntegerField()
    token_hash = pw.TextField()
    pid = pw.IntegerField()
    process_start_identity = pw.TextField(null=True)
    machine_id = pw.TextField(null=True)
    state_dir = pw.TextField(null=True)
    max_workers = pw.IntegerField()
    started_at = pw.FloatField()
    heartbeat_at = pw.FloatField()
    expires_at = pw.FloatField()
    released_at = pw.FloatField(null=True)

    class Meta:
        table_name = "runner_host"


class RunClaim(Base):
    """The current claim on an active run: the scheduler's fencing record."""

    run_id = pw.TextField(primary_key=True)
    claim_token_hash = pw.TextField()
    generation = pw.IntegerField()
    launch_id = pw.TextField()
    host_epoch = pw.IntegerField()
    claimed_at = pw.FloatField()
    expires_at = pw.FloatField()
    progress_at_claim = pw.IntegerField(default=0)
    # Schema v10: a claim taken by a runner host (docs/runners.md) names the runner and the epoch of
    # its runner lease; it is fenced by that lease instead of the host epoch. NULL: the active host's.
    runner_id = pw.TextField(null=True)
    runner_lease_epoch = pw.IntegerField(null=True)

    class Meta:
        table_name = "run_claim"


class NodeAttempt(Base):
    attempt_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    node_id = pw.TextField()
    attempt_no = pw.IntegerField()
    step = pw.IntegerField()
    status = pw.TextField()  # running | succeeded | failed | interrupted
    outcome = pw.TextField(null=True)
    output_sha256 = pw.TextField(null=True)
    output_json = pw.TextField(null=True)  # inline when small (schema v6)
    error_code = pw.TextField(null=True)
    error_message = pw.TextField(null=True)
    generation = pw.IntegerField()
    started_at = pw.FloatField()
    finished_at = pw.FloatField(null=True)
    # Schema v4: the user's frames of a node that raised (bounded), and, for an attempt
    # copied into a run restarted from a later node, the parent's attempt it stands for.
    traceback = pw.TextField(null=True)
    copied_from = pw.TextField(null=True)
    # Schema v10: who executed the attempt: the host id of the active host, or a runner host's id.
    executed_by = pw.TextField(null=True)

    class Meta:
        table_name = "node_attempt"
        # A rowid table on purpose: the metrics exporter follows new attempts by rowid.
        indexes = ((("run_id", "step"), False),)


class RunEvent(Base):
    run_id = pw.TextField()
    seq = pw.IntegerField()
    kind = pw.TextField()
    node_id = pw.TextField(null=True)
    attempt_id = pw.TextField(null=True)
    payload = pw.TextField(null=True)
    created_at = pw.FloatField()

    class Meta:
        table_name = "run_event"
        primary_key = pw.CompositeKey("run_id", "seq")
        # Rows live in the primary-key b-tree itself: one b-tree per insert, not two.
        without_rowid = True


class RunWorker(Base):
    worker_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    generation = pw.IntegerField()
    launch_id = pw.TextField()
    host_epoch = pw.IntegerField()
    pid = pw.IntegerField(null=True)
    process_create_time = pw.FloatField(null=True)
    status = pw.TextField()  # starting | live | exited | orphaned
    outcome = pw.TextField(null=True)
    exit_code = pw.IntegerField(null=True)
    diagnostic = pw.TextField(null=True)
    started_at = pw.FloatField()
    ended_at = pw.FloatField(null=True)
    runner_id = pw.TextField(null=True)  # schema v10: the runner host whose worker this is (NULL: a host's)

    class Meta:
        table_name = "run_worker"
        indexes = ((("run_id",), False),)


class ChildProcess(Base):
    """Every child process the host started, for exact orphan reaping."""

    pid = pw.IntegerField()
    create_time = pw.FloatField()
    kind = pw.TextField()
    run_id = pw.TextField(null=True)
    host_epoch = pw.IntegerField()
    registered_at = pw.FloatField()
    released_at = pw.FloatField(null=True)
    # Where it runs (runner.termination.machine_identity); NULL: registered before v7, on the
    # machine of the state directory's own database.
    machine_id = pw.TextField(null=True)
    # Schema v10: a runner host's child (its runner id and lease epoch); NULL: a host's.
    runner_id = pw.TextField(null=True)
    runner_lease_epoch = pw.IntegerField(null=True)

    class Meta:
        table_name = "child_process"
        primary_key = pw.CompositeKey("pid", "create_time")


class WorkerMessage(Base):
    """A worker message recorded for idempotency (launch id, message id)."""

    launch_id = pw.TextField()
    message_id = pw.TextField()
    run_id = pw.TextField()
    generation = pw.IntegerField()
    kind = pw.TextField()
    fingerprint = pw.TextField()
    response = pw.TextField()  # holds msgpack bytes (SQLite keeps them as a BLOB value; BYTEA on PostgreSQL)
    created_at = pw.FloatField()

    class Meta:
        table_name = "worker_message"
        primary_key = pw.CompositeKey("launch_id", "message_id")
        without_rowid = True


class Effect(Base):
    effect_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    node_id = pw.TextField()
    attempt_id = pw.TextField()
    status = pw.TextField()  # applying | applied | failed | ambiguous | replaced
    idempotent = pw.BooleanField()
    output_sha256 = pw.TextField(null=True)
    error = pw.TextField(null=True)
    resolution = pw.TextField(null=True)
    reserved_at = pw.FloatField()
    settled_at = pw.FloatField(null=True)

    class Meta:
        table_name = "effect"
        indexes = ((("run_id", "status"), False),)


class InteractiveRequest(Base):
    request_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    node_id = pw.TextField()
    attempt_id = pw.TextField()
    kind = pw.TextField()  # checkpoint | decision | agent
    target_session_id = pw.TextField(null=True)
    audience = pw.TextField(null=True)
    contract_sha256 = pw.TextField()
    digest = pw.TextField()
    revision = pw.IntegerField(default=1)
    status = pw.TextField()  # pending | presenting | settled | cancelled
    accepted_submission_id = pw.TextField(null=True)
    deadline_at = pw.FloatField(null=True)  # NULL while the run is paused (store/commands/request_clocks.py)
    paused_remaining_s = pw.FloatField(null=True)  # the time left when the run was paused
    default_response = pw.TextField(null=True)
    rejected_count = pw.IntegerField(default=0)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()
    settled_at = pw.FloatField(null=True)
    consumed_at = pw.FloatField(null=True)

    class Meta:
        table_name = "interactive_request"
        indexes = ((("status", "deadline_at"), False), (("run_id",), False))


class InteractiveSubmission(Base):
    submission_id = pw.TextField(primary_key=True)
    request_id = pw.TextField()
    idempotency_key = pw.TextField()
    payload_hash = pw.TextField()
    payload = pw.TextField()
    outcome = pw.TextField()  # validating | accepted | rejected
    receipt = pw.TextField(null=True)
    provenance = pw.TextField()
    submitted_at = pw.FloatField()
    decided_at = pw.FloatField(null=True)

    class Meta:
        table_name = "interactive_submission"
        indexes = ((("request_id", "idempotency_key"), True),)


class SessionMessage(Base):
    """A durable notification in a session's outbox. A `notify` with an audience (schema v15) is
    also sent to the chats of the channel profiles that route it (`channel_effect`, purpose
    `notification`, whose request_id is this message_id)."""

    message_id = pw.TextField(primary_key=True)
    session_id = pw.TextField(null=True)
    run_id = pw.TextField(null=True)
    kind = pw.TextField()
    body = pw.TextField()
    created_at = pw.FloatField()
    acked_at = pw.FloatField(null=True)
    audience = pw.TextField(null=True)

    class Meta:
        table_name = "session_message"
        indexes = ((("session_id", "acked_at"), False),)


ALL_MODELS: tuple[type[Base], ...] = (
    HostState, HostCommand, Blob, Run, RunCount, RunClaim, NodeAttempt,
    RunEvent, RunWorker, ChildProcess, WorkerMessage, Effect,
    InteractiveRequest, InteractiveSubmission, SessionMessage, ChannelEffect,
    ChannelStream, ChannelChatMove, ChannelAdapterEpoch, ScheduleRecord, ScheduleFire, *RESOURCE_MODELS,
    RunnerHost, RunWait, RunMessage, HttpToken, HttpSession, *FLOW_MODELS, *EVENT_MODELS,
)
#: The tables of schema v19 (the web console's sessions).
V19_MODELS: tuple[type[Base], ...] = (HttpSession,)
#: The tables of schema v20 (rate limits and debounce).
V20_MODELS: tuple[type[Base], ...] = FLOW_MODELS
#: The tables of schema v21 (events, their deliveries, subscriptions and batches).
V21_MODELS: tuple[type[Base], ...] = EVENT_MODELS
#: The tables of schema v18 (the HTTP door's tokens).
V18_MODELS: tuple[type[Base], ...] = (HttpToken,)
#: The tables of schema v14 (waits and mailboxes).
V14_MODELS: tuple[type[Base], ...] = (RunWait, RunMessage)
#: The tables of schema v12 (a cursor per bot, chats that moved).
V12_MODELS: tuple[type[Base], ...] = (ChannelStream, ChannelChatMove)
#: The tables of schema v10 (runner hosts).
V10_MODELS: tuple[type[Base], ...] = (RunnerHost,)
#: The tables of schema v7 (schedules).
V7_MODELS: tuple[type[Base], ...] = (ScheduleRecord, ScheduleFire)


# --- indexes added by schema v5 ------------------------------------------------------------------
# Each serves a statement that otherwise walks a whole table that grows with the history (found
# by tests/store/test_query_plans.py). Partial indexes hold only the few rows their query asks for,
# and cost nothing for the rest; the statements they serve name the same literal condition.

BLOB_PREFIX_CHARS = 8


def _blob_prefix(field: pw.Field) -> pw.Node:
    """The first characters of a sha256 column: enough to find the rows that may hold a digest
    (a 32-bit prefix; the query compares the whole digest after), at a fraction of an index on
    the whole 64-character digest (measured ~15 bytes an entry instead of ~75)."""
    return pw.fn.substr(field, 1, BLOB_PREFIX_CHARS)


def _blob_prefix_index(model: type[Base], field: pw.Field, name: str) -> pw.ModelIndex:
    """A digest-prefix index over the rows that hold a digest at all: most values are small and
    kept inline (schema v6), and their rows need no entry."""
    return model.index(_blob_prefix(field), name=name, where=field.is_null(False))


#: (model, index) pairs, in the order migration v5 creates them; v1 creates them with their tables.
V5_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    # run.list --workflow NAME: the newest runs of one workflow, without walking every run.
    (Run, Run.index(Run.workflow, Run.created_at, name="run_workflow_created_at")),
    # state.prune deletes a run's rows by run_id.
    (WorkerMessage, WorkerMessage.index(WorkerMessage.run_id, name="worker_message_run_id")),
    (SessionMessage, SessionMessage.index(SessionMessage.run_id, name="session_message_run_id")),
    (ChildProcess, ChildProcess.index(ChildProcess.run_id, name="child_process_run_id")),
    # interaction.list across sessions: the unacknowledged messages, oldest first.
    (SessionMessage, SessionMessage.index(SessionMessage.created_at, name="session_message_unacked",
                                          where=SessionMessage.acked_at.is_null())),
    # The host's start: the children it must reap (released_at IS NULL).
    (ChildProcess, ChildProcess.index(ChildProcess.released_at, name="child_process_unreleased",
                                      where=ChildProcess.released_at.is_null())),
    # The host's start: workers a previous host left starting or live.
    (RunWorker, RunWorker.index(RunWorker.status, name="run_worker_live",
                                where=RunWorker.status.in_(["starting", "live"]))),
    # The metrics gauges (and channel.status): what waits for a person.
    (Effect, Effect.index(Effect.status, name="effect_ambiguous", where=Effect.status == "ambiguous")),
    (ChannelEffect, ChannelEffect.index(ChannelEffect.status, name="channel_effect_ambiguous",
                                        where=ChannelEffect.status == "ambiguous")),
    # state.prune frees a blob only when no surviving row references it: one lookup per
    # reference column (store/prune_plan.py BLOB_REFERENCES) instead of reading every row.
    (Run, _blob_prefix_index(Run, Run.source_sha256, "run_source_sha256_prefix")),
    (Run, _blob_prefix_index(Run, Run.input_sha256, "run_input_sha256_prefix")),
    (Run, _blob_prefix_index(Run, Run.output_sha256, "run_output_sha256_prefix")),
    (NodeAttempt, _blob_prefix_index(NodeAttempt, NodeAttempt.output_sha256, "node_attempt_output_sha256_prefix")),
    (Effect, _blob_prefix_index(Effect, Effect.output_sha256, "effect_output_sha256_prefix")),
    (InteractiveRequest, _blob_prefix_index(InteractiveRequest, InteractiveRequest.contract_sha256,
                                            "interactive_request_contract_sha256_prefix")),
)
for _model, _index in V5_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v12: the channel messages surely not sent, being tried again (channel.status,
#: the `piwf_channel_messages_undelivered` gauge), found without walking the channel's history.
V12_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (ChannelEffect, ChannelEffect.index(ChannelEffect.status, name="channel_effect_failed",
                                        where=ChannelEffect.status == "failed")),
)
for _model, _index in V12_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v14. The queue is walked class by class, higher priority first; the other
#: four hold only the rows their statements ask for: the next wake-up of a pending wait (the
#: housekeeper reads only the nearest), the runs of a concurrency key and the children of a wait
#: (active ones counted in the claim, held ones let go when one ends), and a run's children.
V14_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (Run, Run.index(Run.status, Run.queue_class, Run.priority.desc(), Run.queued_at, name="run_queue_order")),
    (RunWait, RunWait.index(RunWait.wake_at, name="run_wait_wake_at",
                            where=(RunWait.status == "pending") & RunWait.wake_at.is_null(False))),
    (Run, Run.index(Run.concurrency_key, Run.status, Run.queue_class, Run.priority.desc(), Run.queued_at,
                    name="run_concurrency_key", where=Run.concurrency_key.is_null(False))),
    (Run, Run.index(Run.parent_wait_id, Run.status, Run.queue_class, Run.child_index, name="run_parent_wait",
                    where=Run.parent_wait_id.is_null(False))),
    (Run, Run.index(Run.parent_run_id, Run.child_index, name="run_parent_run", where=Run.parent_run_id.is_null(False))),
    # The held runs of one key, in the order they are let go (a fan-out's share priority and queue time).
    (Run, Run.index(Run.held_by, Run.priority.desc(), Run.queued_at, Run.child_index, name="run_held_by",
                    where=Run.held_by.is_null(False))),
    # state.prune looks up the blobs a wait's result and a message's payload keep (BLOB_REFERENCES).
    (RunWait, _blob_prefix_index(RunWait, RunWait.result_sha256, "run_wait_result_sha256_prefix")),
    (RunMessage, _blob_prefix_index(RunMessage, RunMessage.payload_sha256, "run_message_payload_sha256_prefix")),
)
for _model, _index in V14_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v15: the notifications addressed to an audience, by time — what a channel
#: adapter reads for the ones still to send (only those written in the last day are wanted).
V15_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (SessionMessage, SessionMessage.index(SessionMessage.created_at, name="session_message_addressed",
                                          where=SessionMessage.audience.is_null(False))),
)
for _model, _index in V15_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v16: state.prune looks up the graph blobs runs keep (BLOB_REFERENCES).
V16_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (Run, _blob_prefix_index(Run, Run.graph_sha256, "run_graph_sha256_prefix")),
)
for _model, _index in V16_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v20: the nearest timer of held runs (the housekeeper reads only the nearest), and
#: the fresh runs of a rate key, which the claim holds together.
V20_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (FlowTimer, FlowTimer.index(FlowTimer.wake_at, name="flow_timer_wake_at", where=FlowTimer.wake_at.is_null(False))),
    (Run, Run.index(Run.rate_key, Run.status, Run.queue_class, name="run_rate_key",
                    where=Run.rate_key.is_null(False))),
)
for _model, _index in V20_INDEXES:
    _model.add_index(_index)

#: Indexes of schema v21: the pending event waits on one event name (what `event.emit` settles).
V21_INDEXES: tuple[tuple[type[Base], pw.ModelIndex], ...] = (
    (RunWait, RunWait.index(RunWait.topic, RunWait.created_at, name="run_wait_event_pending",
                            where=(RunWait.kind == "event") & (RunWait.status == "pending"))),
)
for _model, _index in V21_INDEXES:
    _model.add_index(_index)
