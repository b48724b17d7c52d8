"""A write txn applying several checkpoints reads each object's location once
(commit.TxnChecked): what it answers from what the txn already checked equals what
the reads would answer, and damage is refused exactly as one checkpoint per txn
refuses it.

Only keys whose location checked (index row -> heap entry carrying kind and key)
are remembered, only for the txn that checked them; a retried txn starts again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored import damage

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store import commit
from cpstore.store.content import (
    KIND_OBJECT,
    KIND_RECORD,
    Content,
    appended_hint,
    objects_of,
    records_of,
)
from cpstore.store.facade import Store
from cpstore.store.objects import put_object

_PARTS = 10


def _states(steps: int, width: int = 30) -> list[dict[str, str]]:
    """``steps`` states of 10 parts, one part new per step (the benchmark's shape)."""
    state = {f"p{i}": f"value {i} " * width for i in range(_PARTS)}
    out = []
    for step in range(steps):
        state[f"p{step % _PARTS}"] = f"step {step} " * width
        out.append(dict(state))
    return out


def _hints_of(store: Store, ids: list[str]) -> list[bytes]:
    """Each record's location hints, as stored."""
    records = records_of(store.backend.dbs)
    with store.backend.env.env.begin(buffers=True) as txn:
        return [bytes(records.hinted(txn, bytes.fromhex(cid))[1]) for cid in ids]


@pytest.mark.parametrize("batch_size", [2, 7, 64])
def test_a_batch_stores_the_hints_one_txn_per_checkpoint_stores(
    tmp_path: Path, batch_size: int
) -> None:
    """The same checkpoints recorded one per txn (none) and in batches: the same ids,
    the same hint blocks (what the txn remembered equals what it would have read)."""
    ids: dict[str, list[str]] = {}
    hints: dict[str, list[bytes]] = {}
    for mode in ("none", "batched"):
        with cpstore.open(tmp_path / mode, durability=mode, batch_size=batch_size) as store:
            rec = store.recorder("r")
            ids[mode] = [rec.checkpoint(step, s) for step, s in enumerate(_states(150))]
            store.flush()
            hints[mode] = _hints_of(store, ids[mode])
            with store.read(ids[mode][-1]) as view:
                assert view.state() == _states(150)[-1]
    assert ids["none"] == ids["batched"]
    assert hints["none"] == hints["batched"]
    assert all(len(h) == 4 * _PARTS for h in hints["batched"])


def _damaged_store(path: Path, how: str) -> tuple[Store, Any, str, bytes]:
    """A batched store, a recorder on it, its head, and a part of the head whose location
    ``how`` damaged (behind the store's back)."""
    store = cpstore.open(path, durability="batched", batch_size=64)
    rec = store.recorder("r")
    head = ""
    for step, s in enumerate(_states(12)):
        head = rec.checkpoint(step, s)
    store.flush()
    with store.read(head) as view:
        victim = bytes(list(view.manifest.raw["state"]["parts"].values())[4])

    def hurt(txn: Any, dbs: Any) -> None:
        seq = bytes(txn.get(victim, db=dbs["oloc"]))
        if how == "row deleted":
            txn.delete(victim, db=dbs["oloc"])
        elif how == "row names the next entry":
            txn.put(victim, (int.from_bytes(seq, "big") + 1).to_bytes(8, "big"), db=dbs["oloc"])
        else:
            entry = bytes(txn.get(seq, db=dbs["heap"]))
            txn.put(seq, bytes((KIND_RECORD,)) + entry[1:], db=dbs["heap"])

    damage(store, hurt)
    return store, rec, head, victim


_HOWS = ["row deleted", "row names the next entry", "entry of another kind"]


@pytest.mark.parametrize("how", _HOWS)
def test_a_batch_whose_later_checkpoint_inherits_a_damaged_location_is_refused_whole(
    tmp_path: Path, how: str
) -> None:
    """Three checkpoints in one flush all inherit the damaged part: the flush raises
    IntegrityError, nothing of the batch is stored, the branch stays at the head."""
    store, rec, head, _ = _damaged_store(tmp_path / "s", how)
    with store:
        for step, s in enumerate(_states(15)[12:], start=12):
            rec.checkpoint(step, s)
        with pytest.raises(IntegrityError):
            store.flush()
        assert store.ref("r") == head


@pytest.mark.parametrize("how", _HOWS)
def test_a_damaged_location_first_named_by_a_later_checkpoint_of_the_batch_is_refused(
    tmp_path: Path, how: str
) -> None:
    """The batch's first checkpoint does not name the damaged part (nothing of it is
    remembered); the second, a fork of the head, inherits it without writing it: that
    checkpoint reads it and the flush is refused whole, neither branch moves."""
    store, rec, head, _ = _damaged_store(tmp_path / "s", how)
    with store:
        last = _states(12)[-1]
        rec.checkpoint(12, dict(last, p4="another value " * 30))  # the victim is p4's value
        store.recorder("r", branch="b", parent=head).checkpoint(13, last)
        assert store.pending == 2
        with pytest.raises(IntegrityError):
            store.flush()
        assert store.ref("r") == head
        assert store.ref("r", "b") is None


_ROW_HOW = ["sound", "no row", "other key", "kind c", "empty entry", "row past 2**32"]


@settings(max_examples=150, deadline=None)
@given(
    pool=st.lists(st.binary(min_size=16, max_size=16), min_size=2, max_size=8, unique=True),
    hows=st.lists(st.sampled_from(_ROW_HOW), min_size=8, max_size=8),
    calls=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=8), min_size=1, max_size=5),
)
def test_locations_answered_from_the_txn_equal_reading_every_key(
    tmp_path_factory: pytest.TempPathFactory,
    pool: list[bytes],
    hows: list[str],
    calls: list[list[int]],
) -> None:
    """A differential fuzz on bare tables (sound and damaged locations): calls in one txn
    sharing ``known`` give, call by call, the hint block and ``found`` of reading every
    key; ``known`` holds exactly the keys found so far, with their hints."""
    path = str(tmp_path_factory.mktemp("t"))
    env = lmdb.open(path, max_dbs=4, map_size=1 << 24)
    try:
        dbs = {name: env.open_db(name.encode()) for name in ("heap", "oloc", "objects")}
        with env.begin(write=True) as txn:
            for i, key in enumerate(pool):
                how = hows[i]
                seq = (i + 1).to_bytes(8, "big")
                entry = bytes((KIND_OBJECT, 16)) + key + b"bytes"
                if how == "no row":
                    continue
                if how == "row past 2**32":
                    seq = (2**32 + i).to_bytes(8, "big")
                elif how == "other key":
                    entry = bytes((KIND_OBJECT, 16)) + pool[(i + 1) % len(pool)]
                elif how == "kind c":
                    entry = bytes((KIND_RECORD,)) + entry[1:]
                elif how == "empty entry":
                    entry = b""
                txn.put(key, seq, db=dbs["oloc"])
                txn.put(seq, entry, db=dbs["heap"])
        objects = Content(dbs, KIND_OBJECT)
        known: dict[bytes, bytes] = {}
        ever: set[bytes] = set()
        txn = env.begin(write=True, buffers=True)
        try:
            for picks in calls:
                keys = [pool[i % len(pool)] for i in picks]
                found: set[bytes] = set()
                want_found: set[bytes] = set()
                got = objects.locations(txn, keys, found, known)
                want = objects.locations(txn, keys, want_found)
                assert got == want
                assert found == want_found
                ever |= want_found
                assert set(known) == ever
                for key, hint in known.items():
                    assert objects.locations(txn, [key])[4:] == hint
        finally:
            txn.abort()
    finally:
        env.close()


