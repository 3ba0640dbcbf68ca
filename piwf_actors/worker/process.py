"""The host's handle on one worker process.

Workers are started with `subprocess` and a socketpair: fork+exec at once,
which is safe from the threaded host (a plain `fork` would copy held locks
and the SQLite connection). Each worker leads its own session and process
group so that one signal reaches it and every shell command it started.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from piwf_actors.wire import recv_frame, send_frame
from piwf_actors.worker.termination import process_start_identity, terminate_tree

log = logging.getLogger(__name__)


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    sock: socket.socket
    create_time: float
    launches: int = 0
    hello: dict[str, Any] | None = field(default=None)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def spawn(cls, *, log_level: str = "WARNING", log_format: str = "text",
              env: dict[str, str] | None = None) -> WorkerProcess:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            command = [sys.executable, "-m", "piwf_actors.worker.main", "--fd", str(child.fileno()),
                       "--log-level", log_level, "--log-format", log_format]
            package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            child_env = dict(os.environ if env is None else env)
            child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH")) if p)
            process = subprocess.Popen(command, pass_fds=[child.fileno()], start_new_session=True,
                                       stdin=subprocess.DEVNULL, env=child_env, close_fds=True)
        finally:
            child.close()
        create_time = process_start_identity(process.pid) or 0.0
        return cls(process, parent, create_time)

    def send(self, frame: dict[str, Any]) -> None:
        send_frame(self.sock, frame)

    def recv(self) -> dict[str, Any] | None:
        return recv_frame(self.sock)

    def alive(self) -> bool:
        return self.process.poll() is None

    def shutdown(self, timeout_s: float = 2.0) -> int | None:
        """Ask an idle worker to exit; kill it if it does not."""
        try:
            self.send({"kind": "shutdown"})
        except OSError:
            pass
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()
        finally:
            self.sock.close()

    def kill(self, grace_s: float = 2.0) -> int | None:
        """Terminate the worker's whole tree (SIGTERM, grace, SIGKILL) and reap it."""
        terminate_tree(self.pid, self.create_time, grace_s=grace_s)
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("worker %d survived SIGKILL", self.pid)
            return None
