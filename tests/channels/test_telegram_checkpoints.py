"""Checkpoints in Telegram: a checkpoint with an audience is delivered to the profile's chat like a
decision (once, recorded before it is sent), answered by a reply to its message whose text becomes
the checkpoint's answer, and edited to show the answer once settled. A real host, the fake Bot API."""

from __future__ import annotations

import json
import textwrap
import time

import pytest
from telegram_host import CHAT, STRANGER, USER, start
from testsupport import rows, wait_for

CHECKPOINTS = textwrap.dedent('''
    from piwf_actors.workflows import checkpoint, compute, define_workflow, edge, human_decision, choice

    ask = define_workflow(
        name="ask", start_at="build",
        nodes={"build": checkpoint(prompt=lambda ctx: f"Which build of {ctx.input['app']} goes out?",
                                   audience="operator"),
               "done": compute(run=lambda ctx: {"answer": ctx.outputs["build"]})},
        edges=[edge("build", "done")],
    )
    plain = define_workflow(
        name="plain", start_at="wait",
        nodes={"wait": checkpoint(prompt="Nobody routes me")}, edges=[],
    )
    decide = define_workflow(
        name="decide", start_at="d",
        nodes={"d": human_decision(audience="operator", choices={"go": choice(label="Go")},
                                   request={"title": "After the plain one"})},
        edges=[],
    )
''')


@pytest.fixture
def flows(tmp_path):
    path = tmp_path / "checkpoints.py"
    path.write_text(CHECKPOINTS)
    return path


def _bot_replies(fake, to_message_id: int) -> list[str]:
    return [m["text"] for m in fake.messages(CHAT) if (m.get("reply_to_message") or {}).get("message_id") == to_message_id]


def _reply(fake, message_id: int, text: str, user_id: int = USER) -> int:
    """The person's reply; returns the person's message id (the bot's notice replies to it)."""
    update_id = fake.reply(chat_id=CHAT, user_id=user_id, text=text, reply_to_message_id=message_id)
    return int(fake.made_by(update_id))


def test_a_checkpoint_is_answered_by_a_reply(guard, state_dir, setup, fake, flows) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{flows}:ask", {"app": "shop"})["receipt"]["run_id"]
    [message] = wait_for(lambda: fake.messages(CHAT), 20, "the checkpoint in the chat")
    assert "Which build of shop goes out?" in message["text"] and "Reply to this message" in message["text"]
    assert message["reply_markup"]["force_reply"] is True  # no buttons: the app opens a reply

    mine = _reply(fake, message["message_id"], "build 1234")
    assert wait_for(lambda: _bot_replies(fake, mine), 20, "the bot's notice") == ["Recorded: your answer"]
    assert host.wait_for_run(run_id, timeout=30)["output"] == {"answer": {"text": "build 1234"}}
    edited = wait_for(lambda: (m := fake.messages(CHAT)[0]).get("edited") and m, 20, "the edit to the answer")
    assert "✔ Answered: build 1234" in edited["text"] and f"answered in telegram by user {USER}" in edited["text"]
    [submission] = rows(state_dir, "SELECT payload, provenance FROM interactive_submission")
    provenance = json.loads(submission["provenance"])
    assert provenance["kind"] == "channel" and provenance["user_id"] == str(USER) and provenance["profile"] == "ops"
    assert (provenance["name"], provenance["username"]) == (f"User{USER}", f"user{USER}")
    # At most once: one send for the checkpoint, whatever else happened.
    checkpoint_sends = [c for c in fake.calls_of("sendMessage") if "Which build" in c["text"]]
    assert len(checkpoint_sends) == 1


def test_a_reply_that_does_not_fit_is_explained_and_a_json_object_is_taken(guard, state_dir, setup, fake,
                                                                          flows) -> None:
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{flows}:ask", {"app": "shop"})["receipt"]["run_id"]
    [message] = wait_for(lambda: fake.messages(CHAT), 20, "the checkpoint in the chat")

    stranger = _reply(fake, message["message_id"], "build 666", user_id=STRANGER)
    assert wait_for(lambda: _bot_replies(fake, stranger), 20, "the notice") == ["You may not answer here."]
    broken = _reply(fake, message["message_id"], '{"build": 42')
    [why] = wait_for(lambda: _bot_replies(fake, broken), 20, "the explanation")
    assert why.startswith("Not recorded: this starts like a JSON object but is not one") and "plain text" in why
    assert host.get_run(run_id)["status"] == "parked"

    fixed = _reply(fake, message["message_id"], '{"build": 42, "notes": ["fast"]}')
    assert wait_for(lambda: _bot_replies(fake, fixed), 20, "the notice") == ["Recorded: your answer"]
    assert host.wait_for_run(run_id, timeout=30)["output"] == {"answer": {"build": 42, "notes": ["fast"]}}

    late = _reply(fake, message["message_id"], "too late")
    assert wait_for(lambda: _bot_replies(fake, late), 20, "the notice") == ["This checkpoint is no longer open."]
    [submission] = rows(state_dir, "SELECT payload FROM interactive_submission")  # one answer, nothing else
    assert json.loads(submission["payload"]) == {"build": 42, "notes": ["fast"]}


