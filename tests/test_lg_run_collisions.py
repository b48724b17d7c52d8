"""Two long thread ids whose XXH3-128 collide share one cpstore run (``lg:#<hex>``,
``_codec.run_for``): XXH3 is not collision-resistant against chosen ids, and this pair
(two valid-UTF-8 400-byte ids, built in under a second from XXH3's public default
secret) hashes to one run. Puts and reads stay right (the index keys hold the whole
id); ``delete_thread`` of one deleted the run and so every checkpoint of the other,
with ``verify()`` clean, and ``prune`` (keep_latest) reset and pruned the other's
branches. Now a shared run is kept by a delete and refuses keep_latest before anything
is dropped (found by a read-only study after session 13's CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_store, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore.store as cpstore_store
from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver, _maintain
from cpstore.langgraph._codec import run_for
from cpstore.native.binding import digest
from cpstore.store import Store
from cpstore.store.lg_index import CHECKPOINT_PREFIX, scan

_A = (
    "#AAAAAAAAAAAAAAAAAAAAAAAAAA\u1df3g\x1fAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x81:&LAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)
_B = (
    "#AAAAAAAAAAAAAAAAAAAAAAABAA\u1df3g\x1fAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA@AA\x81:&LAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)


def _values(saver: CpstoreSaver, thread: str) -> list[str]:
    return [t.checkpoint["channel_values"]["x"] for t in saver.list(cfg(thread))]


def _two_threads(store: Store) -> CpstoreSaver:
    """Both ids, two checkpoints each, interleaved, in their one shared run."""
    saver = CpstoreSaver(store)
    a1 = put_value(saver, _A, None, "a1")
    b1 = put_value(saver, _B, None, "b1")
    put_value(saver, _A, a1, "a2")
    put_value(saver, _B, b1, "b2")
    return saver


def test_the_pair_collides_into_one_run() -> None:
    """The premise: distinct ids, one XXH3-128, one run."""
    assert _A != _B
    assert digest(_A.encode()) == digest(_B.encode())
    assert run_for(_A) == run_for(_B)


def test_puts_and_reads_of_colliding_threads_stay_apart(store: Store) -> None:
    saver = _two_threads(store)
    assert _values(saver, _A) == ["a2", "a1"]
    assert _values(saver, _B) == ["b2", "b1"]


@pytest.mark.parametrize("which", ["A", "B"])
def test_deleting_one_colliding_thread_keeps_the_other(store: Store, which: str) -> None:
    """delete_thread (and prune's delete strategy) of one thread leaves the other whole."""
    saver = _two_threads(store)
    gone, kept, want = (_A, _B, ["b2", "b1"]) if which == "A" else (_B, _A, ["a2", "a1"])
    saver.delete_thread(gone)
    assert _values(saver, gone) == []
    assert _values(saver, kept) == want
    assert saver.get_tuple(cfg(kept)) is not None
    saver.prune([gone], strategy="delete")
    assert _values(saver, kept) == want
    assert store.verify().ok


def test_keep_latest_of_a_colliding_thread_is_refused_before_anything_is_dropped(
    store: Store,
) -> None:
    saver = _two_threads(store)
    with pytest.raises(InvalidInputError, match="shares its cpstore run"):
        saver.prune([_A])
    assert _values(saver, _A) == ["a2", "a1"]
    assert _values(saver, _B) == ["b2", "b1"]
    assert store.verify().ok


# More threads for the calls over several threads: two hashed ids of runs of their own
# (an id starting with "#", one too long for a run name) and one whose run is its name.
_C = "#c"
_D = "d" * 300
_E = "e"
_ALL = (_A, _B, _C, _D, _E)


@pytest.fixture(params=["lmdb", "postgresql"])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two fresh stores on one backend: one call over several threads in the first, one
    call per thread in the second (each call reads the index afresh, as before)."""
    urls = (
        [str(tmp_path / "s1"), str(tmp_path / "s2")]
        if request.param == "lmdb"
        else [fresh_url(), fresh_url()]
    )
    stores = [cpstore_store.open(u) for u in urls]
    yield stores[0], stores[1]
    for s in stores:
        s.close()


def _five_threads(store: Store) -> CpstoreSaver:
    """_two_threads, then two checkpoints each of _C, _D and _E."""
    saver = _two_threads(store)
    for thread in (_C, _D, _E):
        first = put_value(saver, thread, None, thread[-1] + "1")
        put_value(saver, thread, first, thread[-1] + "2")
    assert run_for(_C).startswith("lg:#") and run_for(_D).startswith("lg:#")
    assert len({run_for(t) for t in _ALL}) == 4
    return saver


def _outcome(store: Store, saver: CpstoreSaver) -> tuple[Any, ...]:
    """What maintenance left: each thread's values, each run's branch count, verify."""
    values = [_values(saver, t) for t in _ALL]
    return values, {r: len(store.branches(r)) for r in store.runs()}, store.verify().ok


@pytest.mark.parametrize(
    "group",
    [(_A, _C, _E), (_C, _A, _B, _D, _E), (_D, _B)],
    ids=["one-of-the-pair", "all", "other-of-the-pair-last"],
)
def test_deleting_several_hashed_threads_in_one_call_is_one_call_each(
    two_stores: tuple[Store, Store], group: tuple[str, ...]
) -> None:
    """The index is read once per call (not once per hashed thread): the runs swept and
    kept are those of one delete per thread. Deleting both ids of the pair in one call
    sweeps their run, even when a thread before them had the index read (the first of
    the pair is read again after its delete, so the second finds the run unshared)."""
    one, each = two_stores
    saver_one, saver_each = _five_threads(one), _five_threads(each)
    saver_one.prune(list(group), strategy="delete")
    for thread in group:
        saver_each.delete_thread(thread)
    got = _outcome(one, saver_one)
    assert got == _outcome(each, saver_each)
    values, runs, ok = got
    assert ok
    for thread, kept in zip(_ALL, values, strict=True):
        assert (kept == []) == (thread in group)
        assert (run_for(thread) in runs) == any(
            run_for(t) == run_for(thread) for t in _ALL if t not in group
        )


def test_keep_latest_of_several_hashed_threads_in_one_call_is_one_call_each(
    two_stores: tuple[Store, Store],
) -> None:
    """keep_latest over hashed threads of their own runs prunes each; reaching one of
    the pair refuses it there, after the threads before it, before the threads after."""
    one, each = two_stores
    saver_one, saver_each = _five_threads(one), _five_threads(each)
    saver_one.prune([_C, _D])
    with pytest.raises(InvalidInputError, match="shares its cpstore run"):
        saver_one.prune([_E, _C, _B, _D])
    for thread in (_C, _D, _E, _C):
        saver_each.prune([thread])
    with pytest.raises(InvalidInputError, match="shares its cpstore run"):
        saver_each.prune([_B])
    got = _outcome(one, saver_one)
    assert got == _outcome(each, saver_each)
    assert got[0] == [["a2", "a1"], ["b2", "b1"], ["c2"], ["d2"], ["e2"]]
    assert got[2]


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_one_call_reads_the_whole_index_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    """Whether a hashed run is shared is looked up in one read of the whole LangGraph
    index per call, not one per hashed thread (it was O(threads x index))."""
    saver = _five_threads(store)
    real = scan
    whole: list[bytes] = []

    def counting(txn: Any, db: Any, prefix: bytes) -> Any:
        if prefix == CHECKPOINT_PREFIX:
            whole.append(prefix)
        return real(txn, db, prefix)

    monkeypatch.setattr(_maintain, "scan", counting)
    saver.prune([_C, _E, _D], strategy=strategy)
    assert len(whole) == 1
    assert [_values(saver, t) for t in (_C, _D)] == (
        [[], []] if strategy == "delete" else [["c2"], ["d2"]]
    )
