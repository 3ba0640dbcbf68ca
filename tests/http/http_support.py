"""The HTTP door against a real host: uvicorn on 127.0.0.1 with an ephemeral port, a real HTTP client.

`door` starts an in-process host with `http_address="127.0.0.1:0"`, makes an
operator and a viewer token through the socket (`http_token.add`, as
`piwf http token add` does), and gives the test an httpx client for each.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from testsupport import HOST_DEFAULTS, host_database, wait_for

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.actors.http_door import AddressQuery
from piwf_actors.client import Client
from piwf_actors.http.auth import new_token, token_digest

FLOWS = Path(__file__).resolve().parents[1] / "protocol" / "wf" / "flows.py"


def flow(attr: str) -> str:
    return f"{FLOWS}:{attr}"


def add_token(client: Client, name: str, role: str) -> str:
    token = new_token()
    response = client.request("http_token.add", {"name": name, "role": role, "token_sha256": token_digest(token)})
    assert response.outcome == "accepted", response
    return token


@dataclass
class Door:
    host: HostHandle
    base: str
    socket: Client
    operator: httpx.Client
    viewer: httpx.Client
    tokens: dict[str, str]
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        made = httpx.Client(base_url=self.base, headers=headers, timeout=30.0)
        self.clients.append(made)
        return made

    def wait_status(self, run_id: str, statuses: tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            view = self.operator.get(f"/api/v1/runs/{run_id}").json()["receipt"]
            return view if view["status"] in statuses else None

        return wait_for(done, timeout, f"run {run_id} in {statuses}")


def one_line_error(response: httpx.Response) -> str:
    """The door's own refusal: a JSON object with one `error` line (checked), its text."""
    body = response.json()
    assert isinstance(body.get("error"), str) and "\n" not in body["error"] and len(body["error"]) <= 1000, body
    return body["error"]


def start_door(state_dir: Path, **config: Any) -> tuple[HostHandle, str]:
    config.setdefault("database", host_database(state_dir))
    host = start_host(HostConfig(state_dir=state_dir, http_address="127.0.0.1:0", **{**HOST_DEFAULTS, **config}))
    door = host.actor("http")
    assert door is not None
    bound_host, port = door.ask(AddressQuery(), timeout=10)
    return host, f"http://{bound_host}:{port}"


@contextlib.contextmanager
def sse(client: httpx.Client, path: str) -> Iterator[Iterator[tuple[str, Any]]]:
    """The (event, data) pairs of a Server-Sent Events stream, as they come."""
    with client.stream("GET", path, timeout=httpx.Timeout(30.0)) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")

        def events() -> Iterator[tuple[str, Any]]:
            name, data = None, []
            for line in response.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and name is not None:
                    yield name, json.loads("\n".join(data))
                    name, data = None, []

        yield events()


@contextlib.contextmanager
def open_door(state_dir: Path, **config: Any) -> Iterator[Door]:
    """An in-process host with its door (`config` over the test defaults), an operator's and a viewer's
    token and a client for each; stopped on exit."""
    host, base = start_door(state_dir, **config)
    socket = Client(state_dir, client_id=f"http-tests-{uuid.uuid4().hex[:6]}")
    made: list[httpx.Client] = []
    try:
        tokens = {"ops": add_token(socket, "ops", "operator"), "eye": add_token(socket, "eye", "viewer")}
        d = Door(host, base, socket, httpx.Client(), httpx.Client(), tokens, made)
        d.operator = d.client(tokens["ops"])
        d.viewer = d.client(tokens["eye"])
        yield d
    finally:
        for client in made:
            client.close()
        socket.close()
        host.stop("test teardown")
