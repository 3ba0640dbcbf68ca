"""The `door` fixture: an in-process host with its HTTP door (see http_support.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from http_support import Door, add_token, start_door

from piwf_actors.client import Client


@pytest.fixture
def door(state_dir: Path) -> Iterator[Door]:
    host, base = start_door(state_dir)
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
