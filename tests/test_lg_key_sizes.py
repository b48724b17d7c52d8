"""Names that become store keys: a key over LMDB's 511 bytes is InvalidInputError before
anything is written, on both backends alike (docs/store.md, "Key sizes";
docs/langgraph.md, "Name sizes").

LangGraph's ``thread_id``, ``checkpoint_ns`` and ``checkpoint_id`` may hold 500 UTF-8
bytes together (``MAX_CHECKPOINT_NAMES``: the entry key and its pending writes' prefix
fit in 511), and with a pending write's ``task_id`` 490 (``MAX_WRITE_NAMES``). Run ids
and branch names keep their 200-byte rule (a ref key: at most 401 bytes); an
``extra_meta`` key is at most 511 bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import (  # noqa: F401 - fixtures
    backend_store,
    pg_cluster,
    pg_url,
)

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store
from cpstore.store.lg_index import (
    MAX_CHECKPOINT_NAMES,
    MAX_WRITE_NAMES,
    WRITE_PREFIX,
    checkpoint_key,
    pack,
    scan,
    write_key,
)
from cpstore.store.model import MAX_KEY_BYTES, MAX_NAME_BYTES

ID_BYTES = 36  # a uuid6 checkpoint id


def _name(n: int) -> str:
    """A str of exactly ``n`` UTF-8 bytes, mostly two-byte characters (bytes, not chars)."""
    return "é" * (n // 2) + "x" * (n % 2)


def _cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: CpstoreSaver, thread: str, ns: str = "") -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": "v"}
    cp["channel_versions"] = {"x": "1"}
    out = saver.put(_cfg(thread, ns), cp, {"source": "loop", "step": 0, "parents": {}}, {"x": "1"})
    return str(out["configurable"]["checkpoint_id"])


def _snapshot(store: Store) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    backend = store.backend
    with backend.read_txn() as txn:
        index = [k for k, _ in scan(txn, backend.db("meta"), b"lg/")]
    report = store.verify()
    assert report.ok, report.problems
    return tuple(sorted(report.counts.items())), tuple(index), tuple(store.runs())


def test_the_limits_follow_from_the_key_layout() -> None:
    assert MAX_KEY_BYTES == 511
    assert MAX_CHECKPOINT_NAMES == 500 and MAX_WRITE_NAMES == 490
    at = checkpoint_key(_name(MAX_CHECKPOINT_NAMES - ID_BYTES), "", "c" * ID_BYTES)
    assert len(at) == MAX_KEY_BYTES - 2  # its writes' prefix is 2 bytes longer: 511
    assert len(write_key(_name(464), "", "c" * ID_BYTES)) == MAX_KEY_BYTES
    w = write_key(_name(MAX_WRITE_NAMES - ID_BYTES - 4), "", "c" * ID_BYTES, "task", 0)
    assert len(w) == MAX_KEY_BYTES
    assert 2 * MAX_NAME_BYTES + 1 <= MAX_KEY_BYTES  # a ref key: run NUL branch


@pytest.mark.parametrize("where", ["thread", "ns"])
def test_checkpoint_names_at_the_limit_work_and_one_byte_over_is_refused_before_any_write(
    store: Store, where: str
) -> None:
    saver = CpstoreSaver(store)
    earlier = _put(saver, "before")
    n = MAX_CHECKPOINT_NAMES - ID_BYTES
    thread, ns = (_name(n), "") if where == "thread" else ("t", _name(n - 1))
    cid = _put(saver, thread, ns)
    got = saver.get_tuple(_cfg(thread, ns, cid))
    assert got is not None and got.checkpoint["channel_values"] == {"x": "v"}
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg(thread, ns))] == [
        cid
    ]
    saver.put_writes(_cfg(thread, ns, cid), [], "t")  # no writes: no key, nothing refused
    before = _snapshot(store)
    thread, ns = (_name(n + 1), "") if where == "thread" else ("t", _name(n))
    with pytest.raises(InvalidInputError) as info:
        _put(saver, thread, ns)
    exc = info.value
    assert exc.got == MAX_CHECKPOINT_NAMES + 1 and str(MAX_CHECKPOINT_NAMES) in str(exc.expected)
    assert "too long" in exc.what
    assert _snapshot(store) == before  # nothing written
    # reads of names too long to be stored find nothing (audit23 pinned that reads of
    # 60 KB names work): the same answer on both backends
    assert saver.get_tuple(_cfg(thread, ns, "c" * ID_BYTES)) is None
    assert list(saver.list(_cfg(thread, ns))) == []
    # the store is still usable and the earlier data intact
    assert saver.get_tuple(_cfg("before", "", earlier)) is not None
    assert saver.get_tuple(_cfg("after", "", _put(saver, "after"))) is not None
    assert store.verify().ok


def test_a_thread_name_alone_over_the_limit_is_found_by_no_read_and_refused_by_writes(
    store: Store,
) -> None:
    saver = CpstoreSaver(store)
    _put(saver, "kept")
    before = _snapshot(store)
    long = _name(MAX_CHECKPOINT_NAMES + 1)
    assert saver.get_tuple({"configurable": {"thread_id": long}}) is None
    assert list(saver.list({"configurable": {"thread_id": long}})) == []
    calls: list[Callable[[], Any]] = [lambda: saver.copy_thread("kept", long)]
    for call in calls:
        with pytest.raises(InvalidInputError):
            call()
    # deleting or pruning such a thread finds nothing to do (audit25: an older release
    # may have stored one on PostgreSQL, and those calls then reach it)
    saver.delete_thread(long)
    saver.prune([long])
    assert _snapshot(store) == before


def test_pending_write_names_at_the_limit_work_and_one_byte_over_is_refused(
    store: Store,
) -> None:
    saver = CpstoreSaver(store)
    task = "task"
    at = _name(MAX_WRITE_NAMES - ID_BYTES - len(task))
    cid = _put(saver, at)
    saver.put_writes(_cfg(at, "", cid), [("x", "w")], task)
    got = saver.get_tuple(_cfg(at, "", cid))
    assert got is not None and got.pending_writes == [(task, "x", "w")]
    before = _snapshot(store)
    with pytest.raises(InvalidInputError) as info:
        saver.put_writes(_cfg(at, "", cid), [("x", "w2"), ("y", "w3")], task + "2")
    assert info.value.got == MAX_WRITE_NAMES + 1
    assert _snapshot(store) == before
    got = saver.get_tuple(_cfg(at, "", cid))
    assert got is not None and got.pending_writes == [(task, "x", "w")]


def test_an_extra_meta_key_over_the_key_size_is_refused_before_the_commit(store: Store) -> None:
    rec = store.recorder("r")
    first = rec.checkpoint(0, {"a": 1})
    ok_key = WRITE_PREFIX + b"k" * (MAX_KEY_BYTES - len(WRITE_PREFIX))
    rec.checkpoint(1, {"a": 2}, extra_meta=lambda cid: [(ok_key, pack(ok_key, ["v"]))])
    before = _snapshot(store)
    head = store.ref("r")
    with pytest.raises(InvalidInputError) as info:
        rec.checkpoint(2, {"a": 3}, extra_meta=lambda cid: [(ok_key + b"k", pack(ok_key, ["v"]))])
    assert info.value.got == MAX_KEY_BYTES + 1
    assert _snapshot(store) == before and store.ref("r") == head
    rec.checkpoint(3, {"a": 4})  # the recorder goes on
    with store.read(first) as cp:
        assert cp.state() == {"a": 1}
    rec.close()
