"""slices93: what is made from a checkpoint reader's zero-copy views outlives its block.

``token_value_views()`` and ``token_records()`` point into LMDB's map. The block's end
released them, but CPython cannot release a slice (``v[1:5]``), ``memoryview(v)`` or an
export (``pickle.PickleBuffer(v)``): the read txn ended under them, so a slice read later
read pages a writer had reused (wrong bytes) or, once the map moved (a resize here, or
adopting another process's growth), memory no longer mapped (the process died of
SIGSEGV/SIGBUS). Now the views handed out keep their read open until the last object
made from them is released (kept_views.py), and what that blocks says so."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import interrupted_at

import cpstore
from cpstore.errors import ReadHeldDuringResizeError, StoreError
from cpstore.store import kept_views
from cpstore.store.lmdb_backend import Durability

_ROOT = str(Path(__file__).resolve().parent.parent)


def _recorded(path: Path, *, map_size: int = 1 << 20, n: int = 40) -> tuple[Any, str]:
    st = cpstore.open(path, map_size=map_size)
    rec = st.recorder("r")
    for i in range(n):
        rec.token("rng", f"value {i}")
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()
    return st, cid


def _kept(st: Any, cid: str, how: str) -> tuple[Any, bytes]:
    """An object made from the values view inside the block, and the bytes it read there."""
    with st.read(cid) as cp:
        values = cp.token_value_views()[0]
        made: Any = values[1:]
        if how == "memoryview":
            made = memoryview(values)
        elif how == "cast":
            made = values.cast("c")
        elif how == "export":
            made = pickle.PickleBuffer(values)
        elif how == "records":
            made = cp.token_records()[32:64]
        return made, bytes(memoryview(made))


def _churn(st: Any, rounds: int = 30) -> None:
    """Writes that free and reuse pages: every checkpoint of run "r" deleted and swept."""
    for i in range(rounds):
        rec = st.recorder(f"w{i}")
        for j in range(40):
            rec.token("rng", f"other {i} {j} " + "x" * 40)
        rec.checkpoint(0, {"b": i})
        rec.close()
    st.delete_run("r")  # swept: its pages free for the writes below
    for _ in range(rounds):
        st.put_object(os.urandom(3000))


@pytest.mark.parametrize("how", ["slice", "memoryview", "cast", "export", "records"])
def test_what_is_made_from_a_view_reads_the_recorded_bytes_after_writes_reuse_pages(
    tmp_path: Path, how: str
) -> None:
    """A slice, memoryview(), cast or export read after the block gives what it read inside."""
    st, cid = _recorded(tmp_path / "s", map_size=64 << 20)
    made, inside = _kept(st, cid, how)
    _churn(st)
    assert bytes(memoryview(made)) == inside  # before: pages a later write reused
    del made
    gc.collect()
    st.close()


def test_releasing_the_last_slice_ends_the_read(tmp_path: Path) -> None:
    """With the last slice gone the read ends: a close is clean, nothing is kept."""
    st, cid = _recorded(tmp_path / "s")
    made, _ = _kept(st, cid, "slice")
    env = st._backend.env
    assert env.kept and env.reads_anywhere()  # the read the slice holds
    del made
    assert not env.reads_anywhere()  # handed over (lost_read's note), counted as ended
    with st.read(cid) as cp:  # this thread's next read ends the handed-over one
        assert cp.token_count() == 40
    assert not env.kept and not env._active and not env._lost
    st.close()  # before the slice was released: "left open"


@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
def test_a_writer_that_never_reads_again_ends_a_released_slices_read(
    tmp_path: Path, durability: Durability
) -> None:
    """A thread that only writes once its last slice is gone ends that read at its next
    write, as review93 ends lost reads there: before, in ``none`` and ``batched`` mode
    (``sync`` asks holds_read, which settled it), the kept read stayed until a read, a
    resize or a close, its snapshot pinning every page freed since."""
    st = cpstore.open(tmp_path / "s", map_size=1 << 20, durability=durability)
    rec = st.recorder("r")
    rec.token("rng", "value")
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()
    st.flush()
    made, _ = _kept(st, cid, "slice")
    env: Any = st._backend.env  # type: ignore[union-attr]
    rec = st.recorder("w")
    del made
    rec.checkpoint(0, {"b": 1})  # a write only: no read of this thread since
    st.flush()
    assert not env.kept and not env._lost and not env._active
    rec.close()
    st.close()


def test_a_close_while_a_slice_lives_leaves_the_environment_open_and_says_why(
    tmp_path: Path,
) -> None:
    """A close under a kept slice refuses to unmap it: StoreError naming the zero-copy view."""
    st, cid = _recorded(tmp_path / "s")
    made, inside = _kept(st, cid, "slice")
    with pytest.raises(StoreError, match="zero-copy view") as err:
        st.close()  # before: closed, the map unmapped under the slice
    assert "left open" in str(err.value)
    assert bytes(made) == inside
    del made
    with cpstore.open(tmp_path / "s") as again, again.read(cid) as cp:  # closes the left open
        assert cp.token_count() == 40


#: A child script's start: ``st`` open, a run recorded, a slice ``kept`` of its values view
#: made in a block that ended, and the bytes it read there (``inside``).
_KEPT = """
rec = st.recorder("r")
for i in range(40):
    rec.token("rng", f"value {i}")