def test_each_attempt_of_a_txn_gets_its_own_record_of_what_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose txn is retried after the map grows is applied again with a new
    TxnChecked (nothing remembered from the aborted attempt) and lands whole."""
    made: list[commit.TxnChecked] = []
    real = commit.TxnChecked

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(commit, "TxnChecked", Counted)
    small = 1 << 20
    with cpstore.open(
        tmp_path / "s", durability="batched", batch_size=1000, map_size=small
    ) as store:
        rec = store.recorder("r")
        states = _states(900, width=150)
        ids = [rec.checkpoint(step, s) for step, s in enumerate(states)]
        assert store.pending == 900
        store.flush()
        assert store.backend.env.env.info()["map_size"] > small  # it grew: a retry
        assert len(made) >= 2
        assert len({id(m) for m in made}) == len(made)
        with store.read(ids[-1]) as view:
            assert view.state() == states[-1]
        assert store.verify().ok


def test_the_hint_of_an_object_a_txn_appended_is_its_location_as_read(tmp_path: Path) -> None:
    """After a put that appended, ``appended_hint`` is the hint a location read gives;
    after a put that found the object stored (nothing appended) the caller asks none,
    and another txn never sees this txn's append."""
    with cpstore.open(tmp_path / "s") as store:
        objects = objects_of(store.backend.dbs)
        env = store.backend.env.env
        keys = [bytes([i]) * 16 for i in range(1, 4)]
        txn = env.begin(write=True, buffers=True)
        try:
            assert appended_hint(txn, objects.heap) is None  # nothing appended by this txn yet
            for key in keys:
                assert put_object(txn, objects, key, b"bytes of " + key)
                assert appended_hint(txn, objects.heap) == objects.locations(txn, [key])[4:]
            assert not put_object(txn, objects, keys[0], b"bytes of " + keys[0])
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        other = env.begin(write=True, buffers=True)
        try:
            assert appended_hint(other, objects.heap) is None
        finally:
            other.abort()
