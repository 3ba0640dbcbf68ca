"""The door caches live tokens (actors/http_door.py, `_Port.token`) and a revocation still holds at once:
through this host, from the first request after the revocation's answer; through the active host, on a
standby's door, within TOKEN_RECHECK_S."""

from __future__ import annotations

from pathlib import Path

import httpx
from http_support import Door, add_token, one_line_error, start_door
from testsupport import wait_for

from piwf_actors.actors.http_door import TOKEN_RECHECK_S
from piwf_actors.client import Client


def test_a_revoked_or_replaced_token_is_refused_from_the_next_request_on(door: Door) -> None:
    for round_ in range(10):  # each round: a cached token, then its revocation, then the very next request
        name = f"bot-{round_}"
        token = add_token(door.socket, name, "operator")
        http = door.client(token)
        for _ in range(3):
            assert http.get("/api/v1/host").status_code == 200
        assert door.socket.request("http_token.revoke", {"name": name}).outcome == "accepted"
        refused = http.get("/api/v1/host")
        assert refused.status_code == 401 and one_line_error(refused) == "unknown or revoked token", round_

    # A name given a new token: the old one is refused at once, the new one is served.
    old = add_token(door.socket, "rotating", "viewer")
    assert door.client(old).get("/api/v1/runs").status_code == 200
    assert door.socket.request("http_token.revoke", {"name": "rotating"}).outcome == "accepted"
    new = add_token(door.socket, "rotating", "operator")
    assert door.client(old).get("/api/v1/runs").status_code == 401
    assert door.client(new).get("/api/v1/runs").status_code == 200


def test_a_standby_door_refuses_a_token_revoked_through_the_active_host(state_dir: Path,
                                                                         other_state_dir: Path) -> None:
    shared = f"sqlite://{other_state_dir}/shared.db"
    active, _ = start_door(state_dir / "a", database=shared, lease_s=300.0, host_id="host-a")
    standby, standby_base = start_door(state_dir / "b", database=shared, lease_s=300.0, host_id="host-b")
    try:
        assert standby.role == "standby"
        with Client(active.paths.root) as client:
            token = add_token(client, "reader", "viewer")
            with httpx.Client(base_url=standby_base, headers={"Authorization": f"Bearer {token}"}) as http:
                assert http.get("/api/v1/runs").status_code == 200  # looked up, and cached, by the standby
                assert client.request("http_token.revoke", {"name": "reader"}).outcome == "accepted"
                # The standby's gateway made no change: its cache lets go after TOKEN_RECHECK_S at most.
                wait_for(lambda: http.get("/api/v1/runs").status_code == 401, TOKEN_RECHECK_S + 20,
                         "the standby's door refusing the revoked token")
    finally:
        standby.stop("test teardown")
        active.stop("test teardown")
