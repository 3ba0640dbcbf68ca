"""`--http [HOST:]PORT`: where the HTTP door listens. A bare port is loopback only (127.0.0.1); any
other address is named in full, and the door's log line says it is reachable from elsewhere."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

EXTRA_HINT = "pip install 'piwf_actors[http]'"


@dataclass(frozen=True, slots=True)
class HttpAddress:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_http_address(text: str) -> HttpAddress:
    """`PORT` → 127.0.0.1:PORT; `HOST:PORT`, `[V6]:PORT` as named (port 0: any free one). ValueError otherwise."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    elif not host:
        raise ValueError(f"--http {text}: name the address (PORT alone listens on 127.0.0.1 only; "
                         "0.0.0.0:PORT listens on every interface)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--http {text}: the port must be a number from 0 to 65535")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"--http {text}: not an address")
    return HttpAddress(host, int(port_text))


def require_http_extra() -> None:
    """Raise ImportError naming the extra when Starlette, uvicorn or httptools (its parser) is missing."""
    try:
        import httptools  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"--http needs the http extra ({exc.name} is missing): {EXTRA_HINT}") from None
