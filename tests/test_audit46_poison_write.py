"""``durability="sync"``: one thread's checkpoint whose apply raises an exception that is
not a CpstoreError (a bug, a MemoryError) in a group with other threads' checkpoints.

Each caller must get the result it would have had committing alone: the other threads'
checkpoints are stored and their calls return; only the failing checkpoint's caller gets
the exception. (Since syncexc such an exception counts as a signal handler's: the group's
leader raised it, whoever it was, and the others went back to the queue, where the next
leader raised it again.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_sync_handler_exception import (
    _after_the_commit,
    _group_of,
    _handler_stress,
    _main_completes_a_group,
    _on_main,
    _Workers,
)

import cpstore
from cpstore.store import group_commit
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.model import CheckpointWrite


class PoisonError(RuntimeError):
    """What applying the poisoned checkpoint raises (a bug in its data's path)."""


def _poison_the_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every apply of a group holding a checkpoint of run "poison" raises PoisonError."""
    real = LmdbBackend._apply

    def apply(self: Any, txn: Any, ops: Sequence[CheckpointWrite]) -> None:
        if any(op.run_id == "poison" for op in ops):
            self.group._last_size, self.group._last_seconds = 1, 0.0  # no gather after it
            raise PoisonError("poisoned")
        real(self, txn, ops)

    monkeypatch.setattr(LmdbBackend, "_apply", apply)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_poisoned_write_fails_alone(
    tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _poison_the_apply(monkeypatch)
    st = cpstore.open(str(tmp_path / "s"), durability="sync")
    try:
        _group_of(st, size, monkeypatch)
        names = ["poison"] + [f"w{i}" for i in range(size - 1)]
        workers = _Workers(st, names)
        workers.start()
        workers.join()
        got = workers.got
        assert isinstance(got["poison"], PoisonError), got
        assert st.ref("poison") is None
        for name in names[1:]:
            assert got[name] == st.ref(name) and st.ref(name) is not None, got
    finally:
        st.close()


def test_a_poisoned_write_in_a_group_the_main_thread_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread (where a signal handler's exception lands, so it cannot tell one
    from a bug) completes and commits a group of three holding the poisoned checkpoint:
    it raises the exception, its own checkpoint not stored; the other innocent thread's
    checkpoint is stored by the next group, only the poisoned one's caller fails."""
    _poison_the_apply(monkeypatch)
    st = cpstore.open(str(tmp_path / "s"), durability="sync")
    try:
        _, workers = _main_completes_a_group(st, ["poison", "w"], monkeypatch)
        with pytest.raises(PoisonError):
            st.recorder("main").checkpoint(0, {"main": 0})
        workers.join()
        got = workers.got
        assert st.ref("main") is None
        assert isinstance(got["poison"], PoisonError), got
        assert st.ref("poison") is None
        assert got["w"] == st.ref("w") and st.ref("w") is not None, got
    finally:
        st.close()


@pytest.mark.parametrize("seed", range(4))
def test_handler_stress_as_if_every_writer_were_the_main_thread(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler stress of tests/test_sync_handler_exception.py runs its writers outside
    the main thread, where its TimeoutError is now the writes' own failure; here every
    writer counts as the main thread, so the handler's path is stressed as before."""
    monkeypatch.setattr(group_commit, "_in_main", lambda: True)
    assert _handler_stress(seed, 6, 25) == []


def test_a_bugs_exception_after_a_groups_commit_outside_the_main_thread_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker commits a group of three and an exception that is not cpstore's (a bug, a
    MemoryError) is raised right after LMDB's commit: never swallowed. The committing
    thread raises it, told its checkpoint IS stored (its recorder follows); the others
    return their ids."""

    def boom() -> None:
        raise PoisonError("after the commit")

    _after_the_commit(monkeypatch, lambda: not _on_main(), boom)
    st = cpstore.open(str(tmp_path / "s"), durability="sync")
    try:
        gc = _group_of(st, 3, monkeypatch)
        first, second, third = _Workers(st, ["a"]), _Workers(st, ["b"], 1), _Workers(st, ["c"], 2)
        for w in (first, second, third):
            w.start()
        for w in (first, second, third):
            w.join()
        got = {**first.got, **second.got, **third.got}
        assert gc.groups == 1
        raised = [n for n, g in got.items() if isinstance(g, PoisonError)]
        assert len(raised) == 1, got
        for name, g in got.items():
            assert st.ref(name) is not None
            if name not in raised:
                assert g == st.ref(name), got
        notes = getattr(got[raised[0]], "__notes__", [])
        assert any("IS stored" in n for n in notes), notes
    finally:
        st.close()
