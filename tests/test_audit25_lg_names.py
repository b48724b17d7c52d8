"""audit25: names past the key-size limit that an older release stored are found, and
refusals leave nothing behind (docs/langgraph.md, "Name sizes"; docs/store.md, "Key sizes").

Before lgtrust, PostgreSQL took LangGraph names of any length and LMDB entry keys up to
511 bytes (names of up to 502 bytes). Reads must find what such a release stored (a
checkpoint it acknowledged); writes past today's limit stay refused before anything is
written. The "older release" is this one with the size check switched off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pg_cluster import (  # noqa: F401 - fixtures
    backend_store,
    pg_cluster,
    pg_url,
)

import cpstore.store as cpstore_store
from cpstore.errors import CpstoreError, FormatVersionError, IntegrityError, InvalidInputError
from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver, _read
from cpstore.langgraph._codec import branch_label, pack_head, pack_typed, run_for
from cpstore.store import Store, lg_index, model
from cpstore.store.lg_index import MAX_CHECKPOINT_NAMES, scan
from cpstore.store.model import MAX_NAME_BYTES

ID_BYTES = 36


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:  # noqa: F811
    st_ = cpstore_store.open(pg_url)
    yield st_
    st_.close()


def _name(n: int) -> str:
    return "é" * (n // 2) + "x" * (n % 2)


def _cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: CpstoreSaver, thread: str, ns: str = "", parent: str | None = None) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": "v"}
    cp["channel_versions"] = {"x": "1"}
    out = saver.put(
        _cfg(thread, ns, parent), cp, {"source": "loop", "step": 0, "parents": {}}, {"x": "1"}
    )
    return str(out["configurable"]["checkpoint_id"])


def _unlimited(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older release: no size check on LangGraph index keys."""
    monkeypatch.setattr(lg_index, "_fits", lambda key, *a: key)
    monkeypatch.setattr(lg_index, "MAX_CHECKPOINT_NAMES", 1 << 20)
    monkeypatch.setattr(_read, "_ENTRY_KEY_MAX", 1 << 20)
    monkeypatch.setattr(model, "MAX_KEY_BYTES", 1 << 20)  # extra_meta keys (PostgreSQL)


def _index(store: Store) -> list[bytes]:
    with store.backend.read_txn() as txn:
        return [k for k, _ in scan(txn, store.backend.db("meta"), b"lg/")]


def test_an_older_pg_stores_long_names_are_read_deleted_and_copied(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = CpstoreSaver(pg_store)
    long = _name(600)
    ns = _name(300)
    with monkeypatch.context() as m:
        _unlimited(m)
        old = CpstoreSaver(pg_store)
        first = _put(old, long, ns)
        second = _put(old, long, ns, first)
        old.put_writes(_cfg(long, ns, second), [("x", "w")], "task")
    # today's saver finds what the older release acknowledged
    got = saver.get_tuple(_cfg(long, ns, second))
    assert got is not None and got.checkpoint["channel_values"] == {"x": "v"}
    assert got.pending_writes == [("task", "x", "w")]
    latest = saver.get_tuple(_cfg(long, ns))
    assert latest is not None and latest.config["configurable"]["checkpoint_id"] == second
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg(long, ns))]
    assert listed == [second, first]
    by_thread = [
        t.config["configurable"]["checkpoint_id"]
        for t in saver.list({"configurable": {"thread_id": long}})
    ]
    assert by_thread == [second, first]
    whole = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None)]
    assert whole == [second, first]
    assert list(saver.list(_cfg(long, ns), before=_cfg(long, ns, second))) != []
    # verify names them: LMDB could not hold these keys
    report = pg_store.verify()
    assert not report.ok
    assert any("too long" in p.what for p in report.problems), report.problems
    # prune re-records under the same names: refused before anything is dropped
    before = _index(pg_store)
    with pytest.raises(InvalidInputError) as info:
        saver.prune([long])
    assert str(MAX_CHECKPOINT_NAMES) in str(info.value.expected)
    assert _index(pg_store) == before
    # copy to a name within the limit works; to one past it is refused, nothing written
    with pytest.raises(InvalidInputError):
        saver.copy_thread(long, long + "2")
    assert _index(pg_store) == before
    saver.copy_thread(long, "short")
    copied = saver.get_tuple(_cfg("short", ns[:100], None))
    assert copied is None  # the namespace is long too: copy keeps it
    got2 = saver.get_tuple(_cfg("short", ns, second))
    assert got2 is not None and got2.pending_writes == [("task", "x", "w")]
    # delete_thread removes every record of the old thread
    saver.delete_thread(long)
    assert saver.get_tuple(_cfg(long, ns, second)) is None
    assert not any(long.encode() in k for k in _index(pg_store))


