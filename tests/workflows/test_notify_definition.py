"""A notify node's audience as a definition sees it: checked, part of the digest only when given (runs
started before the option existed keep their definition digest), drawn beside the message."""

from __future__ import annotations

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows import define_workflow, notify
from piwf_actors.workflows.digest import _Fingerprinter, _node_doc
from piwf_actors.workflows.graph import build_graph


def _one(spec):
    return define_workflow(name="w", start_at="n", nodes={"n": spec}, edges=[])


@pytest.mark.parametrize("audience", ["", "  ", 7, ["ops"]])
def test_a_notify_audience_must_be_a_non_empty_string(audience) -> None:
    with pytest.raises(WorkflowDefinitionError, match="^node 'n': audience must be a non-empty string"):
        _one(notify(message="hi", audience=audience))


def test_an_audience_is_part_of_the_digest_only_when_given() -> None:
    plain, routed = _one(notify(message="hi")), _one(notify(message="hi", audience="ops"))
    assert plain.nodes["n"].audience is None and routed.nodes["n"].audience == "ops"
    assert plain.digest != routed.digest != _one(notify(message="hi", audience="security")).digest
    assert "audience" not in _node_doc(notify(message="hi"), _Fingerprinter())
    # The digest a notify without an audience had before the option existed (no callable in it: the same
    # on every Python), which runs started then have stored.
    assert plain.digest == "1336b328b12681498db4ffb5c06cabcbb60f55f1a3538879bf7121682b270dfa"


def test_the_drawing_names_the_audience() -> None:
    [plain] = build_graph(_one(notify(message="hi"))).nodes
    [routed] = build_graph(_one(notify(message="hi", audience="ops"))).nodes
    assert (plain.summary, routed.summary) == ("hi", "hi · to ops")
