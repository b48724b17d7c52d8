"""A fork() child of a process where another thread is inside the registry (audit17).

The registry's lock and its compaction reservations are module state a fork() child
inherits as they were: on 25e8a39 a child forked while another thread held the lock
(mid-open or mid-close of any store) hung forever in its first open of any store, and
one forked while another thread compacted a store was refused that store for its whole
life ("this process is compacting"). The child starts with a free lock and no
reservation (lmdb_registry._after_fork_in_child). And a child forked while another
thread had just opened a creation-lock or holder-mark descriptor, not yet listed for
fork children to close, kept that lock for its life (lmdb_open.FORK_GUARD).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import cpstore
from cpstore.store import lmdb_registry, lmdb_registry_state
from cpstore.store.lmdb_holders import HolderMark
from cpstore.store.lmdb_open import lock_folder, unlock_folder

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork()")


@contextmanager
def _held_by_another_thread(enter: Callable[[], object]) -> Iterator[None]:
    """Run ``enter()`` (a context manager) in another thread and keep it entered."""
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with enter():  # type: ignore[attr-defined]
            entered.set()
            leave.wait(60)

    worker = threading.Thread(target=hold, daemon=True)
    worker.start()
    assert entered.wait(60)
    try:
        yield
    finally:
        leave.set()
        worker.join(60)


def _in_a_child(path: Path) -> str:
    """Fork; the child opens ``path``, writes and reads a checkpoint (a 20 s alarm kills a
    hang); what happened, as a word."""
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        code = 1
        try:
            signal.alarm(20)
            with cpstore.open(path) as st:
                cid = st.recorder("child").checkpoint(0, {"v": 1})
                with st.read(cid) as cp:
                    code = 0 if cp.state() == {"v": 1} else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "hung" if os.WTERMSIG(status) == signal.SIGALRM else "killed"
    return {0: "opened", 2: "misread", 3: "refused"}.get(os.WEXITSTATUS(status), "failed")


def test_a_child_forked_while_another_thread_holds_the_registry_lock_opens_stores(
    tmp_path: Path,
) -> None:
    """Another thread is inside the registry (held here as an open or close holds it)
    when the process forks: the child opens a store (it hung on 25e8a39)."""
    with _held_by_another_thread(lambda: lmdb_registry_state._REGISTRY_LOCK):
        assert _in_a_child(tmp_path / "s") == "opened"
    with cpstore.open(tmp_path / "s", readonly=True) as st:
        assert st.runs() == ["child"]


def test_a_child_forked_while_another_thread_compacts_a_store_opens_it(tmp_path: Path) -> None:
    """Another thread of the parent has the store reserved for compact when the process
    forks: the child opens it once it needs it (refused on 25e8a39: "this process is
    compacting", for the child's whole life)."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("parent").checkpoint(0, {"v": 0})
    with _held_by_another_thread(lambda: lmdb_registry.reserved_for_compact(str(path))):
        assert _in_a_child(path) == "opened"
    with cpstore.open(path, readonly=True) as st:
        assert st.runs() == ["child", "parent"]


if sys.platform.startswith("linux"):  # a real open in another thread, not a held lock

    def test_children_forked_while_another_thread_opens_and_closes_stores_never_hang(
        tmp_path: Path,
    ) -> None:
        """One thread opens and closes a store in a loop; children forked meanwhile (each
        while that thread is inside the registry) open another store."""
        churn, stop = tmp_path / "churn", threading.Event()
        cpstore.open(churn).close()

        def loop() -> None:
            while not stop.is_set():
                cpstore.open(churn).close()

        worker = threading.Thread(target=loop, daemon=True)
        worker.start()
        try:
            for i in range(3):
                for _ in range(10_000_000):  # bounded: the worker may have died
                    if lmdb_registry_state._REGISTRY_LOCK.locked():
                        break
                assert _in_a_child(tmp_path / f"child{i}") == "opened"
        finally:
            stop.set()
            worker.join(60)


def test_a_child_refuses_a_second_environment_in_a_folder_it_opened_where_the_parent_had_one(
    tmp_path: Path,
) -> None:
    """The parent had a open at fork() and closes it; the child renames a to t with c's
    data.mdb and opens t, then renames t to u with d's data.mdb: its open of u (the folder
    its first environment opened) is refused, as in a process that never forked. On
    34c0d0f the parent's stale folder-index entry hid the child's environment and the
    child opened a second one on the same lock.mdb (audit18)."""
    a, c, d = tmp_path / "a", tmp_path / "c", tmp_path / "d"
    t, u = tmp_path / "t", tmp_path / "u"
    for path, run in ((a, "A"), (c, "C"), (d, "D")):
        with cpstore.open(path) as st:
            st.recorder(run).checkpoint(0, {"v": run})
    first = cpstore.open(a)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        code = 1
        try:
            signal.alarm(20)
            os.close(write_end)
            os.read(read_end, 1)  # the parent closed a
            os.rename(a, t)
            os.replace(c / "data.mdb", t / "data.mdb")
            with cpstore.open(t) as mine:
                os.rename(t, u)
                os.replace(d / "data.mdb", u / "data.mdb")
                try:
                    cpstore.open(u).close()
                    code = 2  # a second environment in mine's folder
                except cpstore.StoreError as exc:
                    code = 0 if "no longer at this path" in exc.what else 3
                assert mine.runs() == ["C"]
        except BaseException:
            code = 3
        os._exit(code)
    os.close(read_end)
    first.close()
    os.write(write_end, b"x")
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), "the child hung or was killed"
    assert {0: "refused", 2: "opened"}.get(os.WEXITSTATUS(status), "failed") == "refused"