cid = str(rec.checkpoint(0, {"a": 1}))
rec.close()
with st.read(cid) as cp:
    kept = cp.token_value_views()[0][1:]
    inside = bytes(kept)
"""

_RESIZE_HERE = (
    """
import sys, cpstore, os
from cpstore.errors import ReadHeldDuringResizeError
st = cpstore.open(sys.argv[1], map_size=1 << 20)
"""
    + _KEPT
    + """try:
    for _ in range(12):
        st.put_object(os.urandom(256 * 1024))  # the map must grow
    print("grown")
except ReadHeldDuringResizeError as exc:
    assert "zero-copy view" in str(exc), exc
    print("refused")
assert bytes(kept) == inside  # before: the map was moved under the slice (SIGSEGV)
del kept
for _ in range(12):
    st.put_object(os.urandom(256 * 1024))  # the read ended: the map grows
st.close()
print("ok")
"""
)


def _script(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_slice_kept_while_this_thread_must_grow_the_map(tmp_path: Path) -> None:
    """The growth is refused (ReadHeldDuringResizeError) while the slice lives, then goes."""
    done = _script(_RESIZE_HERE, str(tmp_path / "s"))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # before: -11/-7
    assert done.stdout.split() == ["refused", "ok"]


_GROW = """
import sys, os, cpstore
with cpstore.open(sys.argv[1], map_size=1 << 20) as st:
    for _ in range(12):
        st.put_object(os.urandom(256 * 1024))
"""

_ADOPT = (
    """
import sys, cpstore, subprocess
from cpstore.errors import ReadHeldDuringResizeError
path, grow = sys.argv[1], sys.argv[2]
st = cpstore.open(path, map_size=1 << 20)
"""
    + _KEPT
    + """subprocess.run([sys.executable, "-c", grow, path], check=True)  # another grows it
try:
    with st.read(cid) as cp:  # adopts the growth: the map moves
        pass
    print("adopted")
except ReadHeldDuringResizeError as exc:
    assert "zero-copy view" in str(exc), exc
    print("refused")
assert bytes(kept) == inside  # before: the old map was unmapped (SIGSEGV)
del kept
with st.read(cid) as cp:
    assert cp.token_count() == 40
st.close()
print("ok")
"""
)


def test_a_slice_kept_while_another_process_grows_the_map(tmp_path: Path) -> None:
    """Adopting another process's growth waits for the slice's release, with an error."""
    done = _script(_ADOPT, str(tmp_path / "s"), textwrap.dedent(_GROW))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # before: -11/-7
    assert done.stdout.split() == ["refused", "ok"]


def test_another_threads_growth_is_refused_while_a_slice_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer thread that must grow the map is refused once only kept views hold reads."""
    monkeypatch.setattr(kept_views, "KEPT_WAIT_SECONDS", 0.2)
    st, cid = _recorded(tmp_path / "s")
    made, inside = _kept(st, cid, "slice")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(12):
                st.put_object(os.urandom(256 * 1024))
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ReadHeldDuringResizeError), errors
    assert "still referenced" in str(errors[0])  # before: grown under the slice
    assert bytes(made) == inside
    del made
    write()  # the read handed over: the resize aborts it and grows
    assert len(errors) == 1
    st.close()


@pytest.mark.parametrize("released_on", ["owner", "main"])
def test_a_slice_kept_by_another_thread_ends_its_read_where_it_is_released(
    tmp_path: Path, released_on: str
) -> None:
    """The release runs on the thread that drops it; the read ends, the close is clean."""
    st, cid = _recorded(tmp_path / "s")
    handed: list[Any] = []

    def owner() -> None:
        made, inside = _kept(st, cid, "slice")
        assert bytes(made) == inside
        handed.append((made, inside))
        if released_on == "owner":
            handed.clear()
            del made

    thread = threading.Thread(target=owner)
    thread.start()
    thread.join(60)
    env = st._backend.env
    if handed:
        made, inside = handed.pop()
        assert env.kept and bytes(made) == inside
        del made
    assert not env.reads_anywhere()  # handed over to be ended (lost_read's note)
    assert not env.kept and env._lost
    st.close()  # counted as ended: no "left open"


