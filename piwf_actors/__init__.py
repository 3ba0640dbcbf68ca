"""piwf_actors: a durable, local-first workflow host built on pykka actors; its state lives in SQLite
(embedded) or PostgreSQL (several hosts on one database).

The embedding entry point is `start_host(HostConfig(...))` (`piwf_actors.embedding`), which returns a
`HostHandle`; `HostHandle.stop()` leaves nothing running. Its results are the
typed values of `piwf_actors.results` (`RunReceipt`, `RunView`, …), and
`HostHandle.subscribe(actor_ref)` tells an actor the run events
`RunStarted`, `NodeFinished`, `RunParked` and `RunFinished` (`piwf_actors.run_notices`); all of them are
importable from here. The names are imported lazily so that worker processes
and the client do not pay for the host's imports.
"""

from __future__ import annotations

from typing import Any

_RESULT_NAMES = (
    "AnswerReceipt", "ControlReceipt", "EffectReceipt", "EffectView", "MessageReceipt", "NodeView", "PendingRequest",
    "RunError", "RunEvent", "RunReceipt", "RunSummary", "RunView",
)
_NOTICE_NAMES = ("NodeFinished", "RunFinished", "RunParked", "RunStarted")

__all__ = ["HostConfig", "HostHandle", "Subscription", "start_host", *_RESULT_NAMES, *_NOTICE_NAMES]
__version__ = "0.1.0"  # the one place the version is written: pyproject.toml reads it from here


def __getattr__(name: str) -> Any:
    if name in ("HostHandle", "start_host"):
        from piwf_actors import embedding

        return getattr(embedding, name)
    if name == "HostConfig":
        from piwf_actors.config import HostConfig

        return HostConfig
    if name == "Subscription":
        from piwf_actors.actors.run_events import Subscription

        return Subscription
    if name in _RESULT_NAMES:
        from piwf_actors import results

        return getattr(results, name)
    if name in _NOTICE_NAMES:
        from piwf_actors import run_notices

        return getattr(run_notices, name)
    raise AttributeError(name)
