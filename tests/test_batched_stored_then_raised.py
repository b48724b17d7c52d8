"""A batched ``checkpoint()`` whose own batch committed, and which then raises because
another thread's failed commit dropped checkpoints this thread queued earlier, says its
own checkpoint IS stored, and its recorder follows it (found auditing the chaos harness:
the recorder stayed on the old head, so its next checkpoint conflicted with its own
stored one and was dropped with its whole batch)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError


def _move_elsewhere(store: str) -> None:
    """Another process commits a checkpoint on run ``c``: a queued one extending the old
    head now fails its compare-and-set."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        "    s.recorder('c').checkpoint(9, {'y': 9})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def check_stored_then_raised(store: str) -> None:
    with cpstore.open(store, durability="batched", batch_size=2) as st:
        rec_a = st.recorder("a")
        rec_a.checkpoint(0, {"a": 0})  # queued by this thread
        stale = st.recorder("c")  # head None: made before another process moves "c"
        _move_elsewhere(store)
        dropped: list[BaseException] = []

        def fill_with_stale() -> None:  # fills the batch [a0, stale c]: its commit fails
            try:
                stale.checkpoint(1, {"stale": True})
            except ConflictError as exc:
                dropped.append(exc)

        t = threading.Thread(target=fill_with_stale)
        t.start()
        t.join(60)
        assert len(dropped) == 1, "the stale batch was committed"
        rec_b = st.recorder("b")
        first = rec_b.checkpoint(0, {"b": 0})  # queued
        with pytest.raises(ConflictError) as caught:
            rec_b.checkpoint(1, {"b": 1})  # fills the batch [b0, b1]: committed, then told
        notes = "\n".join(getattr(caught.value, "__notes__", []))
        assert "not stored" in str(caught.value)  # about a0, which another thread dropped
        second = rec_b.head
        assert second is not None and second != first
        assert f"{second} IS stored" in notes, notes
        assert st.ref("b") == second  # stored indeed
        assert st.ref("a") is None  # a0 was dropped
        third = rec_b.checkpoint(2, {"b": 2})  # the recorder follows its stored head
        st.flush()
        assert st.ref("b") == third
        assert st.manifest(third).parent == second


def test_a_batched_checkpoint_stored_then_told_of_an_earlier_drop_is_followed(
    tmp_path: Path,
) -> None:
    """LMDB: the call's error names its stored checkpoint; the recorder continues from it."""
    check_stored_then_raised(str(tmp_path / "s"))


def test_a_batched_checkpoint_stored_then_told_of_an_earlier_drop_is_followed_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: the call's error names its stored checkpoint; the recorder continues."""
    check_stored_then_raised(pg_url)
