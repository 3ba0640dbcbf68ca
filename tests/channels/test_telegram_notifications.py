"""Notifications in Telegram: `notify(message=…, audience=…)` reaches the chats of the profiles that
route its audience — once, as a plain message without buttons, recorded `applying` before it is sent
and never sent again by itself once its outcome is unknown — besides the run's session outbox. A
notify without an audience stays in the outbox. A real host, the fake Bot API on 127.0.0.1."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from telegram_host import CHAT, TOKEN, sent, start, write_config
from testsupport import HostScript, execute, host_script_args, rows, wait_for

from piwf_actors.client import Client
from piwf_actors.testing.fake_telegram import FakeBotApi

NOTICES = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge, notify

    announce = define_workflow(
        name="announce", start_at="say",
        nodes={"say": notify(message=lambda ctx: f"Release {ctx.input['version']} is out", audience="operator"),
               "done": compute(run=lambda ctx: {"said": ctx.outputs["say"]["message"]})},
        edges=[edge("say", "done")],
    )
    # Oldest first: once `marker` is in the chat, the notifications before it had their turn.
    mixed = define_workflow(
        name="mixed", start_at="local",
        nodes={"local": notify(message="only for the session"),
               "other": notify(message="for security", audience="security"),
               "marker": notify(message="the marker", audience="operator")},
        edges=[edge("local", "other"), edge("other", "marker")],
    )
''')


@pytest.fixture
def notices(tmp_path: Path) -> Path:
    path = tmp_path / "notices.py"
    path.write_text(NOTICES)
    return path


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sure failures are tried again every second (the host runs in this process)."""
    from piwf_actors.store.commands import channels

    monkeypatch.setattr(channels, "MAX_RETRY_S", 1.0)


def _announce(host, notices: Path, version: str, **options: Any) -> str:
    return host.start_run(f"{notices}:announce", {"version": version}, **options)["receipt"]["run_id"]


def _texts(fake: FakeBotApi, chat_id: int = CHAT) -> list[str]:
    return [message["text"] for message in fake.messages(chat_id)]


def _in_chat(fake: FakeBotApi, text: str, timeout: float = 20) -> dict[str, Any]:
    return wait_for(lambda: next((m for m in fake.messages(CHAT) if m["text"] == text), None), timeout,
                    lambda: f"{text!r} in chat {CHAT}; it holds {_texts(fake)}")


def _effects(state_dir: Path) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT purpose, request_id, chat_id, status, attempt, error FROM channel_effect "
                           "WHERE purpose = 'notification' ORDER BY created_at")


def _polls_later(fake: FakeBotApi, count: int = 2) -> None:
    """Wait until the adapter polled `count` more times: it went round its loop, with time to send."""
    polls = len(fake.calls_of("getUpdates"))
    wait_for(lambda: len(fake.calls_of("getUpdates")) >= polls + count, 15, f"{count} more polls")


def test_a_notification_is_sent_once_to_its_audiences_chat_and_stays_in_the_outbox(guard, state_dir, setup, fake,
                                                                                   notices) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = _announce(host, notices, "1.2", session_id="sess-1")
    assert host.wait_for_run(run_id, timeout=30)["output"] == {"said": "Release 1.2 is out"}
    message = _in_chat(fake, "Release 1.2 is out")
    assert message["reply_markup"] is None  # a plain message: no buttons, no reply asked for
    _polls_later(fake)
    assert [call["text"] for call in sent(fake)] == ["Release 1.2 is out"]
    [effect] = _effects(state_dir)
    assert (effect["status"], effect["chat_id"], effect["attempt"]) == ("applied", str(CHAT), 1)
    # The outbox has it as before, with its audience.
    with Client(state_dir) as client:
        listed = client.request("interaction.list", {"session_id": "sess-1"}).receipt["messages"]
    [outbox] = [m for m in listed if m["kind"] == "notify"]
    assert outbox["message_id"] == effect["request_id"]
    assert outbox["body"] == {"node_id": "say", "message": "Release 1.2 is out", "audience": "operator"}


@pytest.mark.parametrize(("audiences", "expected"), [
    (("operator",), ["the marker"]),
    # A catch-all profile gets every notification that names an audience, never one without.
    (("*",), ["for security", "the marker"]),
])
def test_a_notification_goes_only_where_its_audience_is_routed(guard, state_dir, setup, fake, notices, tmp_path,
                                                               audiences, expected) -> None:
    config = write_config(tmp_path / "routes", audiences=audiences)
    host = start(guard, state_dir, {**setup, "config": config}, fake)
    run_id = host.start_run(f"{notices}:mixed", {})["receipt"]["run_id"]
    assert host.wait_for_run(run_id, timeout=30)["status"] == "done"
    _in_chat(fake, "the marker")
    _polls_later(fake)
    assert _texts(fake) == expected
    assert [call["text"] for call in sent(fake)] == expected
    outbox = rows(state_dir, "SELECT body FROM session_message WHERE kind = 'notify' ORDER BY created_at")
    assert [json.loads(row["body"])["message"] for row in outbox] == ["only for the session", "for security",
                                                                     "the marker"]


