"""`piwf http token add | list | revoke` against a running host, the token used over HTTP, and `piwf show`
naming the token an answer came through."""

from __future__ import annotations

import json

import httpx
import pytest
from http_support import Door, flow
from test_api import _pending

from piwf_actors.cli.main import main


def _piwf(door: Door, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["--state-dir", str(door.host.paths.root), *args])
    return code, capsys.readouterr().out


def test_token_add_prints_it_once_and_show_names_it(door: Door, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # the answers table on one line per answer, whatever the terminal
    code, out = _piwf(door, capsys, "--json", "http", "token", "add", "deploy-bot", "--role", "operator")
    assert code == 0
    added = json.loads(out)
    token = added["token"]
    assert (added["name"], added["role"]) == ("deploy-bot", "operator") and token.startswith("piwf_")
    code, out = _piwf(door, capsys, "http", "token", "list")
    assert code == 0 and "deploy-bot" in out and token not in out
    code, _out = _piwf(door, capsys, "http", "token", "add", "deploy-bot")
    assert code == 1  # a live token has that name: conflict

    with httpx.Client(base_url=door.base, headers={"Authorization": f"Bearer {token}"}) as http:
        run_id = http.post("/api/v1/runs", json={"workflow": flow("decides"), "input": {"version": "2"}}
                           ).json()["receipt"]["run_id"]
        request = _pending(door, run_id)
        assert http.post(f"/api/v1/interactions/{request['request_id']}/answer", json={"choice": "ship"}
                         ).status_code == 200
        door.wait_status(run_id, ("done",))
        code, out = _piwf(door, capsys, "show", run_id)
        assert code == 0 and "person via http (token deploy-bot)" in " ".join(out.split())

        code, out = _piwf(door, capsys, "http", "token", "revoke", "deploy-bot")
        assert code == 0 and "revoked" in out
        assert http.get("/api/v1/runs").status_code == 401
