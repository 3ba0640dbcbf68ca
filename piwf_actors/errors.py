"""Every error piwf_actors raises on purpose.

One root (`PiwfError`), a small subtree per subsystem. Errors that are stored
in the database or shown to users carry a stable `code`; their constructor
takes typed arguments (ids, numbers), never a preformatted sentence, so the
message stays one line and the code stays greppable.
"""

from __future__ import annotations


class PiwfError(Exception):
    """Root of every deliberate piwf_actors error."""

    code = "error"

    def one_line(self, limit: int = 1000) -> str:
        """The message as a single line of at most `limit` characters."""
        text = " ".join(str(self).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"


# --- wire codec -----------------------------------------------------------


class DecodeError(PiwfError):
    """Bytes or a decoded value that do not form a valid message.

    The only exception the codec, the frame reader and every `from_wire`
    raise for bad input.
    """

    code = "decode_error"


class FrameTooLarge(DecodeError):
    code = "frame_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


# --- durable store ----------------------------------------------------------


class StoreError(PiwfError):
    code = "store_error"


class StoreRefused(StoreError):
    """The state file exists but must not be opened (not ours, corrupt, emptied)."""

    code = "store_refused"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"refusing state database {path}: {reason}")
        self.path = path
        self.reason = reason


class DriverMissing(StoreError):
    """The database names an engine whose driver, an extra of the package, cannot be imported."""

    code = "driver_missing"

    def __init__(self, engine: str, driver: str, extra: str, detail: str) -> None:
        super().__init__(f"{engine} needs {driver}, which cannot be imported here ({detail}): "
                         f"pip install 'piwf_actors[{extra}]'")
        self.engine = engine
        self.driver = driver
        self.extra = extra


class DiskFull(StoreError):
    code = "disk_full"

    def __init__(self, detail: str) -> None:
        super().__init__(f"database or disk is full: {detail}")


class ReadOnlyDatabase(StoreError):
    code = "read_only"

    def __init__(self, detail: str) -> None:
        super().__init__(f"database is read-only: {detail}")


class TransactionConflict(StoreError):
    """PostgreSQL aborted the transaction because another host's transaction conflicted with it
    (serialization failure, deadlock). Nothing of it was written; running it again is safe, and
    the writer does so before answering with this."""

    code = "store_error"  # answered `unavailable`: the sender may retry


class StaleEpoch(StoreError):
    """A write tagged with a host epoch that no longer owns the lease."""

    code = "stale_epoch"

    def __init__(self, epoch: int, current_epoch: int) -> None:
        super().__init__(f"host epoch {epoch} is stale (current epoch is {current_epoch})")
        self.epoch = epoch
        self.current_epoch = current_epoch


class LeaseExpired(StoreError):
    """A fenced write from a host whose lease ran out, even if no other host took it (yet).

    Checked inside the writer's transaction with the clock read there, so a
    host paused past its lease (SIGSTOP, a stalled VM) changes nothing when it
    wakes up. Retryable: the host may take the lease again."""

    code = "lease_expired"

    def __init__(self, epoch: int, expired_at: float | None) -> None:
        when = "is not held" if expired_at is None else f"expired at {expired_at:.3f}"
        super().__init__(f"the lease of host epoch {epoch} {when}; nothing was written")
        self.epoch = epoch


class ClaimLost(StoreError):
    """A run write whose claim (token, generation or launch id) is not current."""

    code = "claim_lost"

    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(f"claim on run {run_id} lost: {detail}")
        self.run_id = run_id


class AdapterReplaced(StoreError):
    """A write from a channel adapter whose epoch is no longer the profile's current one."""

    code = "adapter_replaced"

    def __init__(self, profile: str) -> None:
        super().__init__(f"channel adapter of profile {profile} was replaced; its writes are refused")
        self.profile = profile


class Conflict(StoreError):
    code = "conflict"


class NotFound(StoreError):
    code = "not_found"

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(f"{kind} {key} not found")
        self.kind = kind
        self.key = key


class Rejected(StoreError):
    """A write that is well-formed but not allowed in the current state."""

    code = "rejected"


class CommandFailed(StoreError):
    """A write command raised something it should not have (a bug): it was undone alone, and
    sending it again would fail the same way, so it is `rejected`, not `unavailable`."""

    code = "command_failed"


class UnknownCommand(StoreError):
    code = "unknown_command"

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown write command {name!r}")
        self.name = name


class WriterStopped(StoreError):
    code = "writer_stopped"

    def __init__(self) -> None:
        super().__init__("the database writer is not running")


# --- host lifecycle ----------------------------------------------------------


class HostError(PiwfError):
    code = "host_error"


class RunnerLeaseLost(StoreError):
    """A write fenced by a runner host's lease (docs/runners.md) that the lease no longer covers: the
    row names another epoch, was released, or is gone. Nothing was written."""

    code = "runner_lease_lost"

    def __init__(self, runner_id: str, epoch: int, detail: str) -> None:
        super().__init__(f"runner lease of {runner_id} (epoch {epoch}) lost: {detail}")
        self.runner_id = runner_id
        self.epoch = epoch


