"""`safe_tell`: the one way the house tells an actor that may have stopped (a leaf, so that the client
operations in `protocol/` use the same rule as the actors without importing `actors/`)."""

from __future__ import annotations

from typing import Any

import pykka


def safe_tell(ref: pykka.ActorRef[Any] | None, message: Any) -> bool:
    """Tell `message` to `ref`, ignoring an actor that has already stopped; False when there is no
    actor or it has stopped."""
    if ref is None:
        return False
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        return False
    return True
