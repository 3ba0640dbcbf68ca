"""Trace and span ids derived from the ids a run already has, and the W3C trace context of a node.

Spans are emitted by the host from committed facts, long after (and maybe on
another host than) the worker that ran the node, and a run outlives every
process that touches it. So no id may be held in memory: every id is a hash
of a durable id. A run's trace id is derived from its run id (a resumed
run, whichever host resumes it, continues the same trace); a node attempt's
span id from its attempt id, which the worker draws before the node runs
(worker/engine.py), so the worker knows the span its shell command and
callbacks run under without asking anyone; a wait's span id from its wait id
or request id. Pure functions, no imports beyond hashlib: the worker uses
them and never loads opentelemetry.
"""

from __future__ import annotations

import hashlib

#: W3C trace context version 00; flags 01: sampled (the host decides what it exports; a process
#: downstream that traces too is told to record, so its spans join the run's trace).
TRACEPARENT_VERSION = "00"
SAMPLED_FLAGS = "01"
#: "1" in a worker's environment: its host traces, so nodes get `TRACEPARENT` and `ctx.traceparent`
#: (the worker takes it out of its environment at start: no node or command inherits it).
TRACE_CONTEXT_ENV = "PIWF_TRACE_CONTEXT"


def _derive(kind: str, key: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(f"piwf.{kind}:{key}".encode()).digest()[:size], "big")
    return value or 1  # an all-zero id is invalid in W3C trace context and OpenTelemetry


def trace_id(run_id: str) -> int:
    """The 128-bit trace id of run `run_id` (its own trace; a child run links to its parent's)."""
    return _derive("trace", run_id, 16)


def run_span_id(run_id: str) -> int:
    """The 64-bit id of the span of the whole run, the root of its trace."""
    return _derive("run", run_id, 8)


def attempt_span_id(attempt_id: str) -> int:
    """The id of the span of one node attempt (child of the run span)."""
    return _derive("attempt", attempt_id, 8)


def wait_span_id(wait_or_request_id: str) -> int:
    """The id of the span of one wait: a durable wait's id (sleep, message, children) or an
    interactive request's id (checkpoint, decision, agent)."""
    return _derive("wait", wait_or_request_id, 8)


def format_traceparent(trace: int, span: int, flags: str = SAMPLED_FLAGS) -> str:
    return f"{TRACEPARENT_VERSION}-{trace:032x}-{span:016x}-{flags}"


def node_traceparent(run_id: str, attempt_id: str) -> str:
    """The `traceparent` a node attempt's shell command (`TRACEPARENT`) and callbacks
    (`ctx.traceparent`) see: the node attempt span of the run's trace."""
    return format_traceparent(trace_id(run_id), attempt_span_id(attempt_id))


def parse_traceparent(text: str) -> tuple[int, int, str]:
    """(trace id, parent span id, flags) of a version-00 `traceparent`; ValueError when malformed."""
    parts = text.strip().split("-")
    if (len(parts) != 4 or parts[0] != TRACEPARENT_VERSION or len(parts[1]) != 32 or len(parts[2]) != 16
            or len(parts[3]) != 2):
        raise ValueError(f"not a version-00 traceparent: {text!r}")
    try:
        trace, span = int(parts[1], 16), int(parts[2], 16)
        int(parts[3], 16)
    except ValueError:
        raise ValueError(f"not a version-00 traceparent: {text!r}") from None
    if not trace or not span:
        raise ValueError(f"traceparent with an all-zero id: {text!r}")
    return trace, span, parts[3]
