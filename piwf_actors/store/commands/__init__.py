"""Named write commands. Importing this package registers all of them."""

from piwf_actors.store.commands import (  # noqa: F401  (registration)
    channel_answers,
    channels,
    child_runs,
    children,
    claims,
    event_starts,
    events,
    function_history,
    http_sessions,
    http_tokens,
    interactions,
    lease,
    mailbox,
    rate_tokens,
    reconciles,
    resources,
    runner_lease,
    runs,
    schedules,
    state,
    wait_request,
    waits,
    worker,
)
from piwf_actors.store.commands.registry import WriteContext, command, command_names, lookup

__all__ = ["WriteContext", "command", "command_names", "lookup"]
