"""review91: put90's committed-tail guess checked against the cursor it replaces.

put90 (``content.HeapTail``) lets a write txn's first heap append follow the last seq of
the checkpoint commit just before it (its LMDB id + 1) without reading the heap's last
key. A guess too low is refused by MDB_APPEND (IntegrityError: a good put refused); one
too high is accepted and leaves a gap no test that only checks that puts land would see.
Here every guess taken is compared with the cursor's answer in the same txn (the
heap's last key + 1, which the guess must equal: put90's claim), across the paths put90
names and review91 added: a checkpoint txn retried after MDB_MAP_FULL (in each
durability), the tails dropped in the middle of a txn (the bound of 64 heap handles),
and two other processes writing two stores with this one's threads at once.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore.store import content
from cpstore.store.heap_layout import next_seq

_WAIT = 300.0  # seconds: only so that a broken interleaving fails instead of hanging


def _guess_checked(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[str]]:
    """Content.add, each append compared with the cursor's answer read in its txn just
    before it (the heap's last key + 1): (how many appends took put90's guess, a line
    per append made anywhere else)."""
    real_add = content.Content.add
    taken: list[int] = []
    denied: list[str] = []

    def add(self: Any, txn: Any, key: bytes, *args: Any) -> bool:
        if self.index is None:
            return bool(real_add(self, txn, key, *args))
        tail = content._TAILS.get(self.heap)
        last = None if tail is None else tail.last
        done = None if tail is None else tail.committed
        if (
            last is not None
            and last[0] is not txn
            and done is not None
            and done[0] is last[0]
            and done[1] + 1 == txn.id()
        ):
            taken.append(1)
        real = int.from_bytes(next_seq(txn, self.heap), "big")
        wrote = bool(real_add(self, txn, key, *args))
        tail = content._TAILS.get(self.heap)
        if wrote and (tail is None or tail.last is None or tail.last[0] is not txn):
            denied.append("an append its heap's tail does not name")
        elif wrote and tail is not None and tail.last is not None and tail.last[1] != real:
            denied.append(f"appended at {tail.last[1]}, the heap's last key + 1 was {real}")
        return wrote

    monkeypatch.setattr(content.Content, "add", add)
    return taken, denied


def _heap_keys(st: Any) -> list[int]:
    with st.backend.read_txn() as txn, txn.cursor(db=st.backend.dbs["heap"]) as cur:
        return [int.from_bytes(bytes(k), "big") for k, _ in cur]


def _contiguous(st: Any) -> None:
    keys = _heap_keys(st)
    assert keys == list(range(1, len(keys) + 1))  # nothing deleted here: no gap, no reuse


def _once_after_first_append(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[Any], None], *, skip: int = 0
) -> list[int]:
    """Content.add (as patched so far) calls ``then(txn)`` once, right after the
    ``skip + 1``-th entry it appends; returns the appends counted."""
    inner = content.Content.add
    made: list[int] = []

    def add(self: Any, txn: Any, key: bytes, *args: Any) -> bool:
        wrote = bool(inner(self, txn, key, *args))
        if wrote:
            made.append(1)
            if len(made) == skip + 1:
                then(txn)
        return wrote

    monkeypatch.setattr(content.Content, "add", add)
    return made


@pytest.mark.parametrize("durability", ["none", "sync", "batched"])
def test_a_checkpoint_txn_retried_after_the_map_filled_appends_where_the_heap_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """MDB_MAP_FULL after a checkpoint txn appended (LMDB aborts it; the map grows and the
    same writes run again in a new txn with the same id): the retried txn, whose first
    append finds the aborted txn as the tail's ``last``, and the puts after it append
    right after the heap's last committed key."""
    taken, denied = _guess_checked(monkeypatch)
    opts: dict[str, Any] = {"batch_size": 1} if durability == "batched" else {}
    with cpstore.open(tmp_path / "s", durability=durability, **opts) as st:  # type: ignore[arg-type]
        rec = st.recorder("r")
        for step in range(3):
            rec.checkpoint(step, {"a": f"v{step}", "b": "same"})

        def full(txn: Any) -> None:
            raise lmdb.MapFullError("injected: mdb_put: MDB_MAP_FULL")

        made = _once_after_first_append(monkeypatch, full)
        cid = rec.checkpoint(3, {"a": "retried", "b": "same"})
        assert len(made) >= 3  # the aborted txn's append and the retried txn's
        for step in range(4, 8):
            rec.checkpoint(step, {"a": f"v{step}", "b": "same"})
        st.flush()
        with st.read(cid) as cp:
            assert cp.state() == {"a": "retried", "b": "same"}
        _contiguous(st)
        assert st.verify().ok
    assert denied == []
    assert len(taken) >= 4  # the puts after the retried one took the guess


