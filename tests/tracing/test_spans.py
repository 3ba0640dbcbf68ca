"""The pure parts of tracing: the span step function (`RunTrace.feed`), the derived ids and the
W3C trace context, and when the environment asks `piwf-host` to trace."""

from __future__ import annotations

import pytest

from piwf_actors.tracing import ids
from piwf_actors.tracing.env import tracing_requested
from piwf_actors.tracing.spans import MAX_RUN_SPAN_EVENTS, Event, RunFacts, RunTrace, SpanRecord


def _feed(trace: RunTrace, *events: Event) -> list[SpanRecord]:
    return [record for event in events for record in trace.feed(event)]


def test_a_pure_node_begins_at_the_runs_previous_event_and_an_effect_at_its_reservation() -> None:
    trace = RunTrace(RunFacts("run_a", "wf"))
    ended = _feed(trace,
                  Event(1, "run_created", 10.0, payload={"workflow": "wf"}),
                  Event(2, "run_started", 11.0, payload={"steps": 0}),
                  Event(3, "node_finished", 11.5, "pure", "att_1"),
                  Event(4, "node_started", 12.0, "act", "att_2", {"attempt_no": 1}),
                  Event(5, "effect_reserved", 12.0, "act", "att_2", {"effect_id": "eff_1"}),
                  Event(6, "effect_settled", 13.0, "act", "att_2", {"effect_id": "eff_1", "status": "applied"}),
                  Event(7, "node_finished", 13.0, "act", "att_2"),
                  Event(8, "run_finished", 13.0, "act"))
    pure, act, run = ended
    assert (pure.name, pure.start, pure.end, pure.attributes["piwf.node.kind"]) == ("node pure", 11.0, 11.5, "compute")
    assert (act.start, act.end, act.attributes["piwf.effect.id"], act.attributes["piwf.node.kind"]) == (
        12.0, 13.0, "eff_1", "effect")
    assert pure.parent_span_id == act.parent_span_id == run.span_id == ids.run_span_id("run_a")
    assert (run.name, run.start, run.end, run.parent_span_id, run.error) == ("run wf", 10.0, 13.0, None, None)
    assert [name for name, _at, _attrs in run.events] == ["run_started"]
    assert {record.trace_id for record in ended} == {ids.trace_id("run_a")}
    assert trace.finished and trace.feed(Event(9, "run_restarted", 20.0)) == []


def test_what_is_open_when_the_run_ends_ends_with_it_and_an_interrupted_effect_is_an_error() -> None:
    trace = RunTrace(RunFacts("run_b", "wf"))
    ended = _feed(trace,
                  Event(1, "run_created", 1.0),
                  Event(2, "node_started", 2.0, "act", "att_1"),
                  Event(3, "effect_reserved", 2.0, "act", "att_1", {"effect_id": "eff_9"}),
                  Event(4, "node_interrupted", 3.0, "act", "att_1",
                        {"error_code": "timeout", "error": "timed out after 1 s", "effect_id": "eff_9"}),
                  Event(5, "node_started", 4.0, "ask", "att_2"),
                  Event(6, "interaction_requested", 4.0, "ask", "att_2", {"request_id": "req_1", "kind": "checkpoint"}),
                  Event(7, "run_cancelled", 5.0))
    interrupted, wait, ask, run = ended
    assert (interrupted.attributes["piwf.node.outcome"], interrupted.error) == ("interrupted", "timed out after 1 s")
    assert interrupted.attributes["piwf.effect.id"] == "eff_9"
    assert (wait.name, wait.parent_span_id, wait.end, wait.attributes["piwf.wait.outcome"]) == (
        "wait checkpoint", ids.attempt_span_id("att_2"), 5.0, "ended_with_run")
    assert (ask.attributes["piwf.node.outcome"], ask.attributes["piwf.node.kind"], ask.error) == (
        "unfinished", "checkpoint", None)
    assert (run.attributes["piwf.run.status"], run.error) == ("cancelled", None)


