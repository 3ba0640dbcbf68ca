"""The OpenAPI description is generated from the one routes table the router serves: every route is in it,
with the body fields of its operation's payload entry; and the router serves every route of the table."""

from __future__ import annotations

import pytest
from http_support import Door, flow

from piwf_actors.cli.render_text import answered_by
from piwf_actors.http.app import build_app
from piwf_actors.http.auth import SignInThrottle
from piwf_actors.http.console.core import PREFIX as CONSOLE_PREFIX
from piwf_actors.http.console.pages import GET as CONSOLE_GET
from piwf_actors.http.console.pages import POST as CONSOLE_POST
from piwf_actors.http.hook_config import HOOK_PATH
from piwf_actors.http.openapi import openapi_document
from piwf_actors.http.routes import ROUTES, STATUS_OF_OUTCOME
from piwf_actors.protocol.catalog import OPERATIONS
from piwf_actors.protocol.envelope import OUTCOMES


def test_every_route_is_in_the_description_and_nothing_else() -> None:
    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    described = {(method.upper(), path) for path, methods in document["paths"].items() for method in methods}
    assert described == {(r.method, r.path) for r in ROUTES} | {("GET", "/api/v1/openapi.json"), ("POST", HOOK_PATH)}
    for route in ROUTES:
        entry = document["paths"][route.path][route.method.lower()]
        assert entry["x-piwf-operation"] == route.operation and route.operation in OPERATIONS
        assert entry["x-piwf-role"] == route.role
        assert {p["name"] for p in entry["parameters"] if p["in"] == "path"} == set(route.path_params)
        if route.body and route.body_schema is None:
            properties = entry["requestBody"]["content"]["application/json"]["schema"]["properties"]
            spec = OPERATIONS[route.operation].payload
            assert set(properties) - {"expected_revision"} == set(spec) - set(route.path_params)


def test_the_hooks_path_is_described_as_signed_not_bearer() -> None:
    entry = openapi_document()["paths"][HOOK_PATH]["post"]
    assert entry["security"] == []  # the signature is the authentication, not a token
    assert [p["name"] for p in entry["parameters"] if p["in"] == "path"] == ["name"]
    headers = {p["name"] for p in entry["parameters"] if p["in"] == "header"}
    assert {"X-Hub-Signature-256", "Stripe-Signature"} <= headers
    assert "application/json" in entry["requestBody"]["content"]
    assert {"200", "201", "400", "401", "404", "409", "413", "422", "503"} <= set(entry["responses"])
    assert entry["x-piwf-operation"] == ["run.start", "message.send"]


def test_the_router_serves_exactly_the_table() -> None:
    app = build_app(port=None)  # type: ignore[arg-type]  # routing only: no request is made
    served = {(method, r.path) for r in app.app.routes for method in r.methods - {"HEAD"}}  # type: ignore[attr-defined]
    console = {(method, path) for method, path in served if path.startswith(CONSOLE_PREFIX)}
    described = {(method.upper(), path) for path, methods in openapi_document()["paths"].items() for method in methods}
    assert served - console == described  # every path the door serves but the console's is described
    assert served - console == {(r.method, r.path) for r in ROUTES} | {("GET", "/api/v1/openapi.json"),
                                                                       ("POST", HOOK_PATH)}
    # The console's pages are not API routes: the ones its table names, and no more.
    assert console == {("GET", CONSOLE_PREFIX + path) for path, _ in CONSOLE_GET} | {
        ("POST", CONSOLE_PREFIX + path) for path, _ in CONSOLE_POST}


def test_every_outcome_has_a_status() -> None:
    assert set(STATUS_OF_OUTCOME) == set(OUTCOMES)


def test_the_fixed_paths_are_in_the_table() -> None:
    fixed = {("GET", "/api/v1/runs"), ("POST", "/api/v1/runs"), ("GET", "/api/v1/runs/{run_id}"),
             ("POST", "/api/v1/runs/{run_id}/cancel"), ("POST", "/api/v1/runs/{run_id}/messages"),
             ("GET", "/api/v1/interactions"), ("POST", "/api/v1/interactions/{request_id}/answer"),
             ("GET", "/api/v1/host")}
    assert fixed <= {(r.method, r.path) for r in ROUTES}


def test_the_served_description_is_the_generated_one(door: Door) -> None:
    assert door.viewer.get("/api/v1/openapi.json").json() == openapi_document()
    assert door.client(None).get("/api/v1/openapi.json").status_code == 401


def test_run_list_pages_by_cursor(door: Door) -> None:
    started = [door.operator.post("/api/v1/runs", json={"workflow": flow("quick"), "input": i}).json()["receipt"]
               ["run_id"] for i in range(5)]
    seen: list[str] = []
    params = {"workflow": "quick", "limit": "2"}
    while True:
        page = door.viewer.get("/api/v1/runs", params=params).json()["receipt"]
        seen += [r["run_id"] for r in page["runs"]]
        if "next_cursor" not in page:
            break
        params = {**params, "cursor": page["next_cursor"]}
    assert sorted(seen) == sorted(started) and len(seen) == 5
    bad = door.viewer.get("/api/v1/runs", params={"cursor": "nonsense"})
    assert bad.status_code == 422 and "cursor" in bad.json()["error"]


@pytest.mark.parametrize(("provenance", "words"), [
    ({"kind": "human", "via": "http", "token": "ci", "client_id": "http-ci"}, "person via http (token ci)"),
    ({"kind": "human", "via": "socket", "client_id": "piwf-cli-1"}, "person via cli"),
])
def test_who_answered_names_the_http_token(provenance: dict, words: str) -> None:
    assert answered_by(provenance) == words


def test_failed_sign_ins_slow_down_per_address_and_memory_is_bounded() -> None:
    throttle = SignInThrottle(max_addresses=3)
    assert [throttle.failed("a", 0.0) for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert throttle.failed("b", 0.0) == 0.05
    assert throttle.failed("a", 1000.0) == 0.05  # forgotten after a quiet while
    throttle.succeeded("b")
    for address in ("c", "d", "e", "f"):
        throttle.failed(address, 1.0)
    assert len(throttle) == 3