class HostAlreadyRunning(HostError):
    code = "host_already_running"

    def __init__(self, state_dir: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"a piwf host ({who}) already holds {state_dir}")
        self.pid = pid


class LeaseLost(HostError):
    code = "lease_lost"

    def __init__(self, epoch: int, detail: str) -> None:
        super().__init__(f"lease for epoch {epoch} lost: {detail}")
        self.epoch = epoch


class StandbyHost(HostError):
    """A mutation sent to a standby host: nothing was written; the active host (or this one after it
    takes over) can do it."""

    code = "standby"

    def __init__(self, active_host_id: str | None, epoch: int, live: bool) -> None:
        if live and active_host_id:
            where = f"the active host is {active_host_id} (epoch {epoch}); retry there or after takeover"
        else:
            where = f"no host holds the lease now (epoch {epoch} ended); retry after takeover"
        super().__init__(f"standby host; {where}")
        self.active_host_id = active_host_id
        self.epoch = epoch


class RunnerAlreadyRunning(HostError):
    """Another live process holds this runner id's lease."""

    code = "runner_already_running"

    def __init__(self, runner_id: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"runner {runner_id} is already running ({who}); its lease has not run out")
        self.runner_id = runner_id
        self.pid = pid


class RunnerHostRefusal(HostError):
    """A mutation sent to a runner host (docs/runners.md): nothing was written; the active host does it."""

    code = "runner_host"

    def __init__(self, active_host_id: str | None, epoch: int, live: bool) -> None:
        if live and active_host_id:
            where = f"send it to the active host {active_host_id} (epoch {epoch})"
        else:
            where = f"no host holds the lease now (epoch {epoch} ended); retry once a host is active"
        super().__init__(f"runner host: it executes runs only; {where}")
        self.active_host_id = active_host_id
        self.epoch = epoch


class UnsafePath(HostError):
    code = "unsafe_path"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"unsafe path {path}: {reason}")
        self.path = path


# --- workflows ----------------------------------------------------------------


class WorkflowError(PiwfError):
    code = "workflow_error"


class WorkflowDefinitionError(WorkflowError):
    """A workflow definition that cannot run; the message names the node."""

    code = "workflow_definition_error"


class NodeKindError(WorkflowError):
    """A node kind the package cannot use: one registered twice or without its parts
    (workflows/kinds/), or one the worker has no executor for (worker/executors/). A mistake in the
    package itself, raised when the registry or the executor table is built, at import."""

    code = "node_kind_error"

    def __init__(self, kind: str, problem: str) -> None:
        super().__init__(f"node kind {kind!r}: {problem}")
        self.kind = kind


class WorkflowNotFound(WorkflowError):
    code = "workflow_not_found"

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"workflow {name!r} not found" + (f": {detail}" if detail else ""))
        self.name = name


class WorkflowLoadFailed(WorkflowError):
    code = "workflow_load_failed"


class WorkflowLoadTimedOut(WorkflowLoadFailed):
    """A file's import that another load started ran out of its time limit (workflows/user_code.py).
    Not recorded under a request's key: a replay may find the file quick again."""

    transient = True


class UserCodeTimeout(Rejected):
    """Workflow code the host ran (a key function, a file's import) outlived its limit
    (workflows/user_code.py). Never recorded under the request's key: a replay may find it quick."""

    code = "user_code_timeout"
    transient = True

    def __init__(self, subject: str, verb: str, seconds: float, setting: str) -> None:
        super().__init__(f"{subject} {verb} within {seconds:g} s ({setting})")
        self.subject, self.seconds, self.setting = subject, seconds, setting


class UserCodeUnavailable(PiwfError):
    """The host runs no workflow code now: too many calls hang past their limits, or it is stopping."""

    code = "user_code_unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class BadLimitKey(Rejected):
    """A concurrency key function returned something that is not a JSON-like value."""

    def __init__(self, workflow: str, expected: str, got: str) -> None:
        super().__init__(f"workflow {workflow!r}: its concurrency key must be JSON-like ({expected}), got {got}")
        self.workflow = workflow


class EncodeError(PiwfError):
    """A value that cannot travel on the wire (unsupported type, too deep, too big)."""

    code = "encode_error"


#: The protocol outcome (docs/protocol.md) a refusal with this code is answered with, to clients
#: and to workers alike. `unavailable` means nothing was written and the same request may be
#: sent again later; an unlisted code is `rejected`.
OUTCOME_OF_CODE: dict[str, str] = {
    NotFound.code: "notFound",
    Conflict.code: "conflict",
    ClaimLost.code: "claimLost",
    StaleEpoch.code: "unavailable",
    LeaseExpired.code: "unavailable",
    DiskFull.code: "unavailable",
    ReadOnlyDatabase.code: "unavailable",
    WriterStopped.code: "unavailable",
    StoreError.code: "unavailable",
    StandbyHost.code: "unavailable",
    RunnerLeaseLost.code: "unavailable",
    RunnerHostRefusal.code: "unavailable",
    UserCodeUnavailable.code: "unavailable",
}


def outcome_for(code: str | None) -> str:
    """The protocol outcome of a refusal with error code `code`."""
    return OUTCOME_OF_CODE.get(code or "", "rejected")
