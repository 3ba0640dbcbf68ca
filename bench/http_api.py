"""The HTTP door's cost, against the Unix socket in the same run.

(Named http_api.py, not http.py: a script's directory comes first on sys.path, and a bench/http.py
would stand in for the standard library's `http` package, which httpx imports.)

One real host (`bin/piwf-host --http 127.0.0.1:PORT`, durable defaults; bench/throughput.py's
HostProcess) and an operator token made through the socket.

  run.start   --senders threads, each with its own connection (a socket `Client`, or an HTTP
              client with keep-alive: --clients, each in rounds of its own), start --runs one-node
              runs between them, one request at a time per thread (closed loop); the figure is
              acknowledged starts/s (the answer is the commit). Rounds alternate socket, then each
              HTTP client (--rounds of each); the medians compare: HTTP / socket (target >= 0.6x).
              Two HTTP clients: the standard library's http.client (light, as curl or a service in
              another language would be) and httpx (~1 ms of CPU per request in this process, on
              the same cores as the host: on 2 cores that weighs on the figure as much as the host).
  idle CPU    once every run is done: the host process's CPU over --idle-s with no stream open,
              then with --streams Server-Sent Events streams of the runs list open (each read by
              a thread of this script), streams / none (target <= 1.1x).

Also printed: the host's CPU per start through each door (all rounds, by thread group) and this
script's (the senders'). --profile DIR records the host with py-spy during one more HTTP round (the
first of --clients) and prints where its samples are.

Run: .venv/bin/python bench/http_api.py [--runs 300] [--senders 4] [--rounds 3] [--clients stdlib httpx]
                                        [--streams 50] [--idle-s 30] [--profile DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from common import closing_line  # noqa: E402  (bench/ is the script's directory)
from profile_top import read_stacks, summarise  # noqa: E402
from throughput import HostProcess, PySpyRecorder, cpu_use, py_spy  # noqa: E402

from piwf_actors.client import Client  # noqa: E402
from piwf_actors.http.auth import new_token, token_digest  # noqa: E402

WORKFLOW = '''\
from piwf_actors.workflows import compute, define_workflow

one = define_workflow(name="one", start_at="a", edges=[], nodes={"a": compute(run=lambda ctx: 1)})
'''


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Cpu:
    """The host's CPU seconds per acknowledged start, by door, summed over the rounds (and by thread group)."""

    def __init__(self, host: HostProcess) -> None:
        self.host = host
        self.names = host.thread_names()
        self.spent: dict[str, float] = {}
        self.by_thread: dict[str, dict[str, float]] = {}
        self.starts: dict[str, int] = {}
        self.client: dict[str, float] = {}

    def measure(self, door: str, runs: int, round_: Callable[[], float]) -> float:
        before, client_before = self.host.cpu(), time.process_time()
        rate = round_()
        use = cpu_use(before, self.host.cpu(), self.names)
        self.client[door] = self.client.get(door, 0.0) + time.process_time() - client_before
        self.spent[door] = self.spent.get(door, 0.0) + use.host_s
        threads = self.by_thread.setdefault(door, {})
        for group, seconds in use.by_thread.items():
            threads[group] = threads.get(group, 0.0) + seconds
        self.starts[door] = self.starts.get(door, 0) + runs
        return rate

    def per_start_ms(self, door: str) -> float:
        return self.spent[door] / self.starts[door] * 1000

    def client_ms(self, door: str) -> float:
        return self.client[door] / self.starts[door] * 1000

    def top_threads(self, door: str, count: int = 4) -> str:
        ranked = sorted(self.by_thread[door].items(), key=lambda item: -item[1])[:count]
        return ", ".join(f"{group} {seconds / self.starts[door] * 1000:.2f}" for group, seconds in ranked)