def test_a_host_killed_between_recording_a_notification_and_the_sends_outcome_never_sends_it_again(
        guard, state_dir, setup, fake, notices) -> None:
    fake.pause_before_response("sendMessage")
    script: HostScript = guard.start_script(host_script_args(
        state_dir, workflow=f"{notices}:announce", input={"version": "7"}, config_dir=setup["config"],
        telegram_api_base=fake.url, channel_poll_timeout_s=1))
    script.value("RUN")
    assert fake.reached("sendMessage").wait(20), "the sendMessage to reach the fake"
    [recorded] = _effects(state_dir)
    assert recorded["status"] == "applying"  # recorded before the attempt
    for process in script.descendants():
        guard.track(process.pid)
    script.sigkill()
    fake.release("sendMessage")
    assert len(sent(fake)) == 1  # it did reach Telegram: the person sees it

    start(guard, state_dir, setup, fake)
    with Client(state_dir) as client:
        status = wait_for(lambda: (s := client.request("channel.status").receipt)["ambiguous"] and s, 15,
                          "the notification to be listed as of unknown outcome")
        [item] = status["ambiguous"]
        assert (item["profile"], item["purpose"], item["error"]) == ("ops", "notification",
                                                                     "host_restarted_without_receipt")
        _polls_later(fake, 3)
        assert len(sent(fake)) == 1  # never sent again by itself
        # A person who looked in the chat and found it there says so; it is no longer listed.
        confirmed = client.request("channel.recover", {"profile": "ops", "message_id": item["message_id"],
                                                       "action": "confirm"})
        assert confirmed.outcome == "accepted", confirmed
        assert client.request("channel.status").receipt["ambiguous"] == []
    _polls_later(fake)
    assert len(sent(fake)) == 1
    assert [e["status"] for e in _effects(state_dir)] == ["applied"]


def test_a_notification_whose_send_was_cut_off_is_sent_again_at_a_persons_word(guard, state_dir, setup, fake,
                                                                               notices) -> None:
    fake.fail_next("sendMessage", "drop")  # applied, and the answer lost: the outcome is unknown
    host = start(guard, state_dir, setup, fake)
    _announce(host, notices, "8")
    with Client(state_dir) as client:
        [item] = wait_for(lambda: client.request("channel.status").receipt["ambiguous"], 20,
                          "the dropped send to be of unknown outcome")
        _polls_later(fake)
        assert len(sent(fake)) == 1
        retried = client.request("channel.recover", {"profile": "ops", "message_id": item["message_id"],
                                                     "action": "retry"})
        assert retried.outcome == "accepted", retried
    wait_for(lambda: len(sent(fake)) == 2, 15, "the notification sent again")
    _polls_later(fake)
    assert [call["text"] for call in sent(fake)] == ["Release 8 is out"] * 2
    assert [(e["status"], e["attempt"]) for e in _effects(state_dir)] == [("applied", 2)]


@pytest.mark.slow  # kept out of make test's 10-minute budget: make test-slow (CI runs it too)
def test_a_notification_sent_while_telegram_is_unreachable_is_delivered_once_it_is_back(
        guard, state_dir, setup, fake, notices, quick_retries) -> None:
    host = start(guard, state_dir, setup, fake)
    port = fake.port
    fake.stop()
    run_id = _announce(host, notices, "9")
    assert host.wait_for_run(run_id, timeout=30)["status"] == "done"  # the run does not wait for the chat
    with Client(state_dir) as client:
        [listed] = wait_for(lambda: [d for d in client.request("channel.status").receipt["undelivered"]
                                     if d["attempts"] >= 2], 30, "two refused attempts, listed for a person")
    assert listed["purpose"] == "notification" and "cannot connect" in listed["error"]
    back = FakeBotApi(token=TOKEN, port=port).start()
    try:
        wait_for(lambda: _texts(back) == ["Release 9 is out"], 20, "the notification once Telegram is back")
        _polls_later(back)
        assert len(sent(back)) == 1
        with Client(state_dir) as client:
            assert client.request("channel.status").receipt["undelivered"] == []
    finally:
        back.stop()


def test_a_notification_of_a_run_finished_before_the_channel_was_configured_is_delivered(
        guard, state_dir, setup, fake, notices, tmp_path) -> None:
    """The run ended in an earlier host's life, with no channel at all; the next host's channel sends it."""
    first = guard.start_host(state_dir, config_dir=tmp_path / "no-channels", max_workers=1)
    run_id = _announce(first, notices, "10")
    assert first.wait_for_run(run_id, timeout=30)["status"] == "done"
    first.stop()
    start(guard, state_dir, setup, fake)
    _in_chat(fake, "Release 10 is out")
    _polls_later(fake)
    assert len(sent(fake)) == 1


def test_a_notification_older_than_a_day_is_not_sent(guard, state_dir, setup, fake, notices, tmp_path) -> None:
    """A new profile (or chat) does not get an old backlog: notifications are for channels only for a
    day after they are written."""
    first = guard.start_host(state_dir, config_dir=tmp_path / "no-channels", max_workers=1)
    old = _announce(first, notices, "old")
    assert first.wait_for_run(old, timeout=30)["status"] == "done"
    first.stop()
    # Written a day and a minute ago, as far as the next host can tell.
    assert execute(state_dir, "UPDATE session_message SET created_at = created_at - 86460 WHERE run_id = ?",
                   (old,)) == 1
    host = start(guard, state_dir, setup, fake)
    _announce(host, notices, "new")
    _in_chat(fake, "Release new is out")
    _polls_later(fake)
    assert _texts(fake) == ["Release new is out"]
