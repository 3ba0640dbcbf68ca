"""The flow-control options of a definition (workflows/rate_limits.py): `rate=`, `debounce=` and a named
limiter on nodes and steps, for graph and function workflows alike; what a start records; one clear
line for each mistake."""

from __future__ import annotations

import pytest

from piwf_actors.durable import step, workflow
from piwf_actors.errors import Rejected, WorkflowDefinitionError
from piwf_actors.workflows import action, compute, debounce, define_workflow, rate_limit, rate_limiter, shell
from piwf_actors.workflows.rate_limits import flow_spec, node_rate_key, rate_spec

mail_api = rate_limiter("mail-api", 10, per_s=60)


def graph(**options):
    return define_workflow(name="send", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[], **options)


def test_a_workflow_rate_limit_records_its_key_per_value_of_the_key_function() -> None:
    limited = graph(rate=rate_limit(3, per_s=3600, key=lambda input: input["to"]))
    assert flow_spec(limited, {"to": "bob"}) == {"rate_key": "send[bob]", "rate_max": 3, "rate_per_s": 3600.0}
    assert flow_spec(graph(rate=rate_limit(3, per_s=1)), {}) == {"rate_key": "send", "rate_max": 3, "rate_per_s": 1.0}
    assert flow_spec(graph(), {}) == {}


def test_a_named_limiter_is_one_budget_for_every_workflow_naming_it() -> None:
    first = graph(rate=mail_api)

    @workflow(name="other", rate=mail_api.per(lambda input: input["region"]))
    def other(region: str) -> str:
        return region

    assert flow_spec(first, {})["rate_key"] == "mail-api"
    assert flow_spec(other, {"region": "eu"})["rate_key"] == "mail-api[eu]"


def test_a_debounce_records_its_key_window_and_cap() -> None:
    bounced = graph(debounce=debounce(30, key=lambda input: input["doc"], max_wait_s=300, inputs="all"))
    assert flow_spec(bounced, {"doc": "guide"}) == {
        "debounce": {"key": "send[guide]", "seconds": 30.0, "max_wait_s": 300.0, "inputs": "all"}}

    @workflow(debounce=debounce(5))
    def index(doc: str) -> str:
        return doc

    assert flow_spec(index, {"doc": "x"})["debounce"]["key"] == "index"
    assert rate_spec(index, {"doc": "x"}) == {}  # a child run is never debounced


def test_the_options_are_part_of_the_digest() -> None:
    assert graph().digest != graph(rate=rate_limit(1, per_s=1)).digest
    assert graph(rate=rate_limit(1, per_s=1)).digest != graph(rate=rate_limit(2, per_s=1)).digest
    assert graph().digest != graph(debounce=debounce(5)).digest
    plain = define_workflow(name="n", start_at="a", nodes={"a": action(run=lambda ctx: 1)}, edges=[])
    limited = define_workflow(name="n", start_at="a", nodes={"a": action(run=lambda ctx: 1, rate=mail_api)}, edges=[])
    assert plain.digest != limited.digest


@pytest.mark.parametrize(("options", "message"), [
    ({"rate": 5}, "rate must be built with rate_limit"),
    ({"rate": rate_limit(0, per_s=1)}, "rate_limit needs a positive integer, got 0"),
    ({"rate": rate_limit(1, per_s=0)}, "per_s must be a number of seconds above 0"),
    ({"rate": rate_limit(1, per_s=float("nan"))}, "per_s must be a number of seconds above 0"),
    ({"rate": rate_limit(1, per_s=1, key="to")}, "rate key must be a callable"),
    ({"debounce": 5}, "debounce must be built with debounce("),
    ({"debounce": debounce(0)}, "debounce needs seconds above 0"),
    ({"debounce": debounce(10, max_wait_s=5)}, "max_wait_s must be a number of seconds, at least the debounce"),
    ({"debounce": debounce(10, inputs="first")}, "debounce inputs must be 'last' or 'all'"),
])
def test_a_bad_option_is_one_line_naming_the_workflow(options, message) -> None:
    with pytest.raises(WorkflowDefinitionError) as raised:
        graph(**options)
    assert message in str(raised.value) and "'send'" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_limiter_needs_a_name_and_a_node_takes_only_a_named_one() -> None:
    with pytest.raises(WorkflowDefinitionError, match="rate_limiter name must match"):
        rate_limiter("Mail API", 1, per_s=1)
    with pytest.raises(WorkflowDefinitionError, match="rate must be a named limiter"):
        define_workflow(name="n", start_at="a", nodes={"a": shell(["true"], rate=rate_limit(1, per_s=1))}, edges=[])
    with pytest.raises(WorkflowDefinitionError, match="rate must be a named limiter"):
        step(name="deliver", effect=True, rate=rate_limit(1, per_s=1))(lambda: 1)
    assert step(name="deliver", effect=True, rate=mail_api)(lambda: 1).options["rate"] is mail_api


def test_a_node_key_is_the_limiters_name_or_its_key_of_the_node_input() -> None:
    assert node_rate_key(mail_api, {"region": "eu"}) == "mail-api"
    assert node_rate_key(mail_api.per(lambda node_input: node_input["region"]), {"region": "eu"}) == "mail-api[eu]"
    with pytest.raises(Rejected, match="its key must be JSON-like"):
        node_rate_key(mail_api.per(lambda node_input: object()), {})


def test_a_key_function_that_returns_no_json_like_value_refuses_the_start() -> None:
    with pytest.raises(Rejected, match="workflow 'send': its rate key must be JSON-like"):
        flow_spec(graph(rate=rate_limit(1, per_s=1, key=lambda input: {1, 2})), {})
