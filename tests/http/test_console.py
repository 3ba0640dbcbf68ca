"""The web console's pages over HTTP against a real host (no browser): sign-in, every page, the forms,
CSRF and roles. The browser drives the same pages in tests/browser/."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest
from http_support import Door, flow
from testsupport import wait_for

from piwf_actors.client import Client

PAGES = ["/console/inbox", "/console/runs", "/console/effects", "/console/schedules", "/console/resources",
         "/console/host"]


def signed_in(door: Door, token: str) -> httpx.Client:
    """A browser-like client signed in with `token`: the form's check, then the session cookie."""
    client = door.client(None)
    page = client.get("/console/signin")
    assert page.status_code == 200
    check = re.search(r'name="check" value="([^"]+)"', page.text)
    assert check is not None, page.text
    answer = client.post("/console/signin", data={"check": check.group(1), "token": token, "next": "/console/runs"})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/runs"
    cookie = answer.headers["set-cookie"]
    assert "piwf_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict",
                                                                                                       "strict")
    return client


def csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


def start(door: Door, name: str, **body: object) -> str:
    answer = door.operator.post("/api/v1/runs", json={"workflow": flow(name), **body})
    assert answer.status_code == 201, answer.text
    return answer.json()["receipt"]["run_id"]


def pending(door: Door, run_id: str) -> dict:
    def found() -> dict | None:
        listed = door.viewer.get("/api/v1/interactions").json()["receipt"]["requests"]
        return next((r for r in listed if r["run_id"] == run_id), None)

    return wait_for(found, 30, f"the request of run {run_id}")


