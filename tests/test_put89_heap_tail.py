"""The heap's next seq for a write txn's first append, taken from the commit before it.

``content._COMMITTED`` remembers (heap, txn id, last seq appended) of a checkpoint
commit once it committed; a write txn whose LMDB id is the next one appends after that
seq without a cursor (put89). Every case pins the seq a put appends at to the general
path's answer, the heap's last key + 1 read in a txn of its own: a commit in between
(another write of this process, another process), or the slot of another store, must
send the put to the cursor, never to a seq below the tail (refused) or past it (a gap).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.store import content
from cpstore.store.content import objects_of
from cpstore.store.heap_layout import next_seq as real_next_seq


def _heap_keys(st: Any) -> list[int]:
    dbs = st.backend.dbs
    with st.backend.read_txn() as txn, txn.cursor(db=dbs["heap"]) as cur:
        return [int.from_bytes(bytes(k), "big") for k, _ in cur]


def _cursor_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def spy(txn: Any, heap: Any) -> bytes:
        calls.append(1)
        return real_next_seq(txn, heap)

    monkeypatch.setattr(content, "next_seq", spy)
    return calls


def _put_appends_after_tail(st: Any, rec: Any, step: int, value: str) -> None:
    """One put appends its object and record right after the heap's last key (the
    cursor's answer), contiguously, and reads back."""
    before = _heap_keys(st)
    cid = rec.checkpoint(step, {"a": value, "b": "same"})
    added = sorted(set(_heap_keys(st)) - set(before))
    first = (before[-1] if before else 0) + 1
    assert len(added) >= 2  # the new object(s), then the record
    assert added == list(range(first, first + len(added)))
    with st.read(cid) as cp:
        assert cp.state() == {"a": value, "b": "same"}


@pytest.mark.parametrize("durability", ["none", "sync"])
def test_consecutive_puts_need_no_cursor_and_append_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = _cursor_calls(monkeypatch)
    with cpstore.open(tmp_path / "s", durability=durability) as st:  # type: ignore[arg-type]
        rec = st.recorder("r")
        for step in range(12):
            _put_appends_after_tail(st, rec, step, f"v{step}")
        assert len(calls) == 1  # the first put's: no commit of this env before it
        report = st.verify()
        assert report.ok, report.problems


def test_a_write_in_between_sends_the_next_put_to_the_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write txn that is not a checkpoint commit appends above the tail, or deletes
    the tail: the next put's txn id is not the slot's + 1, so it reads the tail."""
    calls = _cursor_calls(monkeypatch)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("r")
        _put_appends_after_tail(st, rec, 0, "v0")
        objects = objects_of(st.backend.dbs)
        extra = [bytes([i]) * 16 for i in (1, 2)]
        st.backend.write_txn(lambda txn: [objects.add(txn, k, b"x" + k) for k in extra])
        n = len(calls)
        _put_appends_after_tail(st, rec, 1, "v1")  # above the two appended in between
        assert len(calls) == n + 1
        st.backend.write_txn(lambda txn: [objects.delete(txn, k) for k in extra])
        _put_appends_after_tail(st, rec, 2, "v2")  # right after the tail, no gap
        _put_appends_after_tail(st, rec, 3, "v3")
        assert len(calls) == n + 2
        report = st.verify()
        assert report.ok, report.problems


def test_another_process_committing_in_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _cursor_calls(monkeypatch)
    path = tmp_path / "s"
    child = (
        "import cpstore, sys\n"
        "with cpstore.open(sys.argv[1], durability='none') as st:\n"
        "    st.recorder('other').checkpoint(0, {'a': 'from another process'})\n"
    )
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("r")
        _put_appends_after_tail(st, rec, 0, "v0")
        st.flush()
        subprocess.run([sys.executable, "-c", child, str(path)], check=True, timeout=120)
        n = len(calls)
        _put_appends_after_tail(st, rec, 1, "v1")
        assert len(calls) == n + 1
        report = st.verify()
        assert report.ok, report.problems


def test_the_slot_of_another_store_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two new stores written in turn by one thread: their txn ids move alike, and each
    commit leaves the slot naming its own heap; the other store's put reads its tail."""
    calls = _cursor_calls(monkeypatch)
    with (
        cpstore.open(tmp_path / "x", durability="none") as x,
        cpstore.open(tmp_path / "y", durability="none") as y,
    ):
        rx, ry = x.recorder("r"), y.recorder("r")
        _put_appends_after_tail(x, rx, 0, "x-big-" * 50)
        for step in range(1, 6):
            _put_appends_after_tail(y, ry, step - 1, f"y{step}")
            _put_appends_after_tail(x, rx, step, f"x{step}")
        assert len(calls) == 11  # every put follows the other store's commit
        for st in (x, y):
            report = st.verify()
            assert report.ok, report.problems
