"""A write txn's first heap append, taken from the checkpoint commit just before it.

``content.HeapTail`` (one per heap table handle, put90) remembers the txn that appended
to the heap last and its seq, and, once it committed as a checkpoint commit, its LMDB
id: a write txn whose id is the next one appends after that seq without a cursor, and
only as its first append. put89 (d310a1b, reverted) kept both in module-wide slots: two
stores written at once, from two threads or from one, overwrote them mid-txn and a
txn's later append took the guess again (IntegrityError "the heap refused"). Every case
pins the seqs a put appends at to the general path's answer: the heap's last key + 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.store import content
from cpstore.store.content import objects_of
from cpstore.store.heap_layout import next_seq as real_next_seq

_WAIT = 120.0  # seconds: only so that a broken interleaving fails instead of hanging


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
    """One put appends its object(s) and record right after the heap's last key (the
    cursor's answer), contiguously, and reads back."""
    before = _heap_keys(st)
    cid = rec.checkpoint(step, {"a": value, "b": "same"})
    added = sorted(set(_heap_keys(st)) - set(before))
    first = (before[-1] if before else 0) + 1
    assert len(added) >= 2  # the new object(s), then the record
    assert added == list(range(first, first + len(added)))
    with st.read(cid) as cp:
        assert cp.state() == {"a": value, "b": "same"}


def _verified(*stores: Any) -> None:
    for st in stores:
        report = st.verify()
        assert report.ok, report.problems


def _after_first_append(
    monkeypatch: pytest.MonkeyPatch, heap: Any, then: Callable[[], None]
) -> list[int]:
    """Content.add calls ``then`` (once) right after the first entry it appends to
    ``heap``, in the middle of that txn; returns how many appends to ``heap`` were made."""
    real_add = content.Content.add
    made: list[int] = []

    def add(self: Any, txn: Any, key: bytes, *args: Any) -> bool:
        wrote = real_add(self, txn, key, *args)
        if wrote and self.heap is heap:
            made.append(1)
            if len(made) == 1:
                then()
        return wrote

    monkeypatch.setattr(content.Content, "add", add)
    return made


@pytest.mark.parametrize("durability", ["none", "sync", "batched"])
def test_consecutive_puts_need_no_cursor_and_append_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = _cursor_calls(monkeypatch)
    opts: dict[str, Any] = {"batch_size": 1} if durability == "batched" else {}
    with cpstore.open(tmp_path / "s", durability=durability, **opts) as st:  # type: ignore[arg-type]
        rec = st.recorder("r")
        for step in range(12):
            _put_appends_after_tail(st, rec, step, f"v{step}")
        assert len(calls) == 1  # the first put's: no commit of this env before it
        _verified(st)


def test_a_write_in_between_sends_the_next_put_to_the_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write txn that is not a checkpoint commit appends above the tail, or deletes
    the tail: the next put's txn id is not the commit's + 1, so it reads the tail."""
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
        _verified(st)


def test_an_aborted_txn_in_between_leaves_the_tail_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write txn that appended and then failed (aborted: nothing of it lands, and LMDB
    gives the next txn the same id it had): the next put appends right after the last
    committed key, no gap and no seq twice, and so do the ones after it."""
    calls = _cursor_calls(monkeypatch)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("r")
        _put_appends_after_tail(st, rec, 0, "v0")
        objects = objects_of(st.backend.dbs)

        def append_then_fail(txn: Any) -> None:
            for i in (1, 2, 3):
                assert objects.add(txn, bytes([i]) * 16, b"gone")
            raise RuntimeError("fails after appending")

        with pytest.raises(RuntimeError, match="fails after"):
            st.backend.write_txn(append_then_fail)
        n = len(calls)
        for step in range(1, 4):
            _put_appends_after_tail(st, rec, step, f"v{step}")
        assert len(calls) <= n + 1
        _verified(st)


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
        _put_appends_after_tail(st, rec, 2, "v2")
        assert len(calls) == n + 1
        _verified(st)


