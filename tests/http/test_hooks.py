"""Signed webhooks (`POST /hooks/NAME`, docs/http.md "Webhooks") against a real host and a real HTTP client on
127.0.0.1: a signed delivery starts one run with the body as its input; a redelivery adopts it; forged,
missing and stale signatures are 401; the same delivery id with another body is a 409; the message form
reaches the run a field names; a secret file others may read stops the start in one line; the host's log
(a real `piwf-host` process) never holds the secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_support import one_line_error, start_door
from testsupport import BIN_PIWF_HOST, ProcessGuard, guarded, host_database, wait_for

from piwf_actors import HostHandle
from piwf_actors.client import Client
from piwf_actors.errors import HostError
from piwf_actors.paths import StatePaths
from piwf_actors.store.reader import StoreReader

VALUES = Path(__file__).resolve().parents[1] / "protocol" / "wf" / "values.py"
SECRET = "It's a Secret to Everybody " + uuid.uuid4().hex
TAG_VAR = "PIWF_HOOKS_TEST_TAG"


def write_hooks(state_dir: Path, text: str, secrets: dict[str, str], mode: int = 0o600) -> None:
    state_dir.mkdir(mode=0o700, exist_ok=True)
    (state_dir / "hooks.toml").write_text(text)
    for name, value in secrets.items():
        path = state_dir / name
        path.write_text(value + "\n")
        path.chmod(mode)


HOOKS = f"""
[push]
workflow = "{VALUES}:echo"
secret_file = "push.secret"

[go]
topic = "go"
run_field = "target.run"
secret_file = "push.secret"

