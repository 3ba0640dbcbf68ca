"""The one table of client operations (`protocol.catalog.OPERATIONS`) against the gateway and the document.

The gateway dispatches from the table, so every operation in it must have its function (and every
write operation its builder; tests/protocol/test_operations.py calls them);
docs/protocol.md describes each operation under its own heading, says there
whether it is recorded, read-only or neither, and lists the recorded and the
read-only operations in section 4: all of it must say what the table says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from piwf_actors.protocol.catalog import OPERATIONS, Operation
from piwf_actors.protocol.envelope import SCHEMA, BadRequest, Request, parse_request
from piwf_actors.protocol.payloads import check_payload

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def _sections() -> dict[str, str]:
    """Operation name → the text of its section in docs/protocol.md section 5 (a heading may name several)."""
    part = DOC[DOC.index("## 5. Operations"):DOC.index("## 6. Watches")]
    found: dict[str, str] = {}
    for block in re.split(r"^### ", part, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        for name in re.split(r",\s*", heading.strip()):
            found[name] = body
    return found


def _listed(lead: str) -> set[str]:
    """The operations named in backticks in the section 4 bullet that starts with `lead`."""
    part = DOC[DOC.index("## 4. Idempotency"):DOC.index("## 5. Operations")]
    bullet = part[part.index(lead):]
    bullet = bullet[:bullet.index("\n- ")]
    return set(re.findall(r"`([a-z_]+\.[a-z_]+|watch|unwatch)`", bullet)) & set(OPERATIONS)


def test_every_operation_in_the_table_has_its_function() -> None:
    for operation in OPERATIONS.values():
        assert callable(operation.fn), f"{operation.name}: no function answers it"
        # A write operation's command is built by its own builder (shared with the embedding API).
        assert (operation.build is not None) <= operation.recorded, f"{operation.name}: a builder but not recorded"


def test_every_operation_is_documented_and_nothing_else_is() -> None:
    sections = _sections()
    documented = set(sections) - {"Unknown operations"}
    assert documented == set(OPERATIONS)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_the_document_says_what_the_table_says(name: str) -> None:
    operation = OPERATIONS[name]
    first = _sections()[name].split("\n- receipt")[0]
    if operation.recorded_if is not None:
        assert f"recorded only with `{operation.recorded_if}: true`" in first, first
    elif operation.recorded:
        assert re.search(r"(?<!not )recorded", first) and "not recorded" not in first, first
    elif operation.read_only:
        assert "read-only" in first and "recorded" not in first, first
    else:
        assert "not recorded" in first and "read-only" not in first, first
    if operation.needs_run:
        assert "`run_id` (required)" in first, first
    if operation.needs_revision:
        assert "`expected_revision` (required)" in first, first


def test_section_4_lists_the_recorded_and_the_read_only_operations() -> None:
    assert _listed("- **Mutating operations are recorded**") == {
        name for name, op in OPERATIONS.items() if op.recorded}
    read_only = _listed("- **Read-only operations are not recorded**")
    neither = {name for name, op in OPERATIONS.items() if not op.recorded and not op.read_only}
    # The bullet also names state.prune (its dry run) and the operations that are neither.
    assert read_only == {name for name, op in OPERATIONS.items() if op.read_only} | neither | {"state.prune"}


def test_a_dry_run_is_not_recorded() -> None:
    prune = OPERATIONS["state.prune"]
    assert prune.records({"before": 1.0, "apply": True})
    assert not prune.records({"before": 1.0})
    assert OPERATIONS["run.cancel"].records({})
    assert not OPERATIONS["run.get"].records({})


def test_an_operation_is_never_both_recorded_and_read_only() -> None:
    def answer(_ctx, _payload) -> None:
        pass

    with pytest.raises(ValueError, match="not both"):
        Operation("x.y", answer, recorded=True, read_only=True)
    with pytest.raises(ValueError, match="recorded_if"):
        Operation("x.y", answer, recorded_if="apply")


def test_payload_checks_come_from_the_table() -> None:
    def request(operation: str, payload: dict, **envelope) -> Request:
        return Request("r1", "c1", "k1", operation, payload, **envelope)

    restart = OPERATIONS["run.restart"]
    with pytest.raises(BadRequest, match="needs run_id"):
        check_payload(request("run.restart", {}), restart)
    with pytest.raises(BadRequest, match="needs expected_revision"):
        check_payload(request("run.restart", {}, run_id="run_1"), restart)
    assert check_payload(request("run.restart", {"same_code": True}, run_id="run_1", expected_revision=3),
                         restart) == {"same_code": True}
    with pytest.raises(BadRequest, match="unknown payload field"):
        check_payload(request("run.get", {"x": 1}, run_id="run_1"), OPERATIONS["run.get"])


def test_docs_standby_lists_exactly_the_operations_a_standby_serves() -> None:
    """docs/standby.md names every read-only operation (and host.stop) and nothing else."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "standby.md").read_text()
    section = text.split("## What a standby serves", 1)[1].split("(which stops that", 1)[0]
    named = set()
    for name in re.findall(r"`([a-z_]+(?:\.[a-z_]+)?)`", section):
        named.add(name)
    named.discard("protocol/catalog/")
    served = {name for name, operation in OPERATIONS.items() if operation.served_by_standby}
    assert named == served


def test_a_text_field_with_a_nul_character_is_refused_at_the_door() -> None:
    """PostgreSQL cannot hold NUL in text: `resource.list {manager: "\\x00"}` reached the query and failed
    there as a host bug (the fuzz found it on PostgreSQL). The door refuses it in one line on either engine."""
    request = Request("r1", "c1", "k1", "resource.list", {"manager": "a\x00b"})
    with pytest.raises(BadRequest, match=r"^resource.list: payload.manager may not contain a NUL character$"):
        check_payload(request, OPERATIONS["resource.list"])
    assert check_payload(Request("r1", "c1", "k1", "resource.list", {"manager": "ab"}),
                         OPERATIONS["resource.list"]) == {"manager": "ab"}


def test_an_envelope_id_with_a_nul_character_is_refused() -> None:
    """`run.source` with run_id "\\x00" reached a PostgreSQL query and failed there as a host bug (the fuzz)."""
    frame = {"schema": SCHEMA, "type": "request", "request_id": "r1", "client_id": "c1", "idempotency_key": "k1",
             "operation": "run.source", "payload": {}, "run_id": "run\x00"}
    with pytest.raises(BadRequest, match=r"^run_id may not contain a NUL character$"):
        parse_request(frame)
    frame["run_id"] = "run_1"
    assert parse_request(frame).run_id == "run_1"
