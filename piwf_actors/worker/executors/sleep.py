"""The executor of sleeps: the wake-up the host waits for, `seconds` from when the node starts or
the time `until(ctx)` returns (epoch seconds or an aware datetime), computed here in the worker."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from piwf_actors.worker.executors.base import Wait, WaitRequestError
from piwf_actors.workflows.context import NodeContext
from piwf_actors.workflows.model import Workflow, is_number

#: The latest wake-up time a sleep's `until=` may return: the end of the year 9999, the last time a
#: screen can write as a date (datetime.MAXYEAR).
LATEST_WAKE = _dt.datetime(_dt.MAXYEAR, 12, 31, 23, 59, 59, tzinfo=_dt.UTC).timestamp()


def _epoch(value: Any) -> float:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise WaitRequestError("sleep until= returned a naive datetime; give it a time zone")
        return value.timestamp()
    if isinstance(value, float) and not math.isfinite(value):
        raise WaitRequestError(f"sleep until= returned {value!r}: not a time")
    if is_number(value):
        if value > LATEST_WAKE:
            raise WaitRequestError(f"sleep until= returned {value!r}: after the year 9999")
        return float(value)
    raise WaitRequestError(f"sleep until= must return epoch seconds or an aware datetime, got {type(value).__name__}")


def request(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    if spec.until is not None:
        return {"kind": "sleep", "until": _epoch(spec.until(ctx))}
    return {"kind": "sleep", "seconds": spec.seconds}


SLEEP = Wait(request)
