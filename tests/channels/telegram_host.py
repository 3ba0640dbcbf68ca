"""A real host with a Telegram profile against the fake Bot API: constants, workflows and helpers
shared by the channel tests (their fixtures are in conftest.py)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from testsupport import ProcessGuard, wait_for

from piwf_actors.testing.fake_telegram import FakeBotApi

TOKEN = "424242:SECRET-token-do-not-log-xyzzy"
SECRET_PART = "SECRET-token-do-not-log-xyzzy"
TAG_VAR = "PIWF_CHANNEL_TEST_TAG"
USER, CHAT, STRANGER = 1001, 2002, 9999

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import (
        choice, compute, decision_switch, define_workflow, human_decision, text_input,
    )

    def _release(audience):
        return define_workflow(
            name=f"release-{audience}", start_at="approve",
            nodes={
                "approve": human_decision(
                    audience=audience,
                    choices={"ship": choice(label="Ship it"), "stop": choice(label="Stop"),
                             "fix": choice(label="Needs changes",
                                           input=text_input(name="instructions", prompt="What should change?"))},
                    request=lambda ctx: {"title": f"Ship {ctx.input['version']}?", "summary": "Tests passed.",
                                         "blocks": [{"kind": "bullets", "items": ["changelog updated"]}]}),
                "ship": compute(run=lambda ctx: {"shipped": ctx.input["version"]}),
                "stopped": compute(run=lambda ctx: {"stopped": True}),
                "fix": compute(run=lambda ctx: {"fix": ctx.outputs["approve"]["input"]["instructions"]}),
            },
            edges=[decision_switch("approve", cases={"ship": "ship", "stop": "stopped", "fix": "fix"})],
        )

    release = _release("operator")
    security = _release("security")
''')


def write_config(directory: Path, *, credentials_mode: int = 0o600, chats: tuple[int, ...] = (CHAT,),
                 audiences: tuple[str, ...] = ("operator",)) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "channels.toml").write_text(textwrap.dedent(f'''
        [telegram.ops]
        credential = "ops_bot"
        allowed_user_ids = [{USER}]
        allowed_chat_ids = [{", ".join(map(str, chats))}]
        audiences = [{", ".join(f'"{a}"' for a in audiences)}]
    '''))
    credentials = directory / "credentials.toml"
    credentials.write_text(f'ops_bot = "{TOKEN}"\n')
    os.chmod(credentials, credentials_mode)
    return directory


def start(guard: ProcessGuard, state_dir: Path, setup: dict[str, Path], fake: FakeBotApi, **config: Any):
    return guard.start_host(state_dir, config_dir=setup["config"], channel_options={"telegram": {"api_base": fake.url}},
                            channel_poll_timeout_s=1, max_workers=1, **config)


def sent(fake: FakeBotApi) -> list[dict[str, Any]]:
    return fake.calls_of("sendMessage")


def delivered(fake: FakeBotApi, count: int = 1, timeout: float = 15) -> list[dict[str, Any]]:
    """The bot's messages in the allowed chat once `count` are there."""
    return wait_for(lambda: len(fake.messages(CHAT)) >= count and fake.messages(CHAT), timeout,
                    lambda: f"{count} message(s) in chat {CHAT}; calls {[c['method'] for c in fake.calls]}")


def buttons(message: dict[str, Any]) -> dict[str, str]:
    """Button text → callback data."""
    return {row[0]["text"]: row[0]["callback_data"] for row in message["reply_markup"]["inline_keyboard"]}


def status(host, run_id: str) -> str:
    return host.get_run(run_id)["status"]