def test_every_page_is_200_signed_in_303_without_and_opens_with_a_bearer_token(door: Door) -> None:
    run_id = start(door, "decides", input={"version": "2.0"})
    pending(door, run_id)
    browser = signed_in(door, door.tokens["ops"])
    anonymous = door.client(None)
    for path in [*PAGES, f"/console/runs/{run_id}"]:
        page = browser.get(path)
        assert page.status_code == 200, (path, page.text)
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert '<meta name="viewport"' in page.text
        away = anonymous.get(path)
        assert away.status_code == 303 and away.headers["location"].startswith("/console/signin?next="), path
        assert door.operator.get(path).status_code == 200, path  # Authorization: Bearer opens the pages too
    assert anonymous.get("/console/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert anonymous.get("/console").headers["location"] == "/console/inbox"
    for name in ("console.css", "console.js"):  # public: the sign-in page needs them
        assert anonymous.get(f"/console/static/{name}").status_code == 200
    assert anonymous.get("/console/static/secret.txt").status_code == 404
    # What the pages say: the run in the list, its picture and why it waits, the decision in the inbox.
    assert run_id in browser.get("/console/runs").text
    one = browser.get(f"/console/runs/{run_id}").text
    assert "approve" in one and "waiting for an answer (decision" in one and "n-waiting" in one
    inbox = browser.get("/console/inbox").text
    assert "Ship 2.0?" in inbox and "Ship it" in inbox and "What should change?" in inbox
    assert "active" in browser.get("/console/host").text


def test_a_decision_answered_from_the_inbox_records_via_http_and_a_second_click_is_adopted(door: Door) -> None:
    run_id = start(door, "decides", input={"version": "3.1"})
    request = pending(door, run_id)
    browser = signed_in(door, door.tokens["ops"])
    inbox = browser.get("/console/inbox")
    key = re.search(r'name="key" value="([^"]+)"', inbox.text)
    assert key is not None
    form = {"csrf": csrf(inbox), "key": key.group(1), "back": "/console/inbox", "choice": "fix",
            "input.instructions": "more tests"}
    answered = browser.post(f"/console/inbox/{request['request_id']}?kind=decision", data=form)
    assert answered.status_code == 303, answered.text
    assert answered.headers["location"].startswith("/console/inbox?note=decision.answer")
    assert "accepted" in httpx.URL(answered.headers["location"]).params["note"]
    done = door.wait_status(run_id, ("done",))
    assert done["output"] == {"choice": "fix", "input": {"instructions": "more tests"}}
    by = next(n for n in done["nodes"] if n["node_id"] == "approve")["answer"]["by"]
    assert (by["via"], by["token"]) == ("http", "ops")
    assert "person via http (token ops)" in browser.get(f"/console/runs/{run_id}").text
    again = browser.post(f"/console/inbox/{request['request_id']}?kind=decision", data=form)
    assert "adopted" in httpx.URL(again.headers["location"]).params["note"]  # the same form, the same request


def test_a_checkpoint_and_an_agent_step_are_answered_from_their_forms(door: Door) -> None:
    asks, agent = start(door, "asks"), start(door, "asks_agent")
    checkpoint, step = pending(door, asks), pending(door, agent)
    browser = signed_in(door, door.tokens["ops"])
    token = csrf(browser.get("/console/inbox"))
    bad = browser.post(f"/console/inbox/{step['request_id']}?kind=agent", data={"csrf": token, "json": "{nope"})
    assert bad.status_code == 303 and "refused: the value is not JSON" in httpx.URL(bad.headers["location"]).params["note"]
    ok = browser.post(f"/console/inbox/{step['request_id']}?kind=agent",
                      data={"csrf": token, "json": '{"summary": "one line"}'})
    assert "accepted" in httpx.URL(ok.headers["location"]).params["note"], ok.headers["location"]
    assert door.wait_status(agent, ("done",))["output"] == {"summary": "one line"}
    typed = browser.post(f"/console/inbox/{checkpoint['request_id']}?kind=checkpoint",
                         data={"csrf": token, "text": "1.2.0", "json": ""})
    assert "accepted" in httpx.URL(typed.headers["location"]).params["note"]
    assert door.wait_status(asks, ("done",))["output"] == "1.2.0"


def test_csrf_is_checked_on_every_post_and_a_viewer_gets_403(door: Door) -> None:
    run_id = start(door, "asks")
    request = pending(door, run_id)
    path = f"/console/inbox/{request['request_id']}?kind=checkpoint"
    browser = signed_in(door, door.tokens["ops"])
    assert browser.post(path, data={"text": "x"}).status_code == 403  # no CSRF token
    assert browser.post(path, data={"text": "x", "csrf": "forged"}).status_code == 403
    assert browser.post(f"/console/runs/{run_id}/cancel", data={"csrf": "forged"}).status_code == 403
    assert browser.post("/console/signout", data={"csrf": ""}).status_code == 403
    assert door.client(None).post(path, data={"text": "x"}).status_code == 401  # no session at all
    viewer = signed_in(door, door.tokens["eye"])
    page = viewer.get("/console/inbox")
    assert page.status_code == 200 and request["request_id"] in page.text
    assert f"/console/inbox/{request['request_id']}" not in page.text  # no answer form for a viewer
    assert "/cancel" not in viewer.get(f"/console/runs/{run_id}").text
    refused = viewer.post(path, data={"text": "x", "csrf": csrf(page)})
    assert refused.status_code == 403 and "needs an operator" in refused.json()["error"]
    assert door.viewer.post(path, data={"text": "x"}).status_code == 403  # a viewer's Bearer token too
    # The sign-in form has its own check (there is no session yet).
    assert door.client(None).post("/console/signin", data={"token": door.tokens["ops"]}).status_code == 403
    assert door.socket.request("run.get", run_id=run_id).receipt["status"] == "parked"  # nothing was answered
    # An operator's Bearer request needs no CSRF token: a browser never sends that header by itself.
    assert door.operator.post(path, data={"text": "bearer"}).status_code == 303
    assert door.wait_status(run_id, ("done",))["output"] == "bearer"


def test_a_wrong_token_is_refused_slowly_and_sign_out_or_revoking_ends_the_session(door: Door) -> None:
    client = door.client(None)
    page = client.get("/console/signin")
    check = re.search(r'name="check" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    wrong = client.post("/console/signin", data={"check": check, "token": "piwf_wrong"})
    assert wrong.status_code == 401 and "unknown or revoked token" in wrong.text
    browser = signed_in(door, door.tokens["ops"])
    token = csrf(browser.get("/console/runs"))
    out = browser.post("/console/signout", data={"csrf": token})
    assert out.status_code == 303 and out.headers["location"] == "/console/signin"
    assert browser.get("/console/runs").status_code == 303
    again = signed_in(door, door.tokens["eye"])
    assert again.get("/console/runs").status_code == 200
    assert door.socket.request("http_token.revoke", {"name": "eye"}).outcome == "accepted"
    assert again.get("/console/runs").status_code == 303  # the session's token is looked up each time


def test_runs_filter_search_and_page_by_cursor(door: Door) -> None:
    quick = [start(door, "quick") for _ in range(3)]
    other = start(door, "asks")
    for run_id in quick:
        door.wait_status(run_id, ("done",))
    browser = signed_in(door, door.tokens["eye"])
    first = browser.get("/console/runs", params={"workflow": "quick", "limit": 2})
    assert first.status_code == 200 and other not in first.text
    shown = [run_id for run_id in quick if f'href="/console/runs/{run_id}"' in first.text]
    assert len(shown) == 2
    older = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert older is not None
    second = browser.get(older.group(1).replace("&amp;", "&"))
    assert [run_id for run_id in quick if f'href="/console/runs/{run_id}"' in second.text] == [
        r for r in quick if r not in shown]
    assert browser.get("/console/runs", params={"status": "done"}).text.count("s-done") >= 3
    assert "unknown status" in browser.get("/console/runs", params={"status": "bogus"}).text
    found = browser.get("/console/runs", params={"q": other[:-3]})
    assert found.status_code == 303 and found.headers["location"] == f"/console/runs/{other}"
    several = browser.get("/console/runs", params={"q": "run_"})
    assert several.status_code == 200 and all(run_id in several.text for run_id in [*quick, other])


def test_the_console_streams_open_with_the_cookie(door: Door) -> None:
    browser = signed_in(door, door.tokens["eye"])
    with browser.stream("GET", "/console/streams/inbox") as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("event: ")) == "event: interactions"
    assert door.client(None).get("/console/streams/inbox").status_code == 303
    assert browser.get("/console/streams/nope").status_code == 404


def test_an_ambiguous_effect_is_listed_and_retried_from_the_effects_page(door: Door, state_dir: Path) -> None:
    marker = state_dir / "effect-marker"
    run_id = start(door, "effectful", input={"oracle": str(marker)})
    wait_for(marker.exists, 15, "the shell node to start")

    def worker_pid() -> int | None:
        for active in door.host.status()["scheduler"]["active"]:
            if active["run_id"] == run_id and active.get("pid"):
                return int(active["pid"])
        return None

    os.kill(wait_for(worker_pid, 10, "the run's worker"), signal.SIGKILL)
    parked = door.wait_status(run_id, ("parked",))
    assert parked["park_reason"] == "ambiguous_effect", parked
    (effect,) = [e for e in parked["effects"] if e["status"] == "ambiguous"]
    browser = signed_in(door, door.tokens["ops"])
    page = browser.get("/console/effects")
    assert effect["effect_id"] in page.text and run_id in page.text and "Retry" in page.text
    retried = browser.post(f"/console/effects/{effect['effect_id']}",
                           data={"csrf": csrf(page), "action": "retry", "back": "/console/effects"})
    assert "effect.resolve: accepted" in httpx.URL(retried.headers["location"]).params["note"]
    assert door.wait_status(run_id, ("done",))["status"] == "done"
    assert effect["effect_id"] not in browser.get("/console/effects").text


@pytest.fixture
def socket_client(door: Door) -> Client:
    return door.socket
