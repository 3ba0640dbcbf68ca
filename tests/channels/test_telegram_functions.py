"""A durable function's `decide` is a decision like a graph node's: it reaches the Telegram chat of its
audience with its choices and its deadline, a tap (or a reply for a choice that asks for text) answers
it, and the function resumes in a new launch, replaying the step before the decision (counted by an
oracle file outside the database) and seeing who answered (a real host, the fake Bot API)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from telegram_host import CHAT, USER, buttons, delivered, start, status
from testsupport import wait_for

FUNCTIONS = textwrap.dedent('''
    from piwf_actors.durable import choice, decide, step, text_input, workflow

    @step
    def build(oracle: str, version: str) -> str:
        with open(oracle, "a") as out:
            out.write(f"build {version}\\n")
        return f"app-{version}.tar"

    @workflow(name="ship")
    def ship(oracle: str, version: str, hours: float = 2) -> dict:
        artifact = build(oracle, version)
        answer = decide("approve", title=f"Ship {artifact}?", description="Built and tested.",
                        choices={"ship": "Ship it", "stop": "Stop",
                                 "fix": choice("Needs changes", input=text_input("why", "What?"))},
                        timeout_s=hours * 3600, default="stop")
        return {"choice": answer.choice, "why": answer.text("why"), "artifact": artifact,
                "by": answer.answered_by["channel"]}
''')


def _oracle_lines(oracle: Path) -> list[str]:
    return oracle.read_text().splitlines() if oracle.exists() else []


def test_a_function_s_decision_is_answered_by_a_tap_and_the_function_resumes(guard, state_dir, setup, fake,
                                                                            tmp_path) -> None:
    flows, oracle = tmp_path / "functions.py", tmp_path / "oracle"
    flows.write_text(FUNCTIONS)
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{flows}:ship", {"oracle": str(oracle), "version": "1.2.0"})["receipt"]["run_id"]
    [message] = delivered(fake)
    assert message["text"].startswith("Ship app-1.2.0.tar?\n\nBuilt and tested.")
    [request] = [r for r in host.pending_interactions() if r.run_id == run_id]
    assert request.node_id == "approve" and request.deadline_at is not None
    deadline = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(request.deadline_at))
    assert message["text"].endswith(f"If nobody answers by {deadline}: Stop.")
    assert set(buttons(message)) == {"Ship it", "Stop", "Needs changes ✎"}
    assert status(host, run_id) == "parked"

    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=buttons(message)["Ship it"])
    view = host.wait_for_run(run_id, timeout=20)
    assert (view["status"], view["output"]) == ("done", {"choice": "ship", "why": "", "artifact": "app-1.2.0.tar",
                                                         "by": "telegram"}), view
    assert _oracle_lines(oracle) == ["build 1.2.0"], "the step before the decision ran again on resume"
    edited = wait_for(lambda: (m := fake.messages(CHAT)[0]).get("edited") and m, 10, "the message to be edited")
    assert "✔ Ship it" in edited["text"]


def test_a_function_s_choice_that_asks_for_text_takes_the_chat_reply(guard, state_dir, setup, fake, tmp_path) -> None:
    flows, oracle = tmp_path / "functions.py", tmp_path / "oracle"
    flows.write_text(FUNCTIONS)
    host = start(guard, state_dir, setup, fake)
    run_id = host.start_run(f"{flows}:ship", {"oracle": str(oracle), "version": "2.0"})["receipt"]["run_id"]
    [message] = delivered(fake)
    fake.tap(chat_id=CHAT, user_id=USER, message_id=message["message_id"], data=buttons(message)["Needs changes ✎"])
    prompt = delivered(fake, 2)[1]
    assert "What?" in prompt["text"]
    fake.reply(chat_id=CHAT, user_id=USER, text="bump the changelog", reply_to_message_id=prompt["message_id"])
    view = host.wait_for_run(run_id, timeout=20)
    assert view["output"] == {"choice": "fix", "why": "bump the changelog", "artifact": "app-2.0.tar",
                              "by": "telegram"}, view
    assert _oracle_lines(oracle) == ["build 2.0"]
