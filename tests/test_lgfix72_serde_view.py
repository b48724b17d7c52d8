"""A saver whose ``serde`` was assigned after it was made (``with_allowlist``'s clone, a
user's ``saver.serde = ...``) stores through one writer view per serde object.

Before lgfix72 ``Writer.with_serde`` built a new view on every put while the saver's
serde differed from the one its writer was made with: a put per step allocated a
writer, and nothing tied two puts through the same serde to one view. Now the view is
kept per serde object (by identity) under the writer's lock; a serde assigned since
takes effect at the next call (lgreview70's ``test_lgreview70_serde_assigned.py``).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._write import Writer
from cpstore.store import Store


def _put(saver: CpstoreSaver, parent: dict[str, Any], n: int) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": n}
    cp["channel_versions"] = {"x": str(n)}
    return saver.put(parent, cp, {"source": "loop", "step": n}, {"x": str(n)})


def _views(saver: CpstoreSaver, monkeypatch: Any) -> list[Writer]:
    """Record the writer each put of ``saver`` goes through."""
    seen: list[Writer] = []
    real = Writer.put

    def put(self: Writer, *args: Any, **kwargs: Any) -> str:
        seen.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Writer, "put", put)
    return seen


def test_puts_through_an_unchanged_assigned_serde_share_one_view(
    store: Store, monkeypatch: Any
) -> None:
    saver = CpstoreSaver(store)
    first = JsonPlusSerializer()
    saver.serde = first
    seen = _views(saver, monkeypatch)
    at: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in range(1, 4):
        at = _put(saver, at, n)
    assert len(seen) == 3 and seen[0] is not saver._writer
    assert seen[0].serde is first
    assert all(v is seen[0] for v in seen), "a new writer view per put"
    # a serde assigned since takes effect at the next put, with a view of its own
    second = JsonPlusSerializer()
    saver.serde = second
    at = _put(saver, at, 4)
    at = _put(saver, at, 5)
    assert seen[3].serde is second and seen[3] is not seen[0] and seen[4] is seen[3]
    # the first serde again: its view, still kept; the writer's own serde: the writer
    saver.serde = first
    at = _put(saver, at, 6)
    assert seen[5] is seen[0]
    saver.serde = saver._writer.serde
    _put(saver, at, 7)
    assert seen[6] is saver._writer
    got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["channel_values"] == {"x": 7}
    assert len(list(saver.list(None))) == 7


def test_a_clone_and_its_saver_each_keep_their_view(store: Store, monkeypatch: Any) -> None:
    """``with_allowlist``'s shallow clone shares the saver's writer: the saver (its own
    serde) and the clone (another) alternating keep one view for the clone."""
    saver = CpstoreSaver(store)
    clone = copy.copy(saver)
    clone.serde = JsonPlusSerializer()
    seen = _views(saver, monkeypatch)
    at: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in range(1, 7):
        at = _put(clone if n % 2 else saver, at, n)
    assert [v is saver._writer for v in seen] == [False, True] * 3
    assert seen[0] is seen[2] is seen[4] and seen[0].serde is clone.serde


def test_threads_taking_a_view_at_once_get_the_same_one(store: Store) -> None:
    """The view is made under the writer's lock: threads asking for the same new serde's
    view at once all get one object."""
    saver = CpstoreSaver(store)
    writer = saver._writer
    for _ in range(20):
        serde = JsonPlusSerializer()
        got: list[Writer] = []
        go = threading.Barrier(8)

        def take(serde: Any, go: threading.Barrier, got: list[Writer]) -> None:
            go.wait()
            got.append(writer.with_serde(serde))

        threads = [threading.Thread(target=take, args=(serde, go, got)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8 and all(v is got[0] for v in got)
        assert got[0].serde is serde and got[0].lock is writer.lock
