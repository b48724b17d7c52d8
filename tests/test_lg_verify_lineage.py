"""verify() checks a LangGraph entry's lineage: the cpstore checkpoint an entry names
extends the checkpoint of the entry's LangGraph parent (or is a root).

The continue race fixed in flaky5 recorded a put as the child of a checkpoint it never
saw; every other check passed, so a store written before the fix could hold such a
lineage unseen. These tests pin that verify names it (both backends), and that the
saver's own ways of placing checkpoints — forks, copy_thread, delete_for_runs and a
keep_latest reclaim, looked at between each of its txns — never read as one.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from lg_collide import conf, put_at, values
from lg_delta import graph as delta_graph
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _copy_delete, _maintain
from cpstore.langgraph._read import Entry
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack

WHAT = "LangGraph checkpoint extends a checkpoint that is not its LangGraph parent's"


def _entry(store: Store, thread: str, checkpoint_id: str) -> tuple[bytes, Entry]:
    key = checkpoint_key(thread, "", checkpoint_id)
    with store.backend.read_txn() as txn:
        raw = txn.get(key, db=store.backend.db("meta"))
        assert raw is not None, checkpoint_id
        return key, Entry.decode(key, bytes(raw))


def _reparent(store: Store, thread: str, checkpoint_id: str, parent: str | None) -> bytes:
    """Rewrite the entry's LangGraph parent (its check made anew): the state a put left
    that was recorded under another checkpoint than its planned parent's."""
    key, e = _entry(store, thread, checkpoint_id)
    body = Entry.body_of(
        e.cid, run=e.run, branch=e.branch, parent=parent, run_id=e.run_id, have=list(e.have)
    )
    store.backend.write_txn(lambda txn: txn.put(key, pack(key, body), db=store.backend.db("meta")))
    return key


def _lineage(store: Store) -> list[Any]:
    return [p for p in store.verify().problems if p.what == WHAT]


def test_a_checkpoint_recorded_under_another_than_its_parent_is_reported(store: Store) -> None:
    """'2' continues '1' (its cpstore parent is '1''s checkpoint) but its entry says its
    LangGraph parent is '0': verify names the entry, what it expected and what it found.
    Before, verify was clean."""
    saver = CpstoreSaver(store)
    put_at(saver, "t", None, "0", "a")
    put_at(saver, "t", "0", "1", "b")
    put_at(saver, "t", "1", "2", "c")
    assert store.verify().ok
    key = _reparent(store, "t", "2", "0")
    report = store.verify()
    assert [(p.what, p.where, p.expected) for p in report.problems] == [
        (WHAT, f"meta/{key!r}", "the checkpoint of '0'")
    ]
    got = str(report.problems[0].got)
    assert got.startswith(_entry(store, "t", "1")[1].cid.hex()) and "['1']" in got


def test_a_root_entry_whose_checkpoint_extends_an_indexed_one_is_reported(store: Store) -> None:
    """An entry with no LangGraph parent over a checkpoint that extends another entry's."""
    saver = CpstoreSaver(store)
    put_at(saver, "t", None, "0", "a")
    put_at(saver, "t", "0", "1", "b")
    _reparent(store, "t", "1", None)
    assert [p.expected for p in _lineage(store)] == ["a root"]


def test_forks_copies_and_deleted_entries_read_clean(store: Store) -> None:
    """The saver's own placements: a fork from a non-head parent, a root of a second
    namespace, copy_thread onto a thread with entries, delete_for_runs taking a middle
    entry (its child's cpstore parent is then named by no entry: not judged)."""
    saver = CpstoreSaver(store)
    put_at(saver, "t", None, "0", "a")
    put_at(saver, "t", "0", "1", "b")
    put_at(saver, "t", "1", "2", "c")
    put_at(saver, "t", "1", "3", "d")  # '1' is not the head: a fork
    put_at(saver, "t", None, "0", "e", ns="sub")
    assert store.verify().ok
    put_at(saver, "u", None, "9", "z")
    saver.copy_thread("t", "u")
    assert store.verify().ok
    assert sorted(values(saver, "u")) == ["a", "b", "c", "d", "z"]
    cp: dict[str, Any] = {"id": "4", "channel_values": {}, "channel_versions": {}, "v": 1, "ts": ""}
    cp.update(channel_values={"x": "f"}, channel_versions={"x": "f"}, versions_seen={})
    saver.put(conf("t", "", "2"), cp, {"source": "loop", "step": 0, "run_id": "r"}, {"x": "f"})
    put_at(saver, "t", "4", "5", "g")
    saver.delete_for_runs(["r"])  # '5''s cpstore parent is now named by no entry
    report = store.verify()
    assert report.ok, report.problems


def test_keep_latest_never_reads_wrong_between_its_txns(store: Store) -> None:
    """keep_latest moves the kept entries one txn at a time (oldest first): a DeltaChannel
    thread short of its first snapshot keeps its whole chain, so between two moves a
    moved parent sits beside an unmoved child. A verify before and after every move, and
    after the sweep, finds no lineage problem, and the state reads the same."""
    saver = CpstoreSaver(store)
    graph = delta_graph(saver, rare=True)
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    for i in range(3):
        graph.invoke({"log": [f"in{i}"]}, config)
    before = list(graph.get_state(config).values["log"])
    kept = len(list(saver.list(config)))
    seen: list[list[Any]] = []
    real = _copy_delete._copy_one  # patched where the prune calls it

    def copy_one(*args: Any, **kwargs: Any) -> None:
        seen.append(_lineage(store))
        real(*args, **kwargs)
        seen.append(_lineage(store))

    with mock.patch.object(_maintain, "_copy_one", copy_one):
        saver.prune(["d"])
    assert len(seen) == 2 * kept and kept > 2 and all(s == [] for s in seen), seen
    assert store.verify().ok
    assert graph.get_state(config).values["log"] == before