def test_a_reply_that_comes_before_the_receipt_of_the_send_is_taken(guard, state_dir, setup, fake, flows) -> None:
    """Found while testing: a reply to the checkpoint's message that reached the host before the
    send's receipt was written matched no known message and was passed over for good."""
    fake.pause_before_response("sendMessage")  # sent (the person sees it), the answer held back
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{flows}:ask", {"app": "shop"})["receipt"]["run_id"]
    [message] = wait_for(lambda: fake.messages(CHAT), 20, "the checkpoint in the chat")
    mine = _reply(fake, message["message_id"], "quick")
    # Give the host the time to read the reply and, were it passed over, to confirm it to the fake
    # (the next poll's offset); a reply that waits for the receipt stays unconfirmed.
    deadline = time.monotonic() + 3
    while fake.pending_updates() and time.monotonic() < deadline:
        time.sleep(0.05)
    fake.release("sendMessage")
    assert wait_for(lambda: _bot_replies(fake, mine), 20, "the bot's notice") == ["Recorded: your answer"]
    assert host.wait_for_run(run_id, timeout=30)["output"] == {"answer": {"text": "quick"}}


def test_a_checkpoint_without_an_audience_is_not_sent_to_a_profile_of_named_audiences(guard, state_dir, setup,
                                                                                   fake, flows) -> None:
    host = start(guard, state_dir, setup, fake)
    plain = host.start_run(f"{flows}:plain", {})["receipt"]["run_id"]
    wait_for(lambda: host.get_run(plain)["status"] == "parked", 20, "the plain checkpoint waiting")
    host.start_run(f"{flows}:decide", {})
    # Deliveries go oldest first: once the later decision is there, the checkpoint had its turn.
    [message] = wait_for(lambda: fake.messages(CHAT), 20, "the decision in the chat")
    assert message["text"].startswith("After the plain one")
    assert not any("Nobody routes me" in call["text"] for call in fake.calls_of("sendMessage"))


@pytest.mark.parametrize(("text", "expected"), [
    ("build 1234", {"text": "build 1234"}),
    ("  {\"build\": 42}", {"build": 42}),
    ("[1, 2]", {"text": "[1, 2]"}),  # only an object is read as JSON: anything else is text
    ("42", {"text": "42"}),
])
def test_a_reply_becomes_a_checkpoint_input(text, expected) -> None:
    from piwf_actors.channels.text import checkpoint_input

    assert checkpoint_input(text) == (expected, None)


@pytest.mark.parametrize(("text", "why"), [
    ('{"a": 1', "is not one (Expecting ',' delimiter at character 8)"),
    ('{"a": NaN}', "JSON numbers must be finite"),
    ('{"a": ' * 17 + "1" + "}" * 17, "nested deeper than 16 levels"),
    ('{"a": ' * 5000 + "1" + "}" * 5000, "nested deeper than 16 levels"),
])
def test_a_reply_that_is_not_a_usable_object_is_explained(text, why) -> None:
    from piwf_actors.channels.text import checkpoint_input

    value, problem = checkpoint_input(text)
    assert value is None and problem is not None and why in problem and problem.startswith("Not recorded:")


def test_a_checkpoint_audience_is_checked_and_changes_no_digest_when_absent() -> None:
    """A checkpoint without an audience describes itself as before (runs started before the option
    existed keep their definition digest, which a resumed run is checked against)."""
    from piwf_actors.errors import WorkflowDefinitionError
    from piwf_actors.workflows import checkpoint, define_workflow
    from piwf_actors.workflows.digest import _Fingerprinter, _node_doc

    with pytest.raises(WorkflowDefinitionError, match="audience must be a non-empty string"):
        define_workflow(name="w", start_at="c", nodes={"c": checkpoint(prompt="x", audience=" ")}, edges=[])
    plain = define_workflow(name="w", start_at="c", nodes={"c": checkpoint(prompt="x")}, edges=[])
    routed = define_workflow(name="w", start_at="c", nodes={"c": checkpoint(prompt="x", audience="ops")}, edges=[])
    assert plain.digest != routed.digest
    assert "audience" not in _node_doc(checkpoint(prompt="x"), _Fingerprinter())
    assert _node_doc(checkpoint(prompt="x", audience="ops"), _Fingerprinter())["audience"] == "ops"
