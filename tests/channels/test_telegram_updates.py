"""How a channel adapter reads a batch of Telegram updates (channels/telegram_updates.py): in the service's
order, passing over what it handled before and the service serves again, re-basing where the ids restart."""

from __future__ import annotations

from piwf_actors.channels.base import Other, Restart
from piwf_actors.channels.telegram_updates import Served

OLD = list(range(1000, 1006))


def read(served: Served, ids: list[int], cursor: int) -> list[int | str]:
    """The work of a batch of these ids: an update as its id, a re-base as "restart N" (the ids are
    Telegram's integers; the seam carries them, and the cursor, as their decimal text)."""
    return [f"restart {item.cursor}" if isinstance(item, Restart) else int(item.update_id)
            for item in served.read([Other(str(update_id)) for update_id in ids], str(cursor))]


def handle(served: Served, work: list[int | str]) -> None:
    """What the adapter does with a batch's work: it handles (or passes over) every update."""
    for item in work:
        if isinstance(item, int):
            served.handled(str(item))


def test_updates_above_the_cursor_are_read_as_they_came() -> None:
    assert read(Served(), [10, 11, 12], 10) == [10, 11, 12]


def test_where_the_ids_drop_a_new_generation_starts_after_what_came_before() -> None:
    """The defect's batch, read by an adapter that remembers nothing (one that just started): the
    updates before the drop are of the cursor's generation (below it: the adapter passes them over),
    the update after it starts a new one. Sorted by id, 1000..1005 came after 5, as new ones."""
    assert read(Served(), [*OLD, 5], 1006) == [*OLD, "restart 5", 5]


def test_updates_handled_before_that_the_service_serves_again_are_passed_over() -> None:
    served = Served()
    handle(served, read(served, OLD, 0))
    # The ids restart before the poll from 1006 reached the service: it answers from its head.
    work = read(served, [*OLD, 5], 1006)
    assert work == ["restart 5", 5]
    handle(served, work)
    # The poll from 6 confirms 5; nothing in the new ids can confirm 1000..1005, which the service
    # serves again and again at its head: never applied again (in the new generation they are above
    # the cursor), whatever comes behind them.
    assert read(served, OLD, 6) == []
    assert read(served, OLD, 6) == []
    assert read(served, [*OLD, 6, 7], 6) == [6, 7]


def test_a_batch_that_starts_below_the_cursor_is_a_restart() -> None:
    """Telegram's own shape: its ids restart only once its queue is empty, so the new ids come alone."""
    assert read(Served(), [5, 6], 1006) == ["restart 5", 5, 6]


def test_a_batch_served_again_from_the_head_is_no_restart() -> None:
    """The same updates served again for an offset the service does not know yet (its ids restarted,
    nothing new since): below the cursor, but handled already, so no re-base (on main: a re-base,
    the updates applied again, the cursor back where it was, and the same batch again, in a loop)."""
    served = Served()
    handle(served, read(served, OLD, 0))
    assert read(served, OLD, 1006) == []


def test_an_id_used_again_after_the_served_ones_is_a_new_update() -> None:
    served = Served()
    handle(served, read(served, OLD, 0))
    # The ids restart at 1000: the same ids again, behind the ones served before, are new updates.
    work = read(served, [*OLD, 1000, 1001], 1006)
    assert work == ["restart 1000", 1000, 1001]
    handle(served, work)
    # The poll from 1002 confirmed both 1000s and both 1001s; the old 1002..1005 are still served first.
    assert read(served, [1002, 1003, 1004, 1005, 1002], 1002) == [1002]


def test_what_the_service_no_longer_serves_is_forgotten() -> None:
    served = Served()
    handle(served, read(served, OLD, 0))
    handle(served, read(served, [1006], 1006))
    # 1000..1005 were confirmed meanwhile: ids like theirs are now a restart of the service's ids.
    assert read(served, [1001, 1002], 1007) == ["restart 1001", 1001, 1002]


def test_a_poll_that_found_nothing_forgets_nothing() -> None:
    served = Served()
    handle(served, read(served, OLD, 0))
    assert read(served, [], 1006) == []
    assert read(served, OLD, 1006) == []


def test_each_drop_starts_a_generation() -> None:
    assert read(Served(), [1000, 5, 6, 3], 1000) == [1000, "restart 5", 5, 6, "restart 3", 3]
