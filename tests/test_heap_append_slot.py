"""The heap's next seq within a write txn: taken from the txn's own previous append.

``content.HeapTail.last`` remembers (write txn, last seq) per heap handle (put90; a
slot for the process before); a put in the same txn takes the next seq without a
cursor. Threads writing different stores at once: each must still append above its
own heap's last key, and a slot naming another txn must never be used.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store import content
from cpstore.store.content import objects_of


def _record(path: Path, steps: int, errors: list[BaseException], ids: list[str]) -> None:
    try:
        with cpstore.open(path, durability="batched", batch_size=7) as st:
            rec = st.recorder("r")
            for step in range(steps):
                ids.append(rec.checkpoint(step, {"a": f"{path.name}-{step}", "b": step % 3}))
    except BaseException as exc:  # reported by the test
        errors.append(exc)


def test_threads_appending_to_two_stores_at_once_keep_each_heap_in_order(
    tmp_path: Path,
) -> None:
    """Two stores written by two threads at once (batched txns of several puts, so the
    slot is used and replaced mid-txn): every checkpoint reads back, verify is clean."""
    errors: list[BaseException] = []
    ids: dict[str, list[str]] = {"x": [], "y": []}
    threads = [
        threading.Thread(target=_record, args=(tmp_path / name, 300, errors, ids[name]))
        for name in ids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for name, written in ids.items():
        with cpstore.open(tmp_path / name, readonly=True) as st:
            report = st.verify()
            assert report.ok, report.problems
            for step, cid in enumerate(written):
                with st.read(cid) as cp:
                    assert cp.state() == {"a": f"{name}-{step}", "b": step % 3}


def test_a_slot_naming_another_txn_is_not_used(tmp_path: Path) -> None:
    """A slot left by a txn of another store (a higher seq) does not move this heap."""
    with cpstore.open(tmp_path / "big") as big:
        rec = big.recorder("r")
        for step in range(50):
            rec.checkpoint(step, {"a": step})
    with cpstore.open(tmp_path / "small") as small:
        small.recorder("r").checkpoint(0, {"a": "first"})
        tail = content._tail_of(small.backend.dbs["heap"])
        assert tail.last is not None
        tail.last = (object(), 10_000)  # another txn's slot
        cid = small.recorder("r2").checkpoint(0, {"a": "second"})
        dbs = small.backend.dbs
        with small.backend.read_txn() as txn, txn.cursor(db=dbs["heap"]) as cur:
            assert cur.last()
            assert int.from_bytes(bytes(cur.key()), "big") < 100
        with small.read(cid) as cp:
            assert cp.state() == {"a": "second"}


def test_a_wrong_slot_for_this_txn_is_refused_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the slot ever named a seq below this txn's last append, MDB_APPEND refuses it
    and the put raises (nothing of the txn lands), never writing an index row alone."""
    with cpstore.open(tmp_path / "s") as st:
        st.recorder("r").checkpoint(0, {"a": 1})
        real_add = content.Content.add

        def add_with_stale_slot(self: Any, txn: Any, key: bytes, *args: Any) -> bool:
            content._tail_of(self.heap).last = (txn, 0)  # claims seq 1, below the last key
            return real_add(self, txn, key, *args)

        monkeypatch.setattr(content.Content, "add", add_with_stale_slot)
        with pytest.raises(IntegrityError, match="heap refused"):
            st.recorder("r2").checkpoint(0, {"a": 2})
        monkeypatch.setattr(content.Content, "add", real_add)
        with st.backend.read_txn() as txn:
            count = objects_of(st.backend.dbs).count(txn)
        report = st.verify()
        assert report.ok, report.problems
        assert count == 1  # the first checkpoint's one part: nothing of the refused put