def test_a_leased_view_is_not_kept(tmp_path: Path) -> None:
    """leased=True (the replay cursor's) keeps nothing: its slice is not a kept read."""
    st, cid = _recorded(tmp_path / "s")
    with st.read(cid) as cp:
        made = cp.token_value_views(leased=True)[0][1:]
        handed = cp.token_value_views()[0]
        assert handed.readonly and bytes(handed) == bytes(cp.token_value_views(leased=True)[0])
    assert not st._backend.env.kept
    del made
    st.close()


def test_reads_kept_until_each_function_returns_free_their_reader_slots(tmp_path: Path) -> None:
    """A slice local to a function keeps its read to the return; the next read frees it."""
    st, cid = _recorded(tmp_path / "s")

    def replay() -> bytes:
        with st.read(cid) as cp:
            head = cp.token_value_views()[0][:4]  # alive until the return: the read kept
        return bytes(head)

    first = replay()
    for _ in range(1100):  # the 1022 reader slots: each kept read's txn object freed
        assert replay() == first  # before the txn objects were freed: MDB_READERS_FULL
    st.close()


_FORKED = (
    """
import os, sys, cpstore
st = cpstore.open(sys.argv[1], map_size=64 << 20)
"""
    + _KEPT
    + """r, w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(go_r, 1)  # the parent has deleted the run and written
    same = bytes(kept) == inside  # the parent's read, kept by its own slice, still open
    del kept  # released in the child: the parent's read is the parent's
    os.write(w, b"1" if same else b"0")
    os._exit(0)
st.delete_run("r")
for _ in range(30):
    st.put_object(os.urandom(3000))
os.write(go_w, b"x")
print("child-same" if os.read(r, 1) == b"1" else "child-garbage")
os.waitpid(pid, 0)
assert st._backend.env.kept, "the child's release ended the parent's read"
assert bytes(kept) == inside
del kept
st.close()
print("ok")
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")
def test_a_fork_child_reads_a_kept_slice_while_the_parents_read_lasts(tmp_path: Path) -> None:
    """The child's copy of a kept slice reads the recorded bytes; its release is its own."""
    done = _script(_FORKED, str(tmp_path / "s"))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["child-same", "ok"]  # before: the pages were reused


_EXIT_FRAMES = {
    "CheckpointView.__exit__",
    "release_views",
    "ReaderViews.block_ended",
    "KeptViews.block_ended",
    "KeptViews._claim",
    "LmdbBackend.end_read",
    "EnvTxns.end_read",
}


@pytest.mark.parametrize("keep", [True, False])
def test_an_interrupt_anywhere_in_the_blocks_end_never_ends_a_kept_read(
    tmp_path: Path, keep: bool
) -> None:
    """Every landing of the block's end with a slice kept: the slice reads what it read inside
    (its read not ended under it), and once it is released the read ends (nothing left);
    with the views handed out and nothing kept, the read ends as well."""
    st: Any = cpstore.open(tmp_path / "s", map_size=256 << 20)
    env = st._backend.env

    def left_wrong(k: int, held: list[Any]) -> str | None:
        made, inside = held[0] if held else (b"", b"")
        st.delete_run(f"r{k}")  # its pages free for the writes below, unless the read holds
        for _ in range(10):
            st.put_object(os.urandom(3000))
        if bytes(made) != inside:
            return "the slice read reused pages"
        held.clear()
        del made
        gc.collect()
        with st._backend.read_txn():  # this thread's next read ends a handed-over one
            pass
        if env.kept or env._lost or env._active:
            return f"left kept={list(env.kept)} lost={list(env._lost)} active={list(env._active)}"
        return None

    cids: dict[int, str] = {}
    wrong: list[str] = []
    k = 0
    while not wrong:
        k += 1
        rec = st.recorder(f"r{k}")
        for i in range(40):
            rec.token("rng", f"value {k} {i}")
        cids[k] = str(rec.checkpoint(0, {"k": k}))
        rec.close()
        held: list[Any] = []

        def block(k: int = k, held: list[Any] = held) -> None:
            with st.read(cids[k]) as cp:
                made = cp.token_value_views()[0][1:]
                if keep:
                    held.append((made, bytes(made)))

        landed = interrupted_at(k, _EXIT_FRAMES, block, qualified=True)
        gc.collect()
        why = left_wrong(k, held)
        if why is not None:
            wrong.append(f"{landed[0] if landed else 'through'}: {why}")
        if not landed:
            break
    print("landings", k - 1)
    assert wrong == [] and k > 10, (wrong, k)
    st.close()