[pay]
workflow = "{VALUES}:echo"
secret_file = "push.secret"
signature = "stripe"
"""


def github_headers(raw: bytes, delivery: str | None, secret: str = SECRET) -> dict[str, str]:
    headers = {"X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest(),
               "Content-Type": "application/json"}
    if delivery is not None:
        headers["X-GitHub-Delivery"] = delivery
    return headers


def stripe_headers(raw: bytes, at: int, secret: str = SECRET) -> dict[str, str]:
    signed = hmac.new(secret.encode(), f"{at}.".encode() + raw, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={at},v1={'0' * 64},v1={signed}", "Content-Type": "application/json"}


@pytest.fixture
def hooked(state_dir: Path) -> Iterator[tuple[HostHandle, httpx.Client, Client]]:
    write_hooks(state_dir, HOOKS, {"push.secret": SECRET})
    host, base = start_door(state_dir)
    http = httpx.Client(base_url=base, timeout=30.0)
    socket = Client(state_dir)
    try:
        yield host, http, socket
    finally:
        http.close()
        socket.close()
        host.stop("test teardown")


def _runs(socket: Client) -> list[dict[str, Any]]:
    return socket.request("run.list", {"workflow": "echo"}).receipt["runs"]


def _done(socket: Client, run_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        view = socket.request("run.get", {}, run_id=run_id).receipt
        return view if view["status"] in ("done", "failed", "cancelled") else None

    return wait_for(finished, 30, f"run {run_id} finished")


def test_a_signed_delivery_starts_one_run_and_a_redelivery_adopts_it(hooked: Any) -> None:
    _host, http, socket = hooked
    body = {"ref": "refs/heads/main", "after": "c0ffee", "commits": [{"id": 1}]}
    raw = json.dumps(body).encode()
    first = http.post("/hooks/push", content=raw, headers=github_headers(raw, "d-1"))
    assert first.status_code == 201, first.text
    assert first.json()["outcome"] == "accepted"
    run_id = first.json()["receipt"]["run_id"]
    view = _done(socket, run_id)
    assert view["status"] == "done" and view["output"] == body  # the body was the run's input, as sent
    again = http.post("/hooks/push", content=raw, headers=github_headers(raw, "d-1"))
    assert again.status_code == 200 and again.json()["outcome"] == "adopted"
    assert again.json()["receipt"] == first.json()["receipt"]
    assert [run["run_id"] for run in _runs(socket)] == [run_id]
    # A new delivery id is a new run.
    other = http.post("/hooks/push", content=raw, headers=github_headers(raw, "d-2"))
    assert other.status_code == 201 and other.json()["receipt"]["run_id"] != run_id


def test_forged_missing_and_replayed_deliveries_are_refused(hooked: Any) -> None:
    _host, http, socket = hooked
    raw = b'{"ref": "main"}'
    forged = http.post("/hooks/push", content=raw, headers=github_headers(raw, "d-9", secret="guess"))
    assert forged.status_code == 401 and one_line_error(forged) == "X-Hub-Signature-256 does not match the body"
    unsigned = http.post("/hooks/push", content=raw, headers={"X-GitHub-Delivery": "d-9"})
    assert unsigned.status_code == 401 and "no X-Hub-Signature-256 header" in one_line_error(unsigned)
    wrong_prefix = http.post("/hooks/push", content=raw, headers={
        **github_headers(raw, "d-9"), "X-Hub-Signature-256": "sha1=00"})
    assert wrong_prefix.status_code == 401
    # A signature of another body (a body changed in flight) does not hold.
    tampered = http.post("/hooks/push", content=b'{"ref": "evil"}', headers=github_headers(raw, "d-9"))
    assert tampered.status_code == 401
    assert _runs(socket) == []
    # Signed, but without a delivery id: nothing to make a redelivery safe with.
    no_id = http.post("/hooks/push", content=raw, headers=github_headers(raw, None))
    assert no_id.status_code == 400 and "X-GitHub-Delivery" in one_line_error(no_id)
    not_json = http.post("/hooks/push", content=b"{", headers=github_headers(b"{", "d-8"))
    assert not_json.status_code == 400 and one_line_error(not_json).startswith("the body is not JSON")
    assert http.post("/hooks/nope", content=raw, headers=github_headers(raw, "d-9")).status_code == 404
    big = b'{"x": "' + b"a" * (1024 * 1024) + b'"}'
    assert http.post("/hooks/push", content=big, headers=github_headers(big, "d-7")).status_code == 413
    # Signed by the sender, but a delivery id seen before with another body: a replay, refused.
    first = http.post("/hooks/push", content=raw, headers=github_headers(raw, "d-9"))
    assert first.status_code == 201
    changed = b'{"ref": "other"}'
    replay = http.post("/hooks/push", content=changed, headers=github_headers(changed, "d-9"))
    assert replay.status_code == 409 and replay.json()["outcome"] == "conflict", replay.text
    assert len(_runs(socket)) == 1


def test_the_message_form_sends_the_body_to_the_run_a_field_names(hooked: Any, state_dir: Path) -> None:
    _host, http, socket = hooked
    started = socket.request("run.start", {"workflow": f"{VALUES}:waits"})
    run_id = started.receipt["run_id"]
    body = {"target": {"run": run_id}, "approved": True}
    raw = json.dumps(body).encode()
    sent = http.post("/hooks/go", content=raw, headers=github_headers(raw, "m-1"))
    assert sent.status_code == 200 and sent.json()["outcome"] == "accepted", sent.text
    assert _done(socket, run_id)["output"] == body  # wait_message("go") took the body
    again = http.post("/hooks/go", content=raw, headers=github_headers(raw, "m-1"))
    assert again.status_code == 200 and again.json()["outcome"] == "adopted"
    # The message keeps who sent it: the HTTP door and the hook's name (the mailbox's sender column).
    reader = StoreReader(StatePaths.resolve(state_dir, host_database(state_dir)).database)
    try:
        rows = reader.all("SELECT sender FROM run_message WHERE run_id = ?", (run_id,))
    finally:
        reader.close()
    assert [json.loads(row[0]) for row in rows] == [
        {"kind": "client", "client_id": "hook-go", "via": "http", "token": "hook:go", "remote": "127.0.0.1"}]
    missing = json.dumps({"approved": True}).encode()
    refused = http.post("/hooks/go", content=missing, headers=github_headers(missing, "m-2"))
    assert refused.status_code == 422 and "target.run" in refused.json()["error"]
    nowhere = json.dumps({"target": {"run": "run_nope"}}).encode()
    assert http.post("/hooks/go", content=nowhere, headers=github_headers(nowhere, "m-3")).status_code == 404


def test_the_stripe_form_checks_the_timestamp_and_takes_the_event_id(hooked: Any) -> None:
    _host, http, socket = hooked
    body = {"id": "evt_1", "type": "charge.succeeded"}
    raw = json.dumps(body).encode()
    now = int(time.time())
    ok = http.post("/hooks/pay", content=raw, headers=stripe_headers(raw, now))
    assert ok.status_code == 201, ok.text
    again = http.post("/hooks/pay", content=raw, headers=stripe_headers(raw, now + 1))  # Stripe re-signs a retry
    assert again.status_code == 200 and again.json()["receipt"] == ok.json()["receipt"]
    stale = http.post("/hooks/pay", content=raw, headers=stripe_headers(raw, now - 3600))
    assert stale.status_code == 401 and "timestamp" in one_line_error(stale)
    forged = http.post("/hooks/pay", content=raw, headers=stripe_headers(raw, now, secret="guess"))
    assert forged.status_code == 401
    assert len(_runs(socket)) == 1


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_secret_file_others_may_read_stops_the_start_in_one_line(state_dir: Path, mode: int) -> None:
    write_hooks(state_dir, HOOKS, {"push.secret": SECRET}, mode=mode)
    with pytest.raises(HostError) as raised:
        start_door(state_dir)
    text = str(raised.value)
    assert "\n" not in text and SECRET not in text
    assert re.search(r"webhooks: hooks\.toml \[(push|go|pay)\]: .*push\.secret is readable by group or others "
                     r"\(mode 0\d+\); run chmod 600 on it", text), text


@pytest.mark.parametrize(("text", "problem"), [
    ('[push]\nworkflow = "x.py:y"\n', "secret_file is missing"),
    ('[push]\nsecret_file = "push.secret"\n', "declare either workflow"),
    ('[push]\nworkflow = "x.py:y"\ntopic = "t"\nrun_field = "r"\nsecret_file = "push.secret"\n',
     "declare either workflow"),
    ('[push]\nworkflow = "x.py:y"\nsecret_file = "absent.secret"\n', "does not exist"),
    ('[push]\nworkflow = "x.py:y"\nsecret_file = "push.secret"\nsignature = "md5"\n', "signature must be one of"),
    ('[push]\nworkflow = "x.py:y"\nsecret_file = "push.secret"\nwat = 1\n', "unknown key(s) wat"),
    ('["Bad Name"]\nworkflow = "x.py:y"\nsecret_file = "push.secret"\n', "a hook's name is"),
    ("[push\n", "not TOML"),
])
def test_a_bad_hooks_file_stops_the_start_in_one_line(state_dir: Path, text: str, problem: str) -> None:
    write_hooks(state_dir, text, {"push.secret": SECRET})
    with pytest.raises(HostError, match=re.escape(problem)):
        start_door(state_dir)


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessGuard]:
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: ProcessGuard(TAG_VAR, tag, tmp_path))


def test_the_host_log_never_holds_the_secret(guard: ProcessGuard, state_dir: Path) -> None:
    write_hooks(state_dir, HOOKS, {"push.secret": SECRET})
    script = guard.start_script(["--state-dir", str(state_dir), "--http", "127.0.0.1:0", "--max-workers", "1",
                                 "--log-level", "DEBUG"], command=[BIN_PIWF_HOST])
    found = wait_for(lambda: re.search(r"HTTP door listening on http://127\.0\.0\.1:(\d+)", script.log()), 30,
                     lambda: f"the door's line in the log:\n{script.log()}")
    wait_for(lambda: "host started" in script.log(), 30, "the host's start")
    raw = b'{"n": 1}'
    with httpx.Client(base_url=f"http://127.0.0.1:{found.group(1)}", timeout=30.0) as http:
        assert http.post("/hooks/push", content=raw, headers=github_headers(raw, "l-1")).status_code == 201
        assert http.post("/hooks/push", content=raw, headers=github_headers(raw, "l-2", "guess")).status_code == 401
        assert http.post("/hooks/push", content=b"{}", headers=github_headers(b"{}", "l-1")).status_code == 409
    wait_for(lambda: "a replay" in script.log(), 30, "the replay's log line")
    log = script.log()
    assert "hook push: refused a delivery from 127.0.0.1: X-Hub-Signature-256 does not match the body" in log
    assert "hook push: refused delivery 'l-1' from 127.0.0.1: a replay" in log
    assert SECRET not in log and SECRET[:12] not in log
    assert hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest() not in log  # nor a signature
    assert "Traceback" not in log
    assert os.stat(state_dir / "push.secret").st_mode & 0o777 == 0o600


def test_piwf_host_with_a_readable_secret_stops_with_one_line(guard: ProcessGuard, state_dir: Path) -> None:
    write_hooks(state_dir, HOOKS, {"push.secret": SECRET}, mode=0o644)
    script = guard.start_script(["--state-dir", str(state_dir), "--http", "127.0.0.1:0"], command=[BIN_PIWF_HOST])
    wait_for(lambda: script.proc.poll() is not None, 30, "piwf-host's exit")
    assert script.proc.returncode != 0
    log = script.log()
    assert "push.secret is readable by group or others (mode 0644); run chmod 600 on it" in log, log
    assert "Traceback" not in log and SECRET not in log


def test_signature_checks_as_pure_functions() -> None:
    """`signature_refusal` with a chosen clock: malformed and non-ASCII headers, Stripe's several v1 and its
    tolerance on both sides, another sender's header and prefix."""
    from piwf_actors.channels.config import Secret
    from piwf_actors.http.hook_config import Hook
    from piwf_actors.http.hooks import signature_refusal

    raw = b'{"a": 1}'
    github = Hook("g", Secret(SECRET), workflow="w.py:w")
    good = github_headers(raw, "x")["X-Hub-Signature-256"]
    assert signature_refusal(github, {"x-hub-signature-256": good}, raw, 0) is None
    assert signature_refusal(github, {"x-hub-signature-256": good.upper().replace("SHA256=", "sha256=")}, raw, 0) \
        is None  # hex in capitals is the same digest
    assert signature_refusal(github, {"x-hub-signature-256": "sha256=é" + good[8:]}, raw, 0) is not None
    assert signature_refusal(github, {"x-hub-signature-256": good + "00"}, raw, 0) is not None
    plain = Hook("p", Secret(SECRET), workflow="w.py:w", signature_header="X-Signature", signature_prefix="")
    assert signature_refusal(plain, {"x-signature": good[len("sha256="):]}, raw, 0) is None
    assert signature_refusal(plain, {"x-hub-signature-256": good}, raw, 0) == "no X-Signature header: the delivery " \
                                                                              "is not signed"
    stripe = Hook("s", Secret(SECRET), workflow="w.py:w", signature="stripe", signature_header="Stripe-Signature",
                  signature_prefix="", delivery_header=None, delivery_field="id", tolerance_s=300)
    signed = stripe_headers(raw, 1000)["Stripe-Signature"]
    assert signature_refusal(stripe, {"stripe-signature": signed}, raw, 1299) is None
    assert signature_refusal(stripe, {"stripe-signature": signed}, raw, 701) is None
    assert "timestamp" in str(signature_refusal(stripe, {"stripe-signature": signed}, raw, 1301))
    assert "timestamp" in str(signature_refusal(stripe, {"stripe-signature": signed}, raw, 699))
    for bad in ("t=abc,v1=00", "v1=00", "t=1000", "", "garbage"):
        assert signature_refusal(stripe, {"stripe-signature": bad}, raw, 1000) is not None, bad
