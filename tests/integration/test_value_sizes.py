"""Any value size, through the embedding handle: every path a large value takes to a worker.

The README promises that a run's state may be any size. Values of 1.5 MB, 3 MB and 20 MB (over one
chunk of content, over several, far over a frame) go each way a value reaches a worker: a run's
input, a node's output, a message's payload (from the handle and from another run's node), a child
run's input and output, the outputs of a fan-out's children, a workflow file's snapshot. Each flow waits after the large value (a durable sleep, a message), so a second launch
reads it back from the store too. The nodes report the length and sha256 of what they got
(`size_flows.seen`), which must be those of the value sent.

The client's side of the same paths (values larger than a client's frame) is in
test_value_sizes_client.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from testsupport import rows
from wf.size_flows import SMALL_OUTPUTS, seen, text
from wf.size_host import SIZES, SizeHost, fan_flow, shared_host, size_flow


@pytest.fixture(scope="module")
def sized(request: pytest.FixtureRequest) -> Iterator[SizeHost]:
    yield from shared_host(request)


@pytest.mark.parametrize("size", SIZES)
def test_a_run_input_of_any_size_reaches_every_launch(sized: SizeHost, size: int) -> None:
    blob = text(size)
    run_id = sized.host.start_run(size_flow("input_wait"), {"blob": blob})["receipt"]["run_id"]
    assert sized.done_output(run_id) == {"first": seen(blob), "again": seen(blob)}


@pytest.mark.parametrize("size", SIZES)
def test_a_node_output_of_any_size_is_read_back_after_a_sleep(sized: SizeHost, size: int) -> None:
    run_id = sized.host.start_run(size_flow("output_sleep"), {"size": size})["receipt"]["run_id"]
    assert sized.done_output(run_id) == seen(text(size, 1))


def test_a_large_output_inside_a_launch_state_cut_as_one_value(sized: SizeHost) -> None:
    """A state of many small outputs is over the frame's budget, so the host cuts its outputs out whole;
    a large output among them is a stored value of its own, put back inside them in the worker."""
    run_id = sized.host.start_run(size_flow("many_small_then_big"))["receipt"]["run_id"]
    small = "".join(text(900, i) for i in range(SMALL_OUTPUTS))
    assert sized.done_output(run_id, timeout=180) == {"big": seen(text(100_000, 3)), "small": seen(small)}


@pytest.mark.parametrize("size", SIZES)
def test_an_output_before_a_message_wait_and_the_message_of_any_size(sized: SizeHost, size: int) -> None:
    run_id = sized.host.start_run(size_flow("output_message"), {"size": size})["receipt"]["run_id"]
    sized.parked_for(run_id)
    payload = text(size, 3)
    sized.host.send_message(run_id, "go", payload)
    assert sized.done_output(run_id) == {"big": seen(text(size, 2)), "message": seen(payload)}


@pytest.mark.parametrize("size", SIZES)
def test_a_child_run_gets_and_gives_back_a_value_of_any_size(sized: SizeHost, size: int) -> None:
    run_id = sized.host.start_run(size_flow("parent"), {"size": size})["receipt"]["run_id"]
    blob = text(size, 16)
    assert sized.done_output(run_id) == {"child_saw": seen(blob), "back": seen(blob[::-1])}


@pytest.mark.parametrize("size", SIZES)
def test_a_node_sends_a_message_of_any_size_to_another_run(sized: SizeHost, size: int) -> None:
    receiver = sized.host.start_run(size_flow("message_wait"))["receipt"]["run_id"]
    sized.parked_for(receiver)
    sender = sized.host.start_run(size_flow("sender"), {"to": receiver, "size": size})["receipt"]["run_id"]
    assert sized.done_output(sender) == "sent"
    assert sized.done_output(receiver) == seen(text(size, 17))


# 1,500 child runs take about a minute on 2 cores, most of `make test`'s longest file: `make test-slow`
# (which CI runs too) runs it.
@pytest.mark.slow
def test_a_fan_out_gathers_1500_children_of_1_kb(sized: SizeHost) -> None:
    run_id = sized.host.start_run(fan_flow("fan_out"), {"children": 1500, "size": 1000})["receipt"]["run_id"]
    assert sized.done_output(run_id, timeout=120) == {"count": 1500, "total": 1_500_000, "exact": True}


def test_a_fan_out_gathers_children_whose_outputs_add_up_to_10_mb(sized: SizeHost) -> None:
    run_id = sized.host.start_run(fan_flow("fan_out"), {"children": 10, "size": 1_000_000})["receipt"]["run_id"]
    assert sized.done_output(run_id) == {"count": 10, "total": 10_000_000, "exact": True}


@pytest.mark.parametrize("size", [1_200_000, 3_000_000, 20_000_000])
def test_a_workflow_file_of_any_size_is_snapshotted_and_loaded_by_every_launch(
        sized: SizeHost, size: int, tmp_path: Path) -> None:
    """The host stores the file's bytes with the run; every launch (before and after the sleep) loads
    that snapshot, sent to the worker as content."""
    source = (size_flows_source() + f"\nPADDING = {text(size, 4)!r}\n").encode()
    assert len(source) > size
    path = tmp_path / "padded_flows.py"
    path.write_bytes(source)
    run_id = sized.host.start_run(f"{path}:input_wait", {"blob": "small"})["receipt"]["run_id"]
    assert sized.done_output(run_id) == {"first": seen("small"), "again": seen("small")}
    [stored] = rows(sized.state_dir, "SELECT b.data FROM run r JOIN blob b ON b.sha256 = r.source_sha256 "
                                     "WHERE r.run_id = ?", (run_id,))
    assert bytes(stored["data"]) == source


def size_flows_source() -> str:
    return (Path(__file__).resolve().parent / "wf" / "size_flows.py").read_text()