def test_a_failed_run_is_an_error_and_a_child_or_restarted_run_links_to_where_it_came_from() -> None:
    child = RunTrace(RunFacts("run_c", "kid", parent_run_id="run_p", parent_wait_id="wait_1"))
    (run,) = _feed(child, Event(1, "run_created", 1.0), Event(2, "run_failed", 2.0, payload={"error_code": "boom"}))
    assert (run.error, run.attributes["error.type"]) == ("boom", "boom")
    assert [(link.trace_id, link.span_id, link.attributes) for link in run.links] == [
        (ids.trace_id("run_p"), ids.wait_span_id("wait_1"), {"piwf.link": "parent"})]
    assert run.with_run_error("node 'x' failed: KeyError").error == "node 'x' failed: KeyError"
    restarted = RunTrace(RunFacts("run_r", "wf", parent_run_id="run_old"))
    (run,) = _feed(restarted, Event(1, "run_created", 1.0), Event(2, "run_copied", 1.0, payload={"copied_from": "x"}))
    assert [(link.span_id, link.attributes) for link in run.links] == [
        (ids.run_span_id("run_old"), {"piwf.link": "restarted_from"})]
    assert run.attributes["piwf.run.copied_from"] == "x"


def test_an_attempts_facts_fill_in_its_number_and_error() -> None:
    trace = RunTrace(RunFacts("run_d", "wf"))
    (failed,) = _feed(trace, Event(1, "run_created", 1.0),
                      Event(2, "node_failed", 2.0, "n", "att_1", {"outcome": "failed", "error": "KeyError: 'k'"}))
    filled = failed.with_attempt(2, "node_error", "KeyError: 'k' (in full)", "host-1")
    assert filled.attributes["piwf.node.attempt"] == 2
    assert (filled.attributes["error.type"], filled.error) == ("node_error", "KeyError: 'k' (in full)")
    assert filled.attributes["piwf.executed_by"] == "host-1"


def test_a_long_lived_run_keeps_its_latest_span_events_and_no_fact_of_an_ended_attempt() -> None:
    trace = RunTrace(RunFacts("run_e", "chat"))
    _feed(trace, Event(1, "run_created", 1.0), Event(2, "run_started", 1.0))
    seq = 2
    for n in range(300):  # a run that lives on messages: an effect and a wait per message
        attempt = f"att_{n}"
        seq += 4
        ended = _feed(trace,
                      Event(seq - 3, "message_received", 2.0 + n, payload={"topic": "chat", "n": n}),
                      Event(seq - 2, "effect_reserved", 2.0 + n, "reply", attempt, {"effect_id": f"eff_{n}"}),
                      Event(seq - 1, "wait_started", 2.0 + n, "reply", attempt, {"wait_id": f"w_{n}", "kind": "message"}),
                      Event(seq, "node_finished", 2.5 + n, "reply", attempt))
        assert [record.name for record in ended] == ["wait message", "node reply"]
        assert ended[1].attributes["piwf.effect.id"] == f"eff_{n}"
        assert trace.held() == 0  # nothing of an ended attempt stays
    (run,) = _feed(trace, Event(seq + 1, "run_finished", 400.0))
    assert len(run.events) == MAX_RUN_SPAN_EVENTS == 128
    assert run.attributes["piwf.run.events_dropped"] == 301 - 128  # run_started and 300 messages
    assert run.events[-1] == ("message_received", 301.0, {"piwf.topic": "chat", "piwf.n": 299})  # the latest kept
    short = RunTrace(RunFacts("run_f", "wf"))
    (run,) = _feed(short, Event(1, "run_created", 1.0), Event(2, "run_started", 1.0), Event(3, "run_finished", 2.0))
    assert "piwf.run.events_dropped" not in run.attributes


def test_ids_are_derived_and_the_traceparent_round_trips() -> None:
    text = ids.node_traceparent("run_x", "att_y")
    assert text == ids.node_traceparent("run_x", "att_y") != ids.node_traceparent("run_x", "att_z")
    assert ids.parse_traceparent(text) == (ids.trace_id("run_x"), ids.attempt_span_id("att_y"), "01")
    assert len(text) == 55 and text.startswith("00-")
    for bad in ("", "00-abc-def-01", "01-" + "1" * 32 + "-" + "1" * 16 + "-01", "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
                "00-" + "g" * 32 + "-" + "1" * 16 + "-01"):
        with pytest.raises(ValueError):
            ids.parse_traceparent(bad)


@pytest.mark.parametrize(("environ", "flag", "expected"), [
    ({}, False, False),
    ({}, True, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, False, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, False, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False, False),
    ({"OTEL_SERVICE_NAME": "x"}, False, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False, False),
    ({"OTEL_SDK_DISABLED": "TRUE"}, True, False),
])
def test_when_the_environment_asks_piwf_host_to_trace(environ: dict[str, str], flag: bool, expected: bool) -> None:
    assert tracing_requested(environ, flag=flag) is expected
