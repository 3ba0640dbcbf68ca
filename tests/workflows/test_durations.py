"""Durations and times that are not finite, or absurdly long, are refused with words that say so, where
they are given: `piwf.skip(float("inf"))` (the test kit's clock), `sleep(1e300)` and every other
duration of a definition (a node's `timeout_s`, a decision's `on_timeout.after_s`, a retry's back-off),
and a sleep's `until=` returning NaN (it said "got float"). A run could never finish on an infinite
skip, and `piwf graph` printed a 300-digit duration for `sleep(1e300)`; every screen now writes any
duration past 100 years as `over 100 years` (timefmt.py)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest

from piwf_actors.clock import TimerClock
from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.timefmt import duration, relative
from piwf_actors.worker.executors import WaitRequestError, wait_payload
from piwf_actors.workflows import (
    action,
    checkpoint,
    choice,
    compute,
    define_workflow,
    human_decision,
    shell,
    sleep,
    wait_message,
)
from piwf_actors.workflows.context import node_context
from piwf_actors.workflows.graph import build_graph

#: The longest duration a definition takes: 100 years, in seconds.
CENTURY = 100 * 365.25 * 86400


def one_node(spec: object) -> None:
    define_workflow(name="w", start_at="n", nodes={"n": spec}, edges=[])


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -float("inf")])
def test_the_kit_clock_refuses_a_skip_or_a_time_that_is_not_finite(tmp_path: Path, value: float) -> None:
    clock = TimerClock(tmp_path / "offset", base=lambda: 1000.0)
    with pytest.raises(ValueError, match=rf"skip needs a finite number of seconds >= 0, got {value!r}"):
        clock.skip(value)
    with pytest.raises(ValueError, match=rf"advance_to needs a finite time, got {value!r}"):
        clock.advance_to(value)
    assert clock.offset() == 0.0 and clock.skip(60) == 1060.0  # nothing moved; a finite skip still does


def test_the_kit_refuses_an_infinite_skip_and_its_timer_time_stays(piwf) -> None:
    """Through the test kit (`piwf.skip`), on its real host: an infinite skip would have left every timer
    due for good and no run could finish."""
    before = piwf.now()
    with pytest.raises(ValueError, match="skip needs a finite number of seconds >= 0, got inf"):
        piwf.skip(float("inf"))
    assert math.isfinite(piwf.now()) and piwf.now() - before < 3600


@pytest.mark.parametrize(("spec", "message"), [
    (lambda: sleep(seconds=1e300), f"sleep seconds must be at most 100 years ({int(CENTURY)} s), got 1e+300"),
    (lambda: sleep(seconds=float("inf")), "sleep seconds must be a finite number of seconds, got inf"),
    (lambda: sleep(seconds=float("nan")), "sleep seconds must be a finite number of seconds, got nan"),
    (lambda: sleep(seconds=-1), "sleep seconds must be a non-negative number of seconds, got -1"),
    (lambda: sleep(seconds="5"), "sleep seconds must be a number of seconds, got str"),
    (lambda: compute(run=lambda ctx: 1, timeout_s=float("inf")), "timeout_s must be a finite number of seconds"),
    (lambda: shell("true", timeout_s=1e12), "timeout_s must be at most 100 years"),
    (lambda: checkpoint(timeout_s=float("nan")), "timeout_s must be a finite number of seconds, got nan"),
    (lambda: wait_message("go", timeout_s=1e300), "timeout_s must be at most 100 years"),
    (lambda: action(run=lambda ctx: 1, retry_backoff_s=float("inf")),
     "retry_backoff_s must be a finite number of seconds, got inf"),
    (lambda: human_decision(audience="ops", choices={"a": choice(label="A")}, request={"title": "?"},
                            on_timeout={"after_s": 1e300, "response": {"choice": "a"}}),
     "on_timeout.after_s must be at most 100 years"),
])
def test_a_definition_refuses_a_duration_that_is_not_finite_or_longer_than_100_years(spec, message) -> None:
    with pytest.raises(WorkflowDefinitionError, match=f"node 'n': {message}".replace("(", r"\(").replace(
            ")", r"\)").replace("+", r"\+")):
        one_node(spec())


def test_a_century_is_the_longest_sleep_and_graph_writes_it_in_words() -> None:
    workflow = define_workflow(name="w", start_at="n", nodes={"n": sleep(seconds=CENTURY)}, edges=[])
    [node] = build_graph(workflow).nodes
    assert node.summary == "over 100 years", node.summary


def test_durations_past_a_century_are_written_in_words() -> None:
    assert duration(1e300) == "over 100 years"
    assert duration(CENTURY) == "over 100 years"
    assert duration(CENTURY - 86400) == "36524d00h"  # below it: as before
    assert relative(1e12, now=0.0) == "in over 100 years"
    assert duration(float("inf")) == "over 100 years"
    assert duration(float("nan")) == ""  # not a duration at all: nothing to write


@pytest.mark.parametrize(("until", "message"), [
    (float("nan"), "sleep until= returned nan: not a time"),
    (float("inf"), "sleep until= returned inf: not a time"),
    (1e300, "sleep until= returned 1e+300: after the year 9999"),
    ("tomorrow", "sleep until= must return epoch seconds or an aware datetime, got str"),
])
def test_a_sleep_until_that_is_not_a_time_fails_its_node_with_words_that_say_so(until, message) -> None:
    workflow = define_workflow(name="w", start_at="n", nodes={"n": sleep(until=lambda ctx: until)}, edges=[])
    ctx = node_context(workflow, "n", {}, {})
    with pytest.raises(WaitRequestError) as raised:
        wait_payload(workflow, workflow.nodes["n"], ctx)
    assert str(raised.value) == message
    aware = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    fine = define_workflow(name="w", start_at="n", nodes={"n": sleep(until=lambda ctx: aware)}, edges=[])
    assert wait_payload(fine, fine.nodes["n"], ctx)["until"] == aware.timestamp()
    assert not math.isnan(wait_payload(fine, fine.nodes["n"], ctx)["until"])