def _fork_inside_open_window(
    monkeypatch: pytest.MonkeyPatch, opener: Callable[[], object], closer: Callable[[object], None]
) -> tuple[bool, int]:
    """Run ``opener()`` in another thread with ``os.open`` slowed just after it opens a
    folder, fork meanwhile; (whether the child still had that descriptor, the fd)."""
    real_open = os.open
    opened, got = threading.Event(), []

    def slow_open(path: object, flags: int, *args: object) -> int:
        fd = real_open(path, flags, *args)  # type: ignore[arg-type]
        if flags & os.O_DIRECTORY and not opened.is_set():
            got.append(fd)
            opened.set()
            threading.Event().wait(0.5)  # the window between the open and the listing
        return fd

    monkeypatch.setattr(os, "open", slow_open)
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(opener()), daemon=True)
    worker.start()
    assert opened.wait(30)
    fd = got[0]
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        os._exit(1 if os.path.exists(f"/proc/self/fd/{fd}") else 0)
    _, status = os.waitpid(pid, 0)
    worker.join(30)
    monkeypatch.setattr(os, "open", real_open)
    closer(result[0])
    return os.WEXITSTATUS(status) == 1, fd


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="/proc")
def test_a_child_forked_while_a_creation_lock_is_being_taken_never_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork between ``lock_folder``'s open and its listing for fork children waits for
    the listing, so the child closes the folder descriptor (it kept the flock before)."""
    tmp_path.joinpath("s").mkdir()
    kept, _ = _fork_inside_open_window(
        monkeypatch,
        lambda: lock_folder(str(tmp_path / "s"), exclusive=True),
        unlock_folder,  # type: ignore[arg-type]
    )
    assert not kept


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="/proc")
def test_a_child_forked_while_a_holder_mark_is_being_made_never_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a holder mark (an OFD lock lives while any copy of its fd does)."""
    tmp_path.joinpath("s").mkdir()
    kept, _ = _fork_inside_open_window(
        monkeypatch,
        lambda: HolderMark(str(tmp_path / "s"), 6),
        lambda mark: mark.close(),  # type: ignore[attr-defined]
    )
    assert not kept
