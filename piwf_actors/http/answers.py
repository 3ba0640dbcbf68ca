"""The HTTP door's answers: an outcome as JSON, and the door's own one-line refusals."""

from __future__ import annotations

import base64
import json
from typing import Any

from starlette.responses import JSONResponse, Response

from piwf_actors.protocol.envelope import one_line


def error(status: int, message: str, *, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """The door's own refusal: one JSON line."""
    return JSONResponse({"error": one_line(message), **extra}, status, headers=headers)


CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    raise TypeError(type(value).__name__)


class Answer(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=_json_default).encode()
