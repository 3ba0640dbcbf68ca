"""Which refused mutations are recorded under their idempotency key, as docs/protocol.md §4 says once.

A refusal the state decided (`rejected`, `conflict`, `notFound`: command_records.RECORDED_REFUSALS) is
recorded like an acceptance, so its replay meets the same refusal (tests/protocol/test_idempotency.py).
A refusal that decides nothing is not: `unavailable` and `claimLost`, and a request refused at the door
for its own shape (a payload field of the wrong kind, an unknown one, a bad topic), which never reaches
the state — its key stays free. §4 said both "the refusal of a refused one is recorded" and "a refused
mutation (`rejected`, `notFound`, `conflict`, `unavailable`) is not recorded".
"""

from __future__ import annotations

import re
from pathlib import Path

from piwf_actors.store.command_records import RECORDED_REFUSALS

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def section_4() -> str:
    text = PROTOCOL.read_text()
    return text[text.index("## 4. Idempotency"):text.index("## 5. Operations")]


def test_section_4_never_calls_a_recorded_refusal_unrecorded() -> None:
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z*`-])", " ".join(section_4().split()))
    unrecorded = [s for s in sentences if re.search(r"\bnot recorded\b", s) and "Read-only" not in s]
    for sentence in unrecorded:
        named = set(re.findall(r"`([a-zA-Z]+)`", sentence))
        assert not named & RECORDED_REFUSALS, f"§4 calls {sorted(named & RECORDED_REFUSALS)} unrecorded: {sentence}"
    [recorded] = [bullet for bullet in section_4().split("\n- ") if "**Mutating operations are recorded**" in bullet]
    assert set(re.findall(r"`([a-zA-Z]+)`", recorded)) >= RECORDED_REFUSALS, recorded


def test_a_request_refused_at_the_door_leaves_its_key_free(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 5}})["receipt"]["run_id"]
    for payload in ({"run_id": run_id, "topic": " "},  # a topic of blanks
                    {"run_id": run_id, "topic": "go", "colour": "red"},  # an unknown field
                    {"run_id": 7, "topic": "go"}):  # a field of the wrong kind
        refused = conn.request("message.send", payload, idempotency_key="door-key")
        assert refused["outcome"] == "rejected", refused
    # Nothing was recorded under the key: a well-formed request under it is applied, not refused again
    # nor a conflict.
    sent = conn.request("message.send", {"run_id": run_id, "topic": "go"}, idempotency_key="door-key")
    assert sent["outcome"] == "accepted", sent
    replay = conn.request("message.send", {"run_id": run_id, "topic": "go"}, idempotency_key="door-key")
    assert replay["outcome"] == "adopted" and replay["receipt"] == sent["receipt"], replay
    # A refusal the state decides is recorded: its replay is refused alike, even once the state changed.
    assert conn.request("run.cancel", run_id=run_id)["outcome"] == "accepted"
    proto.wait_run(conn, run_id, ("cancelled",))
    late = conn.request("message.send", {"run_id": run_id, "topic": "go"}, idempotency_key="late-key")
    assert late["outcome"] == "rejected" and "cancelled" in late["error"], late
    again = conn.request("message.send", {"run_id": run_id, "topic": "go"}, idempotency_key="late-key")
    assert (again["outcome"], again["error"]) == ("rejected", late["error"]), again
