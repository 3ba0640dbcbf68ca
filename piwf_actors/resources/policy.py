"""The pure rules of reconciling: what a reconcile may return, how it settles, back-off, run ids.

`settle(...)` is the step function the settling commands apply: given the
result, the resource's queue facts and `now`, it says when the resource is
due again, how many errors in a row it has, and whether it goes away.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.json_values import json_value_problem

RESULTS = ("done", "requeue_after", "error")
#: Back-off after n consecutive errors: min(BACKOFF_MAX_S, BACKOFF_BASE_S · 2^n).
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0
#: The longest requeue_after a manager may ask for (a day); longer waits are a schedule's job.
MAX_AFTER_S = 86400.0
MAX_FINALIZERS = 32
MAX_KEY_CHARS = 512


class BadResult(ValueError):
    """A reconcile returned something that is not a result (the reconcile counts as an error)."""


def backoff_s(previous_errors: int) -> float:
    """The wait after an error that follows `previous_errors` errors in a row: 1 s, 2 s, 4 s … 60 s."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** min(max(previous_errors, 0), 16))


def check_result(value: Any) -> dict[str, Any]:
    """The reconcile's return value, checked and normalised to {result, status_patch, finalizers?, after_s?}."""
    if not isinstance(value, dict):
        raise BadResult(f"reconcile must return a dict, not {type(value).__name__}")
    unknown = sorted(set(value) - {"result", "status_patch", "finalizers", "after_s", "error"})
    if unknown:
        raise BadResult(f"reconcile returned unknown key(s): {', '.join(unknown)}")
    result = value.get("result")
    if result not in RESULTS:
        raise BadResult(f"reconcile result must be one of {', '.join(RESULTS)}, not {result!r}")
    checked: dict[str, Any] = {"result": result}
    patch = value.get("status_patch")
    if patch is not None and not isinstance(patch, dict):
        raise BadResult("status_patch must be a dict (keys to set; a None value removes the key)")
    checked["status_patch"] = dict(patch or {})
    problem = json_value_problem(checked["status_patch"], "status_patch")
    if problem is not None:  # it is stored and shown as the resource's status
        raise BadResult(problem)
    if value.get("finalizers") is not None:
        checked["finalizers"] = check_finalizers(value["finalizers"])
    if result == "requeue_after":
        after = value.get("after_s")
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not math.isfinite(after) \
                or not 0 <= after <= MAX_AFTER_S:
            raise BadResult(f"requeue_after needs after_s between 0 and {MAX_AFTER_S:g} seconds")
        checked["after_s"] = float(after)
    if result == "error" and value.get("error") is not None:
        checked["error"] = str(value["error"])[:2000]
    return checked


def check_finalizers(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) and item for item in value):
        raise BadResult("finalizers must be a list of non-empty strings")
    if len(value) > MAX_FINALIZERS:
        raise BadResult(f"at most {MAX_FINALIZERS} finalizers")
    return list(dict.fromkeys(value))


def merge_status(status: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A shallow merge: each key of the patch replaces the status's; a None value removes the key."""
    merged = dict(status)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True, slots=True)
class Settlement:
    """Where a reconcile leaves its resource."""

    available_at: float | None  # due again at this time; None: not queued (until something enqueues it)
    consecutive_errors: int
    delete: bool = False


def settle(result: str, *, now: float, consecutive_errors: int, after_s: float | None = None,
           deleting: bool = False, finalizers: list[str] | tuple[str, ...] = (),
           enqueued_meanwhile: bool = False, pending_at: float | None = None) -> Settlement:
    """The step function of a reconcile's end.

    `done`: not queued again, unless it was enqueued while it ran (`enqueued_meanwhile`: a spec
    change, `resource.reconcile`, an owned run finishing), then due at once; a deleting resource
    with no finalizer left is deleted. `requeue_after`: due after `after_s`. `error` (an exception,
    a timeout, a killed worker): due after `backoff_s(consecutive_errors)`, one more error in a row.
    An enqueue that came in meanwhile never makes the resource wait longer than it asked for
    (`pending_at`, the time that enqueue made it due).
    """
    if result == "error":
        wait_until = now + backoff_s(consecutive_errors)
        errors = consecutive_errors + 1
    elif result == "requeue_after":
        wait_until = now + float(after_s or 0.0)
        errors = 0
    elif result == "done":
        if deleting and not finalizers:
            return Settlement(None, 0, delete=True)
        if not enqueued_meanwhile:
            return Settlement(None, 0)
        return Settlement(min(now, pending_at) if pending_at is not None else now, 0)
    else:
        raise BadResult(f"unknown result {result!r}")
    if enqueued_meanwhile and pending_at is not None:
        wait_until = min(wait_until, pending_at)
    return Settlement(wait_until, errors)


def owned_run_id(manager: str, key: str, ensure_key: str) -> str:
    """The run `ctx.workflows.ensure(…, key=ensure_key)` of resource (manager, key) starts: the same
    every time, so a second ensure (another reconcile, after a crash) finds the first run."""
    digest = hashlib.sha256(canonical_json(["resource", manager, key, ensure_key]).encode()).hexdigest()
    return f"run_{digest[:26]}"