def test_the_tails_dropped_in_the_middle_of_a_txn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound of 64 heap handles clears every tail, at any moment another thread
    opens a store: here inside a checkpoint txn after its first append. Its later
    appends, a put_object (its own Content object) and the puts after them append right
    after the heap's last key, and the record's location hints name its parts."""
    taken, denied = _guess_checked(monkeypatch)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": "v0", "b": "same"})
        rec.checkpoint(1, {"a": "v1", "b": "same"})
        _once_after_first_append(monkeypatch, lambda txn: content._TAILS.clear())
        cid = rec.checkpoint(2, {"a": "x" * 300, "b": "y" * 300, "c": "z" * 300})
        st.put_object(b"an object of its own txn " * 10)
        for step in range(3, 6):
            rec.checkpoint(step, {"a": f"v{step}", "b": "same"})
        with st.read(cid) as cp:
            assert cp.state() == {"a": "x" * 300, "b": "y" * 300, "c": "z" * 300}
        _contiguous(st)
        assert st.verify().ok
    assert denied == []
    assert taken  # the puts after the last one (no write in between) took the guess


_WORKER = """
import os, sys, threading
sys.path.insert(0, sys.argv[1])
import pytest
import cpstore
import test_review91_heap_tail as probe

mp = pytest.MonkeyPatch()
taken, denied = probe._guess_checked(mp)
paths, name, steps, go = sys.argv[2].split(","), sys.argv[3], int(sys.argv[4]), sys.argv[5]
errors = []

def writer(i):
    try:
        stores = [cpstore.open(p, durability="none") for p in paths]
        recs = [st.recorder(f"{name}-{i}") for st in stores]
        while not os.path.exists(go):
            pass
        for step in range(steps):
            k = (step + i) % len(stores)
            recs[k].checkpoint(step, {"who": name, "s": step, "p": name * (50 + step % 300)})
            if step % 17 == i:
                stores[k].put_object(os.urandom(64))
        for st in stores:
            st.close()
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
print("ready", flush=True)
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"taken={len(taken)} denied={denied[:3]} errors={errors[:3]}", flush=True)
sys.exit(1 if denied or errors else 0)
"""


def test_processes_and_threads_writing_two_stores_every_guess_is_the_cursors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes (two threads each) and two threads here put to two stores at once,
    each thread alternating between the stores: every guess any process takes equals the
    heap's last key + 1 read in its txn, every put lands and both heaps verify."""
    _, denied = _guess_checked(monkeypatch)
    paths = [tmp_path / "x", tmp_path / "y"]
    for p in paths:
        cpstore.open(p).close()
    go, steps = tmp_path / "go", 120
    args = [str(Path(__file__).parent), ",".join(map(str, paths))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, *args, name, str(steps), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p", "q")
    ]
    errors: list[str] = []
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        stores = [cpstore.open(p, durability="none") for p in paths]

        def writer(i: int) -> None:
            try:
                recs = [st.recorder(f"me-{i}") for st in stores]
                for step in range(steps):
                    k = (step + i) % 2
                    recs[k].checkpoint(step, {"who": "me", "s": step, "i": i})
            except BaseException as exc:  # told to the test
                errors.append(repr(exc))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        go.touch()
        for t in threads:
            t.start()
        for t in threads:
            t.join(_WAIT)
        for st in stores:
            st.close()
    finally:
        go.touch()
        outs = [p.communicate(timeout=_WAIT)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert errors == []
    assert denied == []
    for p in paths:
        with cpstore.open(p, readonly=True) as st:
            assert st.verify().ok
            for who in ("p-0", "p-1", "q-0", "q-1", "me-0", "me-1"):
                assert len(list(st.history(who))) == steps // 2
