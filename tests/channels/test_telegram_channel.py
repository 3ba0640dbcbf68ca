"""Decisions in Telegram, end to end, against a fake Bot API on 127.0.0.1 that records every call.

A real host (in-process, or a host script for the crash test) reads a
channels.toml and credentials.toml from its own config directory, delivers a
release decision to the allowed chat with one button per choice, takes the
answer from a simulated tap, and edits the message when the decision
settles. Nothing here talks to anything but loopback.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from telegram_host import (
    CHAT,
    SECRET_PART,
    STRANGER,
    USER,
    buttons,
    delivered,
    sent,
    start,
    status,
    write_config,
)
from testsupport import HostScript, host_script_args, rows, wait_for

from piwf_actors.client import Client
from piwf_actors.testing.fake_telegram import FakeBotApi


def test_a_decision_is_delivered_with_buttons_and_answered_once_by_an_allowed_tap(guard, state_dir, setup, fake,
                                                                                  caplog) -> None:
    caplog.set_level(logging.DEBUG)
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "1.2.0"})["receipt"]["run_id"]
    [message] = delivered(fake)
    assert message["text"].startswith("Ship 1.2.0?\n\nTests passed.\n\n• changelog updated")
    keys = buttons(message)
    assert set(keys) == {"Ship it", "Stop", "Needs changes ✎"}
    assert [call["chat_id"] for call in sent(fake)] == [CHAT]  # one send, to the allowed chat

    # A stranger's tap is refused with a notice and changes nothing.
    fake.tap(chat_id=CHAT, user_id=STRANGER, message_id=message["message_id"], data=keys["Ship it"])
    wait_for(lambda: fake.answered_callbacks(), 10, "the stranger's notice")
    assert "may not answer" in fake.answered_callbacks()[0]["text"]
    assert status(host, run_id) == "parked"

    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=keys["Ship it"])
    view = host.wait_for_run(run_id, timeout=20)
    assert (view["status"], view["output"]) == ("done", {"shipped": "1.2.0"})
    edited = wait_for(lambda: (m := fake.messages(CHAT)[0]).get("edited") and m, 10, "the message to be edited")
    assert edited["reply_markup"] is None and "✔ Ship it" in edited["text"] and str(USER) in edited["text"]
    assert fake.answered_callbacks()[1]["text"] == "Recorded: Ship it"
    [submission] = rows(state_dir, "SELECT provenance FROM interactive_submission")
    assert '"channel":"telegram"' in submission["provenance"] and f'"user_id":"{USER}"' in submission["provenance"]
    assert '"profile":"ops"' in submission["provenance"]
    # Who tapped, as Telegram names them: `piwf show` prints "telegram user N (UserN, @userN)".
    assert json.loads(submission["provenance"])["name"] == f"User{USER}"
    assert json.loads(submission["provenance"])["username"] == f"user{USER}"

    # A late tap on the settled message: refused, nothing happens twice.
    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=keys["Stop"])
    wait_for(lambda: len(fake.answered_callbacks()) == 3, 10, "the late tap's notice")
    assert "no longer open" in fake.answered_callbacks()[2]["text"]
    assert len(rows(state_dir, "SELECT 1 FROM interactive_submission")) == 1
    assert len(sent(fake)) == 1 and len(fake.calls_of("editMessageText")) == 1
    assert SECRET_PART not in caplog.text


def test_a_choice_that_needs_text_asks_for_it_and_takes_the_reply(guard, state_dir, setup, fake) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "2.0"})["receipt"]["run_id"]
    [message] = delivered(fake)
    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=buttons(message)["Needs changes ✎"])
    prompt = delivered(fake, 2)[1]
    assert fake.calls_of("sendMessage")[1]["reply_markup"]["force_reply"] is True
    assert "What should change?" in prompt["text"]
    # A stranger's reply, and a message that replies to nothing, change nothing.
    fake.reply(chat_id=CHAT, user_id=STRANGER, text="ship it anyway", reply_to_message_id=prompt["message_id"])
    fake.reply(chat_id=CHAT, user_id=USER, text="just chatting")
    # The stream's row is written with its first cursor, so it may not be there yet.
    wait_for(lambda: any(row["cursor"] > "0" for row in rows(state_dir, "SELECT cursor FROM channel_stream"))
             and not fake.pending_updates(), 10, "the two messages to be read")
    assert status(host, run_id) == "parked"
    fake.reply(chat_id=CHAT, user_id=USER, text="bump the changelog", reply_to_message_id=prompt["message_id"])
    view = host.wait_for_run(run_id, timeout=20)
    assert (view["status"], view["output"]) == ("done", {"fix": "bump the changelog"})
    edited = wait_for(lambda: (m := fake.messages(CHAT)[0]).get("edited") and m, 10, "the decision to be edited")
    assert "Needs changes: bump the changelog" in edited["text"]


def test_only_decisions_of_the_profile_audiences_are_sent(guard, state_dir, setup, fake) -> None:
    host = start(guard, state_dir, setup, fake)
    secret = host.start_run(f"{setup['flows']}:security", {"version": "9"})["receipt"]["run_id"]
    host.wait_for_run(secret, ("parked",), timeout=20)
    operator = host.start_run(f"{setup['flows']}:release", {"version": "3"})["receipt"]["run_id"]
    [message] = delivered(fake)
    assert message["text"].startswith("Ship 3?")
    assert host.get_run(operator)["status"] == "parked"
    assert len(sent(fake)) == 1


def test_a_clean_restart_neither_resends_nor_resettles_and_polls_from_the_stored_cursor(guard, state_dir, setup,
                                                                                        fake) -> None:
    host = start(guard, state_dir, setup, fake)
    done_run = host.start_run(f"{setup['flows']}:release", {"version": "1"})["receipt"]["run_id"]
    [message] = delivered(fake)
    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=buttons(message)["Stop"])
    host.wait_for_run(done_run, timeout=20)
    wait_for(lambda: fake.calls_of("editMessageText"), 10, "the settlement")
    waiting = host.start_run(f"{setup['flows']}:release", {"version": "2"})["receipt"]["run_id"]
    delivered(fake, 2)
    cursor = wait_for(lambda: rows(state_dir, "SELECT cursor FROM channel_stream")[0]["cursor"], 10, "a cursor")
    host.stop("restart")
    calls_before = len(fake.calls)

    host = start(guard, state_dir, setup, fake)
    polls = wait_for(lambda: [c["params"] for c in fake.calls[calls_before:] if c["method"] == "getUpdates"][:2]
                     if len([c for c in fake.calls[calls_before:] if c["method"] == "getUpdates"]) >= 2 else None,
                     15, "two polls from the new host")
    assert str(polls[0]["offset"]) == cursor  # from the stored cursor, not from 0
    later = [c["method"] for c in fake.calls[calls_before:]]
    assert "sendMessage" not in later and "editMessageText" not in later, later
    assert host.get_run(waiting)["status"] == "parked"
    with Client(state_dir) as client:
        assert client.request("channel.status").receipt["ambiguous"] == []


def _crash_host_script(guard, state_dir: Path, setup: dict[str, Path], fake: FakeBotApi) -> HostScript:
    args = host_script_args(state_dir, workflow=f"{setup['flows']}:release", input={"version": "7"},
                            config_dir=setup["config"], telegram_api_base=fake.url, channel_poll_timeout_s=1)
    return guard.start_script(args)


def test_a_host_killed_while_send_message_is_in_flight_leaves_one_send_and_an_ambiguous_delivery(
        guard, state_dir, setup, fake) -> None:
    fake.pause_before_response("sendMessage")
    script = _crash_host_script(guard, state_dir, setup, fake)
    run_id = script.value("RUN")
    assert fake.reached("sendMessage").wait(20), "the sendMessage to reach the fake"
    for process in script.descendants():
        guard.track(process.pid)
    script.sigkill()
    fake.release("sendMessage")
    assert len(sent(fake)) == 1  # it did reach Telegram: the person sees it

    host = start(guard, state_dir, setup, fake)
    with Client(state_dir) as client:
        status_now = wait_for(lambda: (s := client.request("channel.status").receipt)["ambiguous"] and s, 15,
                              "the delivery to be listed as ambiguous")
        [item] = status_now["ambiguous"]
        assert (item["profile"], item["purpose"], item["error"]) == ("ops", "delivery",
                                                                     "host_restarted_without_receipt")
        assert status_now["profiles"] == [{"profile": "ops", "running": True}]
        # Never re-sent by itself.
        polls = len(fake.calls_of("getUpdates"))
        wait_for(lambda: len(fake.calls_of("getUpdates")) >= polls + 2, 10, "two more polls")
        assert len(sent(fake)) == 1
        retried = client.request("channel.recover", {"profile": "ops", "message_id": item["message_id"],
                                                     "action": "retry"})
        assert retried.outcome == "accepted", retried
        assert retried.receipt["next_message_id"] is None  # a new copy, with buttons of its own
    wait_for(lambda: len(sent(fake)) == 2, 15, "the retried delivery")
    message = fake.messages(CHAT)[-1]
    assert message["text"].startswith("(sent again")
    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=buttons(message)["Ship it"])
    assert host.wait_for_run(run_id, timeout=20)["output"] == {"shipped": "7"}
    assert SECRET_PART not in script.log()


def test_an_unsafe_credentials_file_is_refused_and_the_host_keeps_running(guard, state_dir, setup, fake,
                                                                          tmp_path) -> None:
    config = write_config(tmp_path / "unsafe", credentials_mode=0o644)
    host = guard.start_host(state_dir, config_dir=config, channel_options={"telegram": {"api_base": fake.url}},
                            channel_poll_timeout_s=1)
    with Client(state_dir) as client:
        answer = client.request("channel.status").receipt
    assert answer["configured"] is True
    [profile] = answer["profiles"]
    assert profile["running"] is False and "mode 0644" in profile["error"] and "chmod 600" in profile["error"]
    assert SECRET_PART not in str(answer)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "1"})["receipt"]["run_id"]
    assert host.wait_for_run(run_id, ("parked",), timeout=20)["status"] == "parked"
    assert fake.calls == []


def test_telegram_asking_to_slow_down_is_honoured(guard, state_dir, setup, fake) -> None:
    fake.fail_next("sendMessage", "retry_after", seconds=2)
    host = start(guard, state_dir, setup, fake)
    host.start_run(f"{setup['flows']}:release", {"version": "1"})
    delivered(fake, timeout=20)
    calls = [c for c in fake.calls if c["method"] == "sendMessage"]
    assert len(calls) == 2 and calls[0]["injected"] == "retry_after" and calls[1]["injected"] is None
    assert calls[1]["at"] - calls[0]["at"] >= 2.0
    assert len(fake.messages(CHAT)) == 1


def test_a_reload_picks_up_a_changed_profile_and_a_chat_no_longer_allowed_cannot_answer(guard, state_dir, setup,
                                                                                        fake) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "5"})["receipt"]["run_id"]
    delivered(fake)
    write_config(setup["config"], chats=(CHAT, 3003))
    with Client(state_dir) as client:
        reloaded = client.request("channel.reload").receipt
        assert reloaded["profiles"] == [{"profile": "ops", "running": True}]
        [message] = wait_for(lambda: fake.messages(3003), 15, "the decision in the newly allowed chat")
        assert [call["chat_id"] for call in sent(fake)] == [CHAT, 3003]
        # The chat is taken off the list again: a tap there (by an allowed user) changes nothing.
        write_config(setup["config"], chats=(CHAT,))
        client.request("channel.reload")
    fake.tap(chat_id=3003, user_id=USER, message_id=message["message_id"], data=buttons(message)["Ship it"])
    wait_for(lambda: fake.answered_callbacks(), 10, "the refusal notice")
    assert "may not answer" in fake.answered_callbacks()[0]["text"]
    assert host.get_run(run_id)["status"] == "parked"


def test_settling_a_decision_elsewhere_edits_its_telegram_message(guard, state_dir, setup, fake) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "6"})["receipt"]["run_id"]
    delivered(fake)
    request_id = host.get_run(run_id)["park_detail"]
    with Client(state_dir) as client:
        answer = client.request("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}})
        assert answer.outcome == "accepted", answer
    edited = wait_for(lambda: (m := fake.messages(CHAT)[0]).get("edited") and m, 15, "the edit")
    assert "✔ Stop (answered elsewhere)" in edited["text"] and edited["reply_markup"] is None
    assert len(fake.calls_of("editMessageText")) == 1


def test_piwf_channel_commands(guard, state_dir, setup, fake) -> None:
    """`piwf channel status | reload | recover` as a person types them."""
    import subprocess

    start(guard, state_dir, setup, fake)
    piwf = Path(__file__).resolve().parents[2] / "bin" / "piwf"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(piwf), *args, "--state-dir", str(state_dir)], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)

    shown = run("channel", "status")
    assert shown.returncode == 0, shown.stderr
    assert "ops" in shown.stdout and "yes" in shown.stdout
    listed = run("channel", "status", "--json")
    assert '"running": true' in listed.stdout and '"ambiguous": []' in listed.stdout
    assert run("channel", "reload").returncode == 0
    refused = run("channel", "recover", "ops", "chf_nope-1", "retry")
    assert refused.returncode == 1 and "not found" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_a_failed_adapter_is_restarted_under_a_new_epoch_and_its_send_in_flight_becomes_ambiguous(
        guard, state_dir, setup, fake, monkeypatch) -> None:
    from piwf_actors.actors.channel import ChannelAdapter

    fake.pause_before_response("sendMessage")
    host = start(guard, state_dir, setup, fake)
    host.start_run(f"{setup['flows']}:release", {"version": "8"})
    assert fake.reached("sendMessage").wait(20)
    [first_epoch] = [r["adapter_epoch"] for r in rows(state_dir, "SELECT adapter_epoch FROM channel_adapter")]

    real_evaluate = ChannelAdapter._evaluate

    def evaluate(self):
        if self._epoch == first_epoch:
            raise RuntimeError("adapter broken on purpose")
        real_evaluate(self)

    monkeypatch.setattr(ChannelAdapter, "_evaluate", evaluate)  # its next tick (within 1 s) fails the actor
    wait_for(lambda: rows(state_dir, "SELECT adapter_epoch FROM channel_adapter")[0]["adapter_epoch"] != first_epoch,
             15, "a new adapter epoch")
    fake.release("sendMessage")
    with Client(state_dir) as client:
        status_now = wait_for(lambda: (s := client.request("channel.status").receipt)["ambiguous"] and s, 15,
                              "the cut-off send to be ambiguous")
    assert [a["error"] for a in status_now["ambiguous"]] == ["adapter_exited_without_receipt"]
    wait_for(lambda: client_status_running(state_dir), 15, "the profile to run again")
    assert len(sent(fake)) == 1


def client_status_running(state_dir: Path) -> bool:
    with Client(state_dir) as client:
        return client.request("channel.status").receipt["profiles"][0]["running"]
