"""``diff_threads`` compares what LangGraph loads: a channel stored as the empty marker (a
new version without a value) and a channel the checkpoint does not hold are equal.

LangGraph loads both as an empty channel: the saver omits the marker from
``channel_values`` on read (as InMemorySaver omits an "empty" blob) and
``channels_from_checkpoint`` gives a channel missing from ``channel_values`` no value.
Before lgfix72 ``diff_threads`` compared the stored digests, so the marker's digest
against none was reported as a divergence of that channel, for two threads whose every
read was equal.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._read import Entry
from cpstore.store import Store
from cpstore.store.lg_index import CHECKPOINT_PREFIX, pack, scan


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _put(
    saver: CpstoreSaver,
    parent: dict[str, Any],
    values: dict[str, Any],
    versions: dict[str, str],
    new: dict[str, str],
    *,
    step: int,
) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return saver.put(parent, cp, {"source": "loop", "step": step}, new)


def _two_threads(saver: CpstoreSaver, other_b: dict[str, Any] | None = None) -> None:
    """Thread ``a`` stores ``c`` as the empty marker at step 1; ``b`` never holds ``c``
    (or holds ``other_b`` there). Both go on to the same step 2."""
    a = _put(saver, _cfg("a"), {"x": 0}, {"x": "1"}, {"x": "1"}, step=0)
    b = _put(saver, _cfg("b"), {"x": 0}, {"x": "1"}, {"x": "1"}, step=0)
    # a new version of "c" without a value: the empty marker
    a = _put(saver, a, {"x": 1}, {"x": "2", "c": "1"}, {"x": "2", "c": "1"}, step=1)
    if other_b is None:
        b = _put(saver, b, {"x": 1}, {"x": "2"}, {"x": "2"}, step=1)
    else:
        b = _put(saver, b, {"x": 1, **other_b}, {"x": "2", "c": "1"}, {"x": "2", "c": "1"}, step=1)
    _put(saver, a, {"x": 2}, {"x": "3", "c": "1"}, {"x": "3"}, step=2)
    if other_b is None:
        _put(saver, b, {"x": 2}, {"x": "3"}, {"x": "3"}, step=2)
    else:
        _put(saver, b, {"x": 2, **other_b}, {"x": "3", "c": "1"}, {"x": "3"}, step=2)


def test_an_empty_channel_and_an_absent_one_diff_as_equal(store: Store) -> None:
    saver = CpstoreSaver(store)
    _two_threads(saver)
    # what LangGraph loads is the same on both sides, at every checkpoint
    side_a = [t.checkpoint["channel_values"] for t in saver.list(_cfg("a"))]
    side_b = [t.checkpoint["channel_values"] for t in saver.list(_cfg("b"))]
    assert side_a == side_b == [{"x": 2}, {"x": 1}, {"x": 0}]
    diff = diff_threads(store, _cfg("a"), _cfg("b"))
    assert diff.same, diff.summary
    assert diff.channels == () and diff.index is None


def test_an_empty_channel_and_a_value_still_differ(store: Store) -> None:
    saver = CpstoreSaver(store)
    _two_threads(saver, other_b={"c": "held"})
    diff = diff_threads(store, _cfg("a"), _cfg("b"))
    assert not diff.same
    assert diff.index == 1 and diff.step == 1 and diff.channels == ("c",)
    # and in the other order
    back = diff_threads(store, _cfg("b"), _cfg("a"))
    assert back.index == 1 and back.channels == ("c",)


def test_entries_without_the_have_hint_diff_alike(store: Store) -> None:
    """The diff reads a channel's part when the entry does not list it as holding a
    value; with every entry's ``have`` emptied (a hint, not the truth) it reads them
    all and finds the same."""
    saver = CpstoreSaver(store)
    _two_threads(saver, other_b={"c": "held"})
    # "e" stores "c" as the empty marker, "f" never holds it
    _put(saver, _cfg("e"), {"x": 0}, {"x": "1", "c": "1"}, {"x": "1", "c": "1"}, step=0)
    _put(saver, _cfg("f"), {"x": 0}, {"x": "1"}, {"x": "1"}, step=0)
    meta = store.backend.db("meta")

    def strip(txn: Any) -> None:
        for k, v in list(scan(txn, meta, CHECKPOINT_PREFIX)):
            key = bytes(k)
            txn.put(key, pack(key, {**Entry.decode(key, v).body(), "have": []}), db=meta)

    store.backend.write_txn(strip)
    assert diff_threads(store, _cfg("a"), _cfg("b")).channels == ("c",)
    assert diff_threads(store, _cfg("e"), _cfg("f")).same
    assert store.verify().ok
