"""The one exception a `piwf` command raises for a host's refusal (a leaf: every command module may raise it)."""

from __future__ import annotations

from typing import Any


class Refused(Exception):
    """An operation the host answered with a refusal (exit status 1)."""

    def __init__(self, answer: Any) -> None:
        super().__init__(f"{answer.outcome}: {answer.error}")
        self.answer = answer