_WRITER = """
import os, sys, cpstore
path, name, steps, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with cpstore.open(path, durability="none") as st:
    rec = st.recorder(name)
    print("ready", flush=True)
    while not os.path.exists(go):
        pass
    for step in range(steps):
        rec.checkpoint(step, {"who": name, "s": step, "p": name * 200})
"""


def test_two_processes_writing_one_store_at_once(tmp_path: Path) -> None:
    """Two processes and this one put to one store at once: each commit's next txn id
    is taken by whichever writer comes next, so most first appends read the tail; every
    put lands and reads back and the heap verifies."""
    path, go = tmp_path / "s", tmp_path / "go"
    cpstore.open(path).close()
    steps = 200
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), name, str(steps), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p", "q")
    ]
    ids: list[str] = []
    try:
        for proc in procs:  # both opened the store: they start with this process
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        with cpstore.open(path, durability="none") as st:
            rec = st.recorder("me")
            go.touch()
            for step in range(steps):
                ids.append(rec.checkpoint(step, {"who": "me", "s": step}))
    finally:
        go.touch()
        codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0]
    with cpstore.open(path, readonly=True) as st:
        _verified(st)
        for name in ("p", "q"):
            head = st.history(name)
            assert len(list(head)) == steps
        for step, cid in enumerate(ids):
            with st.read(cid) as cp:
                assert cp.state() == {"who": "me", "s": step}


def _in_fork_child(work: Callable[[], None]) -> bytes:
    """Run ``work`` in a fork() child: b"ok", or the repr of what it raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        said = b"?"
        try:
            work()
            said = b"ok"
        except BaseException as exc:  # told to the parent
            said = repr(exc).encode()[:500]
        finally:
            os.write(write_end, said)
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as told:
        return told.read()


def test_a_fork_child_writing_in_between(tmp_path: Path) -> None:
    """A fork child inherits the parent's tails. With the store open it cannot write it
    (ForkError: nothing written) and the parent's puts go on after its own tail; with
    the store closed it opens it anew and puts, and the parent's store opened again
    (another heap handle) follows the child's commits, never its old tail."""
    path = tmp_path / "s"
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("r")
        _put_appends_after_tail(st, rec, 0, "v0")
        st.flush()

        def inherited() -> None:
            rec.checkpoint(1, {"a": "child", "b": "c"})

        told = _in_fork_child(inherited)
        assert told.startswith(b"ForkError")
        for step in range(1, 3):
            _put_appends_after_tail(st, rec, step, f"v{step}")

    def child() -> None:
        with cpstore.open(path, durability="none") as again:
            crec = again.recorder("child")
            for step in range(3):
                crec.checkpoint(step, {"a": f"child {step}", "b": "c" * 500})

    assert _in_fork_child(child) == b"ok"
    with cpstore.open(path, durability="none") as st:
        rec = st.recorder("r")
        for step in range(3, 6):
            _put_appends_after_tail(st, rec, step, f"v{step}")
        _verified(st)
        assert len(list(st.history("child"))) == 3


