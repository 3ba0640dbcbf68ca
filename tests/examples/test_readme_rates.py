"""The README's "Rate limits and debounce" examples run as written, on a real host (the test kit's): the
mail sender's limiter parks the eleventh delivery until a minute of timer time has passed and its
per-recipient limit holds the fourth welcome to one person; the search index's edits of one document
collapse into one run that indexes the last draft. Windows pass by skipping the kit's timer clock
(`Piwf.skip`), never by waiting."""

from __future__ import annotations

import json
from pathlib import Path

from test_readme_python import python_block, write_workflow

from piwf_actors.testing import Piwf


def test_mail_example_sends_at_most_ten_a_minute_and_three_an_hour_to_one_person(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "mail", python_block("a mail sender under a rate limit"))
    outbox = tmp_path / "outbox.jsonl"

    def sent() -> list[str]:
        return [json.loads(line)["to"] for line in outbox.read_text().splitlines()] if outbox.exists() else []

    with Piwf(project=project, max_workers=3) as piwf:
        run_ids = [piwf.start("welcome", {"to": f"user{n}@example.com", "outbox": str(outbox)}) for n in range(11)]
        # Ten deliveries go; the eleventh run parks before its step, holding no worker.
        parked = [piwf.wait_until(run_id, lambda view: view.status in ("done", "parked"), "to deliver or park")
                  for run_id in run_ids]
        waiting = [view for view in parked if view.status == "parked"]
        assert len(waiting) == 1 and len(sent()) == 10, (parked, sent())
        assert waiting[0].park_reason == "waiting"
        assert waiting[0].park_detail.startswith("rate limit mail-api: 10 per 60 s, next in ")
        piwf.skip(60)
        assert piwf.wait(waiting[0].run_id).status == "done"
        assert sorted(sent()) == sorted(f"user{n}@example.com" for n in range(11))

        # The workflow's own limit: three welcomes an hour to one person; the fourth waits in the queue.
        again = [piwf.start("welcome", {"to": "user0@example.com", "outbox": str(outbox)}) for _ in range(3)]
        fourth = piwf.wait_until(again[-1], lambda view: view.queue_reason is not None, "to be held")
        assert fourth.status == "queued"
        assert fourth.queue_reason.startswith('rate limit welcome[user0@example.com]: 3 per 3600 s, next in ')
        for run_id in again[:2]:
            assert piwf.wait(run_id).status == "done"
        piwf.skip(3600)
        assert piwf.wait(again[-1]).status == "done"


def test_search_example_rebuilds_once_per_quiet_document_with_the_last_draft(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "search", python_block("a search index rebuilt on debounced edits"))
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    with Piwf(project=project) as piwf:
        receipts = [piwf.host.start_run("reindex", {"doc": "guide", "text": text, "index_dir": str(index_dir)},
                                        project_path=str(project))
                    for text in ("first draft", "second draft", "Final words final")]
        run_id = receipts[0].run_id
        assert [r.run_id for r in receipts] == [run_id] * 3
        assert [r.extra["joined"] for r in receipts] == [False, True, True]
        assert receipts[-1].extra["debounce_starts"] == 3
        held = piwf.run(run_id)
        assert held.status == "queued" and held.queue_reason.startswith("debounced reindex[guide]: 3 starts, ")
        piwf.skip(30)
        done = piwf.wait(run_id)
        assert done.output == {"doc": "guide", "words": 2}
        assert (index_dir / "guide.words").read_text() == "final\nwords"
        later = piwf.host.start_run("reindex", {"doc": "guide", "text": "again", "index_dir": str(index_dir)},
                                    project_path=str(project))
        assert later.run_id != run_id and later.extra["joined"] is False
