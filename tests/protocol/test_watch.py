"""Watches over the wire: `watch` / `unwatch` and the events they produce.

- A `run` watch follows one run in order (event revisions strictly
  increasing, statuses only moving forward, the last one `done`) and the
  connection keeps working after it.
- A `runs` watch sees a run that was just started.
- An event is sent only when the watched view changed: never two identical
  consecutive payloads (the `Conn` helper checks that for every event of
  every test), and no event for a change notice that left the view as it was.
- A watch ends with its connection.
"""

from __future__ import annotations

import time

from testsupport import both_engines

STATUS_ORDER = {"queued": 0, "starting": 1, "running": 2, "done": 3}


def _watch(conn, subscription_id: str, topic: str, **payload) -> dict:
    answer = conn.request("watch", {"subscription_id": subscription_id, "topic": topic, **payload})
    assert answer["outcome"] == "accepted", answer
    assert answer["receipt"] == {"subscription_id": subscription_id, "topic": topic}
    return answer


def _events_until(conn, subscription_id: str, done, timeout: float = 20.0) -> list[dict]:
    """Events of one subscription until `done(event)` holds for one (included)."""
    events = []
    deadline = time.monotonic() + timeout
    while True:
        event = conn.event(subscription_id, timeout=max(deadline - time.monotonic(), 0.01))
        events.append(event)
        if done(event):
            return events


def _no_event(conn, subscription_id: str, quiet_s: float = 0.5) -> None:
    """Nothing arrives for `subscription_id` within `quiet_s`, then a round trip proves the
    connection was read up to now."""
    time.sleep(quiet_s)
    assert conn.request("host.status")["outcome"] == "accepted"
    assert [e for e in conn.events if e["subscription_id"] == subscription_id] == []


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_run_watch_sees_the_run_in_order_and_keeps_working(host, connect, proto) -> None:
    starter, conn = connect(host), connect(host)
    run_id = starter.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 0.15}})["receipt"]["run_id"]
    _watch(conn, "one-run", "run", run_id=run_id)
    events = _events_until(conn, "one-run", lambda e: e["payload"]["status"] in ("done", "failed", "cancelled"))

    assert all(e["topic"] == "run" and e["subscription_id"] == "one-run" for e in events)
    revisions = [e["revision"] for e in events]
    assert revisions[0] == 1 and all(a < b for a, b in zip(revisions, revisions[1:], strict=False)), revisions
    statuses = [e["payload"]["status"] for e in events]
    ranks = [STATUS_ORDER[s] for s in statuses]
    assert ranks == sorted(ranks), f"statuses went backwards: {statuses}"
    assert statuses[-1] == "done", statuses
    assert statuses[0] in ("queued", "starting", "running"), statuses
    # Node by node: committed nodes only grow, and the watcher saw the run between nodes.
    succeeded = [sum(n["status"] == "succeeded" for n in e["payload"]["nodes"]) for e in events]
    assert succeeded == sorted(succeeded) and succeeded[-1] == 3, succeeded
    assert len({n for n in succeeded if n < 3}) >= 2, f"too few intermediate views: {succeeded}"
    final = events[-1]["payload"]
    assert final["run_id"] == run_id and final["output"] == {"node": "c"}
    assert [n["node_id"] for n in final["nodes"]] == ["a", "b", "c"]
    # The payload is the run view, the same as run.get's receipt.
    view = conn.ok("run.get", run_id=run_id)
    assert view["receipt"] == final and view["revision"] == final["revision"]

    # The watch and the connection keep working after the end.
    _no_event(conn, "one-run")
    answer = conn.request("unwatch", {"subscription_id": "one-run"})
    assert answer["outcome"] == "accepted" and answer["receipt"] == {"subscription_id": "one-run"}
    assert conn.request("unwatch", {"subscription_id": "one-run"})["outcome"] == "notFound"
    _watch(conn, "again", "run", run_id=run_id)
    again = conn.event("again")
    assert again["revision"] == 1 and again["payload"] == final


def test_first_event_follows_the_accepted_answer(host, connect) -> None:
    conn = connect(host)
    request_id = conn.send_request("watch", {"subscription_id": "s", "topic": "host"})
    first = conn.recv()
    assert first["type"] == "response" and first["request_id"] == request_id and first["outcome"] == "accepted"
    event = conn.recv()
    assert event["type"] == "event" and event["subscription_id"] == "s" and event["revision"] == 1
    assert event["topic"] == "host" and event["payload"]["epoch"] == conn.hello["host_epoch"]


