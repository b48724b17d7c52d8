"""A put whose ``metadata["step"]`` is below its parent's is refused, nothing stored.

A cpstore branch's steps never go backwards (the manifest's step is
``metadata["step"]``); LangGraph's own savers take any step. LangGraph's loop never
puts one (each checkpoint's step is its parent's plus one, ``update_state``'s and
``as_node="__copy__"``'s too), so the saver refuses it rather than recording a step it
cannot order: ``InvalidInputError`` naming the steps, the parent still the newest
(docs/langgraph.md, "Differences from InMemorySaver").
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store


def _put(saver: CpstoreSaver, parent: dict[str, Any], step: int) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"], cp["channel_versions"] = {"x": step}, {"x": str(step + 10)}
    return saver.put(parent, cp, {"source": "loop", "step": step}, {"x": str(step + 10)})


def test_a_step_below_the_parent_s_is_refused_and_nothing_is_stored(store: Store) -> None:
    saver = CpstoreSaver(store)
    parent = _put(saver, {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, 3)
    with pytest.raises(InvalidInputError) as info:
        _put(saver, parent, 1)
    assert "steps never go backwards" in info.value.what
    listed = [t.config for t in saver.list({"configurable": {"thread_id": "t"}})]
    assert listed == [parent]
    same = _put(saver, parent, 3)  # an equal step is a step forward enough
    got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert got is not None and got.config == same
    assert store.verify().ok