def _wait_listening(port: int, timeout: float = 60.0) -> None:
    """Until the door accepts a connection: the host answers on its socket before its HTTP door has started."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _socket_round(host: HostProcess, spec: str, runs: int, senders: int) -> float:
    def send(count: int) -> None:
        with Client(socket_path=host.socket_path, timeout=60) as client:
            for _ in range(count):
                answer = client.request("run.start", {"workflow": spec, "input": None})
                assert answer.outcome == "accepted", answer

    return _timed(send, runs, senders)


def _http_round(base: str, token: str, spec: str, runs: int, senders: int, client: str = "stdlib") -> float:
    """One HTTP round with `client`: "stdlib" (http.client, keep-alive: a light sender, like curl or a
    service in another language) or "httpx" (a convenient Python client: ~0.6 ms of CPU per request in
    this script, on the same 2 cores as the host)."""
    body = json.dumps({"workflow": spec, "input": None}).encode()

    def send_stdlib(count: int) -> None:
        address = urllib.parse.urlsplit(base)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            for _ in range(count):
                connection.request("POST", "/api/v1/runs", body=body, headers=headers)
                answer = connection.getresponse()
                text = answer.read()
                assert answer.status == 201, text
        finally:
            connection.close()

    def send_httpx(count: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            for _ in range(count):
                answer = client.post("/api/v1/runs", content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code == 201, answer.text

    return _timed(send_stdlib if client == "stdlib" else send_httpx, runs, senders)


def _timed(send, runs: int, senders: int) -> float:  # type: ignore[no-untyped-def]
    shares = [runs // senders + (1 if i < runs % senders else 0) for i in range(senders)]
    threads = [threading.Thread(target=send, args=(share,)) for share in shares]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs / (time.perf_counter() - began)


def _settle(host: HostProcess, timeout: float = 300.0) -> None:
    """Until no run is queued, starting or running."""
    deadline = time.monotonic() + timeout
    with Client(socket_path=host.socket_path) as client:
        while time.monotonic() < deadline:
            counts = client.status().get("runs") or {}
            if not any(counts.get(status) for status in ("queued", "starting", "running")):
                return
            time.sleep(0.2)
    raise TimeoutError("runs still active")


def _cpu_over(host: HostProcess, seconds: float) -> float:
    before = host.cpu().process_s
    time.sleep(seconds)  # a measuring window, not a synchronisation
    return (host.cpu().process_s - before) / seconds


def _profile(host: HostProcess, base: str, token: str, spec: str, args: argparse.Namespace) -> None:
    spy = py_spy()
    if spy is None:
        print("  --profile: py-spy not found (`make bench` installs the `bench` extra); no profile")
        return
    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / "host-http.txt"
    recorder = PySpyRecorder(spy, host.pid, out, gil=False)
    recorder.start()
    rate = _http_round(base, token, spec, args.runs, args.senders, args.clients[0])
    outcome = recorder.stop()
    print(f"  profile of the host during one more HTTP round ({args.clients[0]}): {out} ({outcome}; {rate:.0f} starts/s while recorded)")
    if out.exists():
        for line in summarise(read_stacks(out), 15, by_thread=True).splitlines():
            print(f"    {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--clients", nargs="+", choices=("stdlib", "httpx"), default=["stdlib", "httpx"],
                        help="the HTTP senders to measure, each in rounds of its own")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="record the host with py-spy during one more HTTP round of --runs (DIR/host-http.txt)")
    args = parser.parse_args()
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="piwf-bench-http-"))
    state = root / "state"
    flows = root / "flows.py"
    flows.write_text(WORKFLOW)
    spec = f"{flows}:one"
    port = _free_port()
    host = HostProcess(state, args.workers, "FULL", extra=("--http", f"127.0.0.1:{port}"))
    stop_streams = threading.Event()
    try:
        host.wait_ready()
        token = new_token()
        with Client(socket_path=host.socket_path) as client:
            made = client.request("http_token.add", {"name": "bench", "role": "operator",
                                                     "token_sha256": token_digest(token)})
            assert made.outcome == "accepted", made
        base = f"http://127.0.0.1:{port}"
        _wait_listening(port)
        _socket_round(host, spec, 20, 1)  # warm: the workflow's resolution is cached from here on
        for client in args.clients:
            _http_round(base, token, spec, 20, 1, client)
        rates: dict[str, list[float]] = {door: [] for door in ("socket", *(f"http {c}" for c in args.clients))}
        cpu = _Cpu(host)
        for _ in range(args.rounds):
            rates["socket"].append(cpu.measure("socket", args.runs,
                                               lambda: _socket_round(host, spec, args.runs, args.senders)))
            for client in args.clients:
                rates[f"http {client}"].append(cpu.measure(
                    f"http {client}", args.runs,
                    lambda c=client: _http_round(base, token, spec, args.runs, args.senders, c)))  # type: ignore[misc]
        medians = {door: statistics.median(values) for door, values in rates.items()}
        print(f"run.start, {args.senders} senders, {args.runs} runs x {args.rounds} rounds (median):")
        for door, values in rates.items():
            print(f"  {door:12} {medians[door]:6.0f} starts/s   rounds {', '.join(f'{r:.0f}' for r in values)}")
        for client in args.clients:
            ratio = medians[f"http {client}"] / medians["socket"]
            print(f"  http ({client}) / socket = {ratio:.2f}x (target >= 0.6x: {'met' if ratio >= 0.6 else 'NOT met'})")
        print("  CPU per start (ms), host by thread and this script's (the senders):")
        for door in rates:
            print(f"    {door:12} host {cpu.per_start_ms(door):.2f} ({cpu.top_threads(door)}); "
                  f"senders {cpu.client_ms(door):.2f}")
        if args.profile is not None:
            _profile(host, base, token, spec, args)

        _settle(host)
        idle = _cpu_over(host, args.idle_s)
        opened = threading.Semaphore(0)

        def follow() -> None:
            try:
                with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx.Timeout(10.0, read=None)) as client, \
                        client.stream("GET", "/api/v1/streams/runs") as response:
                    opened.release()
                    for _line in response.iter_lines():
                        if stop_streams.is_set():
                            return
            except httpx.HTTPError:
                return  # the host stopped at the end

        readers = [threading.Thread(target=follow, daemon=True) for _ in range(args.streams)]
        for reader in readers:
            reader.start()
        for _ in readers:
            if not opened.acquire(timeout=30):
                raise TimeoutError("streams did not open")
        time.sleep(1.0)  # let the streams' first events go out before the window
        streaming = _cpu_over(host, args.idle_s)
        ratio = streaming / idle if idle else float("inf")
        print(f"host idle CPU over {args.idle_s:g} s: no stream {idle * 100:.2f}%, {args.streams} SSE streams "
              f"{streaming * 100:.2f}%")
        print(f"  streams / none = {ratio:.2f}x (target <= 1.1x: {'met' if ratio <= 1.1 else 'NOT met'})")
    finally:
        stop_streams.set()
        host.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(closing_line(began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
