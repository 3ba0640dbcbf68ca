"""A deadline computed from the run reaches Telegram as a constant one does: the decision's message
says when its default applies, the checkpoint's by when to answer (a real host, the fake Bot API)."""

from __future__ import annotations

import textwrap
import time

from telegram_host import CHAT, start
from testsupport import wait_for

COMPUTED = textwrap.dedent('''
    from piwf_actors.workflows import checkpoint, choice, define_workflow, human_decision

    gate = define_workflow(name="gate", start_at="approve", nodes={
        "approve": human_decision(
            audience="operator", choices={"go": choice(label="Go"), "stop": choice(label="Stop")},
            request=lambda ctx: {"title": f"Deploy {ctx.input['app']}?"},
            on_timeout=lambda ctx: {"after_s": ctx.input["hours"] * 3600, "response": {"choice": "stop"}}),
    }, edges=[])
    note = define_workflow(name="note", start_at="ask", nodes={
        "ask": checkpoint(prompt="Which build?", audience="operator", timeout_s=lambda ctx: ctx.input["hours"] * 3600),
    }, edges=[])
''')


def _at(deadline_at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(deadline_at))


def test_a_computed_deadline_is_shown_in_the_chat(guard, state_dir, setup, fake, tmp_path) -> None:
    flows = tmp_path / "computed.py"
    flows.write_text(COMPUTED)
    host = start(guard, state_dir, setup, fake)
    gate = host.start_run(f"{flows}:gate", {"app": "shop", "hours": 30})["receipt"]["run_id"]
    [message] = wait_for(lambda: fake.messages(CHAT), 20, "the decision in the chat")
    [request] = [r for r in host.pending_interactions() if r.run_id == gate]
    assert request.deadline_at is not None and 30 * 3600 - 60 < request.deadline_at - time.time() <= 30 * 3600
    assert message["text"].endswith(f"If nobody answers by {_at(request.deadline_at)}: Stop.")

    note = host.start_run(f"{flows}:note", {"hours": 2})["receipt"]["run_id"]
    asked = wait_for(lambda: len(fake.messages(CHAT)) == 2 and fake.messages(CHAT)[1], 20, "the checkpoint")
    [request] = [r for r in host.pending_interactions() if r.run_id == note]
    assert request.deadline_at is not None and 2 * 3600 - 60 < request.deadline_at - time.time() <= 2 * 3600
    assert f"Answer by {_at(request.deadline_at)}." in asked["text"]