def test_an_older_lmdb_stores_entry_of_502_name_bytes_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st_ = cpstore_store.open(str(tmp_path / "s"))
    try:
        thread = _name(502 - ID_BYTES)  # the entry key is 511 bytes: LMDB took it
        with monkeypatch.context() as m:
            _unlimited(m)
            cid = _put(CpstoreSaver(st_), thread)
        saver = CpstoreSaver(st_)
        got = saver.get_tuple(_cfg(thread, "", cid))
        assert got is not None and got.pending_writes == []
        assert saver.get_tuple(_cfg(thread)) is not None
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg(thread))] == [
            cid
        ]
        # names LMDB cannot hold at all: found nowhere, no engine error
        assert saver.get_tuple(_cfg(_name(700), "", cid)) is None
        assert saver.get_tuple(_cfg(_name(700))) is None
        assert list(saver.list(_cfg(_name(700), _name(30)))) == []
        saver.delete_thread(thread)
        assert saver.get_tuple(_cfg(thread, "", cid)) is None
        assert _index(st_) == []
    finally:
        st_.close()


def test_a_copy_refused_part_way_leaves_nothing_behind(store: Store) -> None:
    saver = CpstoreSaver(store)
    fits = MAX_CHECKPOINT_NAMES - ID_BYTES - 1
    _put(saver, "s", "")
    _put(saver, "s", _name(fits))  # "s" + ns + id: 500 bytes
    before = _index(store)
    with pytest.raises(InvalidInputError):
        saver.copy_thread("s", "ss")  # "ss" + the long ns + id: 501
    assert _index(store) == before
    assert list(saver.list({"configurable": {"thread_id": "ss"}})) == []


def test_a_copy_whose_pending_write_key_is_over_is_refused_before_any_write(
    store: Store,
) -> None:
    saver = CpstoreSaver(store)
    at = _name(490 - ID_BYTES - 2)  # with task "tt": exactly 490
    cid = _put(saver, at)
    saver.put_writes(_cfg(at, "", cid), [("x", "w")], "tt")
    before = _index(store)
    with pytest.raises(InvalidInputError):
        saver.copy_thread(at, at + "z")  # entry fits (491 <= 500), the write does not
    assert _index(store) == before


@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb"])
def test_names_without_a_utf8_form_are_invalid_input_on_every_path(store: Store, bad: str) -> None:
    saver = CpstoreSaver(store)
    cid = _put(saver, "t")
    calls: list[Callable[[], Any]] = [
        lambda: saver.get_tuple(_cfg("t", "", bad)),
        lambda: saver.get_tuple(_cfg(bad)),
        lambda: saver.get_tuple(_cfg("t", bad)),
        lambda: list(saver.list(_cfg(bad))),
        lambda: list(saver.list(_cfg("t", bad))),
        lambda: _put(saver, bad),
        lambda: _put(saver, "t", bad),
        lambda: saver.put_writes(_cfg("t", "", cid), [("x", 1)], bad),
        lambda: saver.put_writes(_cfg("t", "", bad), [("x", 1)], "task"),
        lambda: saver.put_writes(_cfg("t", "", cid), [(bad, 1)], "task"),
        lambda: saver.put_writes(_cfg("t", "", cid), [("x", 1)], "task", bad),
        lambda: saver.delete_thread(bad),
        lambda: saver.copy_thread("t", bad),
        lambda: saver.copy_thread(bad, "u"),
        lambda: saver.prune([bad]),
    ]
    before = _index(store)
    for call in calls:
        with pytest.raises(InvalidInputError):
            call()
    assert _index(store) == before


