"""Logging set-up for the host and its workers: plain lines, or one JSON object per line.

`--log-format json` is for log shippers: each record becomes
`{"ts", "level", "logger", "pid", "message", …}` plus the record's extra
fields (a finished run's line carries `run_id`, `workflow`, `status`,
`error_code`), and `exc_info` as `traceback`. Workers log with the host's
level and format to the host's stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "pid": record.process,
            "message": record.getMessage(), **self._static}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(level: str, fmt: str = "text", *, stream: TextIO | None = None, text_format: str | None = None,
              static: dict[str, Any] | None = None) -> None:
    """Set the root logger's level and one handler (replacing any set before)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(static) if fmt == "json" else logging.Formatter(
        text_format or "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