def test_the_tail_of_another_store_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores written in turn by one thread: their txn ids move alike, but each
    store's tail is its own heap's, so each put after the first follows its own tail."""
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
        assert len(calls) == 2  # each store's first put
        _verified(x, y)


@contextmanager
def _two_stores(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    x = cpstore.open(tmp_path / "x", durability="none")
    y = cpstore.open(tmp_path / "y", durability="none")
    try:
        yield x, y
    finally:
        x.close()
        y.close()


def test_two_threads_appending_to_two_stores_within_one_txn_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread X's put to store x appends its first entry (the committed-tail guess),
    then waits while thread Y's put to store y appends in its own open txn; X's next
    append must follow X's own, not the guess again (put89: IntegrityError, the heap
    refused an appended entry)."""
    with _two_stores(tmp_path) as (x, y):
        rx, ry = x.recorder("r"), y.recorder("r")
        ry.checkpoint(0, {"a": "y0", "b": "same"})
        rx.checkpoint(0, {"a": "x0", "b": "same"})  # the last commit: x's tail known
        x_first, y_first, x_done = threading.Event(), threading.Event(), threading.Event()
        heaps = {x.backend.dbs["heap"]: "x", y.backend.dbs["heap"]: "y"}
        real_add = content.Content.add
        seen: dict[str, int] = {"x": 0, "y": 0}

        def add(self: Any, txn: Any, key: bytes, *args: Any) -> bool:
            wrote = real_add(self, txn, key, *args)
            who = heaps.get(self.heap)
            if wrote and who is not None:
                seen[who] += 1
                if who == "x" and seen["x"] == 1:
                    x_first.set()
                    assert y_first.wait(_WAIT)  # y appends while x's txn is open
                elif who == "y" and seen["y"] == 1:
                    y_first.set()
                    assert x_done.wait(_WAIT)  # x appends again while y's txn is open
            return wrote

        monkeypatch.setattr(content.Content, "add", add)
        errors: list[BaseException] = []
        got: dict[str, str] = {}

        def put(who: str, rec: Any, before: threading.Event | None) -> None:
            try:
                if before is not None:
                    assert before.wait(_WAIT)
                got[who] = rec.checkpoint(1, {"a": f"{who}1", "b": "same"})
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                if who == "x":
                    x_done.set()

        tx = threading.Thread(target=put, args=("x", rx, None))
        ty = threading.Thread(target=put, args=("y", ry, x_first))
        tx.start()
        ty.start()
        tx.join()
        ty.join()
        monkeypatch.setattr(content.Content, "add", real_add)
        assert errors == []
        assert seen["x"] >= 2 and seen["y"] >= 2  # both txns appended again after the other
        for who, st in (("x", x), ("y", y)):
            with st.read(got[who]) as cp:
                assert cp.state() == {"a": f"{who}1", "b": "same"}
            keys = _heap_keys(st)
            assert keys == list(range(1, len(keys) + 1))  # no gap, nothing refused
        _verified(x, y)


def test_one_thread_with_write_txns_of_two_stores_open_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread: store x's write txn appends (the committed-tail guess), then, with it
    still open, a write txn of store y appends and commits, then x's txn appends again:
    after its own first append, never the guess again (put89: the heap refused)."""
    with _two_stores(tmp_path) as (x, y):
        x.recorder("r").checkpoint(0, {"a": "x0", "b": "same"})  # x's tail known
        y.recorder("r").checkpoint(0, {"a": "y0", "b": "same"})
        x.recorder("r").checkpoint(1, {"a": "x1", "b": "same"})  # the commit just before
        ox, oy = objects_of(x.backend.dbs), objects_of(y.backend.dbs)
        before = _heap_keys(x)

        def in_x(txn: Any) -> None:
            assert ox.add(txn, b"\x01" * 16, b"first")
            y.backend.write_txn(lambda ty: [oy.add(ty, bytes([i]) * 16, b"y") for i in (5, 6)])
            assert ox.add(txn, b"\x02" * 16, b"second")
            assert ox.add(txn, b"\x03" * 16, b"third")

        x.backend.write_txn(in_x)
        assert _heap_keys(x) == before + [before[-1] + i for i in (1, 2, 3)]
        for st, raw in ((x, (1, 2, 3)), (y, (5, 6))):  # no digests: verify would say so
            objs = objects_of(st.backend.dbs)
            st.backend.write_txn(
                lambda txn, objs=objs, raw=raw: [objs.delete(txn, bytes([i]) * 16) for i in raw]
            )
        # and a whole put of y inside a put of x, through the put path
        made = _after_first_append(
            monkeypatch,
            x.backend.dbs["heap"],
            lambda: y.recorder("r").checkpoint(1, {"a": "y1", "b": "same"}),
        )
        cid = x.recorder("r").checkpoint(2, {"a": "x2", "b": "other"})
        assert len(made) >= 2
        with x.read(cid) as cp:
            assert cp.state() == {"a": "x2", "b": "other"}
        _verified(x, y)