class _BuggySerde:
    """Encodes as the default does; its decode has a bug (TypeError on good data)."""

    def __init__(self) -> None:
        self._inner = JsonPlusSerializer()
        self.broken = False

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self._inner.dumps_typed(obj)
        return str(kind), bytes(data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if self.broken:
            raise TypeError("bug in the serde")
        return self._inner.loads_typed(data)


def test_a_serdes_own_exception_is_chained_and_named(store: Store) -> None:
    serde = _BuggySerde()
    saver = CpstoreSaver(store, serde=serde)
    cid = _put(saver, "t")
    serde.broken = True
    with pytest.raises(IntegrityError) as info:
        saver.get_tuple(_cfg("t", "", cid))
    exc = info.value
    assert isinstance(exc.__cause__, TypeError)
    assert "serde" in exc.what and "TypeError: bug in the serde" in str(exc.got)
    assert cid in str(exc.where) or "checkpoint" in str(exc.where)


@pytest.mark.parametrize("thread", ["x", "y"])  # y: not the run's thread (every entry)
def test_verify_reports_a_malformed_head_only_of_a_checkpoint_the_index_names(
    store: Store, thread: str
) -> None:
    rec = store.recorder("lg:x")  # any caller may name a run so (not the saver's)
    own = rec.checkpoint(0, {"a": 1}, metadata={"lg": b"not a head"})
    rec.close()
    assert store.verify().ok, store.verify().problems
    assert store.verify_checkpoint(own) == ()
    # the same bytes under a checkpoint the saver's index names: reported
    saver = CpstoreSaver(store)
    cid = _put(saver, thread)
    with store.backend.read_txn() as txn:
        ((key, value),) = list(scan(txn, store.backend.db("meta"), b"lg/c/"))
        body = lg_index.unpack(key, value)
    body["cp"] = bytes.fromhex(own)
    store.backend.write_txn(
        lambda txn: txn.put(key, lg_index.pack(key, body), db=store.backend.db("meta"))
    )
    report = store.verify()
    assert [p.what for p in report.problems] == ["unknown LangGraph checkpoint layout"]
    assert [p.what for p in store.verify_checkpoint(own)] == ["unknown LangGraph checkpoint layout"]
    assert cid


def _bad_child(
    store: Store,
    saver: CpstoreSaver,
    thread: str,
    parent: str,
    *,
    have: list[str] | None = None,
    head: bytes = b"\x02\x00\x00\x00\x09short",
) -> str:
    """A second checkpoint of ``thread`` whose layout-2 head is malformed (every digest
    right: written through the store's API)."""
    with store.backend.read_txn() as txn:
        entry = _read.entry_at(txn, store.backend.db("meta"), thread, "", parent)
    assert entry is not None
    child = parent[:-1] + ("0" if parent[-1] != "0" else "1")
    child = max(child, parent + "0")
    key = lg_index.checkpoint_key(thread, "", child)
    rec = store.recorder(entry.run, branch=entry.branch)

    def extra(cid: bytes) -> list[tuple[bytes, bytes | None]]:
        body = _read.Entry.body_of(
            bytes(cid),
            run=entry.run,
            branch=entry.branch,
            parent=parent,
            run_id=None,
            have=have or [],
        )
        return [(key, lg_index.pack(key, body))]

    rec.checkpoint(1, {}, metadata={"lg": head}, extra_meta=extra)
    rec.close()
    return child


def test_a_copy_that_meets_a_malformed_checkpoint_copies_nothing(store: Store) -> None:
    saver = CpstoreSaver(store)
    first = _put(saver, "src")
    _bad_child(store, saver, "src", first)
    before = _index(store)
    runs = store.runs()
    with pytest.raises(IntegrityError):
        saver.copy_thread("src", "dst")
    assert _index(store) == before  # not the good first checkpoint alone
    assert store.runs() == runs
    assert saver.get_tuple(_cfg("dst")) is None


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_a_multibyte_char_straddling_the_limit_counts_by_bytes(store: Store, char: str) -> None:
    saver = CpstoreSaver(store)
    width = len(char.encode())
    room = MAX_CHECKPOINT_NAMES - ID_BYTES  # the thread's bytes beside a uuid6 id
    at = "x" * (room - width) + char  # ends exactly at the limit
    cid = _put(saver, at)
    assert saver.get_tuple(_cfg(at, "", cid)) is not None
    for shift in range(1, width + 1):  # the char now straddles the limit, or lies past it
        over = "x" * (room - width + shift) + char
        before = _index(store)
        with pytest.raises(InvalidInputError) as info:
            _put(saver, over)
        assert info.value.got == MAX_CHECKPOINT_NAMES + shift
        assert _index(store) == before
        assert saver.get_tuple(_cfg(over)) is None


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)