def test_runs_watch_gets_an_event_when_a_run_is_started(host, connect, proto) -> None:
    watcher, starter = connect(host), connect(host)
    _watch(watcher, "all", "runs")
    initial = watcher.event("all")
    assert initial["payload"]["runs"] == [] and initial["payload"]["counts"]["queued"] == 0
    run_id = starter.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    seen = watcher.event("all")
    assert seen["revision"] > initial["revision"]
    assert [r["run_id"] for r in seen["payload"]["runs"]] == [run_id]
    events = _events_until(watcher, "all", lambda e: e["payload"]["runs"][0]["status"] == "done")
    assert events[-1]["payload"]["counts"]["done"] == 1


def test_events_are_sent_only_when_the_view_changed(host, connect, proto) -> None:
    conn, other = connect(host), connect(host)
    first = other.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    proto.wait_run(other, first)

    # A watch on a finished run gets its view once and nothing while another run goes by.
    _watch(conn, "finished", "run", run_id=first)
    assert conn.event("finished")["payload"]["status"] == "done"
    _watch(conn, "all", "runs")
    conn.event("all")
    _watch(conn, "inbox", "interactions")
    inbox = conn.event("inbox")
    second = other.ok("run.start", {"workflow": proto.flow("three")})["receipt"]["run_id"]
    _events_until(conn, "all", lambda e: any(r["run_id"] == second and r["status"] == "done"
                                             for r in e["payload"]["runs"]))
    _no_event(conn, "finished")

    # A prune deletes runs and touches the interaction tables: the `runs` view changes, the
    # (empty) interactions view does not, so only the former sends an event.
    answer = other.ok("state.prune", {"before": time.time() + 60, "apply": True})
    assert answer["receipt"]["run_count"] == 2
    pruned = conn.event("all")
    assert pruned["payload"]["runs"] == []
    _no_event(conn, "inbox")
    # The finished run is gone: its watch says so once (its view is now nothing).
    gone = conn.event("finished")
    assert gone["payload"] is None
    _no_event(conn, "finished")
    assert inbox["revision"] == 1


def test_watch_ends_when_its_connection_closes(host, connect, proto) -> None:
    observer = connect(host)
    run_id = observer.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]

    def watches() -> int:
        return observer.ok("host.status")["receipt"]["gateway"]["watches"]

    def subscribe(conn) -> None:
        _watch(conn, "a", "runs")
        _watch(conn, "b", "host")
        _watch(conn, "c", "run", run_id=run_id)

    watcher = connect(host)
    subscribe(watcher)
    assert watches() == 3
    watcher.close()
    proto.wait_for(lambda: watches() == 0, 5, "the closed connection's watches to go")

    # Reconnected: a clean slate, the same subscription ids are free again.
    again = connect(host)
    subscribe(again)
    assert watches() == 3
    for subscription_id in ("a", "b", "c"):
        assert again.event(subscription_id)["revision"] == 1
    again.close()
    proto.wait_for(lambda: watches() == 0, 5, "the watches to go again")


def test_watch_requests_that_cannot_be_served(host, connect, proto) -> None:
    conn, other = connect(host), connect(host)
    _watch(conn, "dup", "runs")
    answer = conn.request("watch", {"subscription_id": "dup", "topic": "host"})
    assert answer["outcome"] == "rejected" and "already exists" in answer["error"]
    # Subscription ids are per connection.
    _watch(other, "dup", "runs")
    answer = conn.request("watch", {"subscription_id": "nope", "topic": "run", "run_id": "run_nope"})
    assert answer["outcome"] == "notFound"
    assert conn.request("unwatch", {"subscription_id": "never"})["outcome"] == "notFound"
    # At most 32 watches per connection; the 33rd is `rejected` (retrying would not help).
    for index in range(31):
        _watch(conn, f"w{index}", "host")
    answer = conn.request("watch", {"subscription_id": "one-too-many", "topic": "host"})
    assert answer["outcome"] == "rejected" and "at most 32 watches" in answer["error"]
    assert conn.request("unwatch", {"subscription_id": "w0"})["outcome"] == "accepted"
    _watch(conn, "one-too-many", "host")
    assert conn.request("host.status")["outcome"] == "accepted"


def test_run_watch_accepts_the_run_id_in_the_envelope(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    answer = conn.request("watch", {"subscription_id": "env", "topic": "run"}, run_id=run_id)
    assert answer["outcome"] == "accepted", answer
    assert conn.event("env")["payload"]["run_id"] == run_id