@settings(max_examples=300, deadline=None)
@given(a=st.tuples(_TEXT, _TEXT, _TEXT), b=st.tuples(_TEXT, _TEXT, _TEXT))
def test_distinct_names_never_share_a_key_run_or_branch(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    ka = lg_index.checkpoint_key(*a, sized=False)
    assert lg_index.split_checkpoint_key(ka) == a
    if a != b:
        assert ka != lg_index.checkpoint_key(*b, sized=False)
        assert lg_index.write_key(*a, "t", 0, sized=False) != lg_index.write_key(
            *b, "t", 0, sized=False
        )
    if a[0] != b[0]:
        assert run_for(a[0]) != run_for(b[0])
    if a[1] != b[1]:
        assert branch_label(a[1]) != branch_label(b[1])
    for name in (run_for(a[0]), branch_label(a[1])):
        assert 0 < len(name.encode()) <= MAX_NAME_BYTES


@settings(max_examples=200, deadline=None)
@given(t=_TEXT.filter(lambda t: t and not t.startswith("#")), long=st.text(min_size=200))
def test_a_hashed_run_name_is_never_a_plain_one(t: str, long: str) -> None:
    """A plain run is ``lg:<thread>``, a hashed one ``lg:#<hex>``: a thread id that looks
    like a hash is hashed itself, so the two never meet."""
    hashed = run_for(long)
    assert hashed.startswith("lg:#")
    assert run_for(hashed[3:]) != hashed
    assert t == long or run_for(t) != hashed


@pytest.mark.parametrize(
    "head", [b"\x02\x00\x00\x00\x09short", b"\x07rest", b"\x02\x00\x00\x00\x01xy"]
)
def test_delta_channel_history_through_a_malformed_parent_is_refused_sync_and_async(
    store: Store, head: bytes
) -> None:
    saver = CpstoreSaver(store)
    first = _put(saver, "d")
    bad = _bad_child(store, saver, "d", first, have=["x"], head=head)
    target = _bad_child(store, saver, "d", bad)
    asaver = AsyncCpstoreSaver(store)
    calls: list[Callable[[], Any]] = [
        lambda: saver.get_delta_channel_history(config=_cfg("d", "", target), channels=["x"]),
        lambda: asyncio.run(
            asaver.aget_delta_channel_history(config=_cfg("d", "", target), channels=["x"])
        ),
    ]
    for call in calls:
        with pytest.raises(CpstoreError) as info:
            call()
        assert type(info.value) in (IntegrityError, FormatVersionError)
        assert info.value.where


def test_a_prune_whose_kept_checkpoint_does_not_decode_drops_nothing(store: Store) -> None:
    saver = CpstoreSaver(store)
    serde = JsonPlusSerializer()
    first = _put(saver, "p")
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_versions"] = {}
    head = pack_head(pack_typed(serde.dumps_typed(cp)), pack_typed(("msgpack", b"\xc1")))
    _bad_child(store, saver, "p", first, head=head)  # the latest: kept, and re-recorded
    before = _index(store)
    with pytest.raises(IntegrityError):
        saver.prune(["p"])
    assert _index(store) == before  # the older checkpoint is not dropped part-way
    assert saver.get_tuple(_cfg("p", "", first)) is not None
