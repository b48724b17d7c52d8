"""Batched mode with two writing threads: a flush acknowledges only what is committed.

Found while adding a second batched writer thread to the chaos test
(tests/chaos_roles.py, ``batched_writer``): one handle's queue holds every
thread's checkpoints and a flush takes all of it, so thread B's ``flush()``
found the queue empty (thread A's flush had taken B's checkpoints) and returned
at once, before A's commit was durable, and also when A's commit failed and
dropped B's checkpoints: B acknowledged checkpoints the store never held. Now
B's flush waits for the commit holding its checkpoints and raises when it
dropped them (cpstore/store/batch_owners.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, CpstoreError
from cpstore.store.lmdb_backend import LmdbBackend


def _move_elsewhere(store: str) -> None:
    """Another process commits a checkpoint on run ``a``: a queued one extending the old head
    now fails its compare-and-set."""
    code = (
        f"import cpstore\nwith cpstore.open({store!r}) as s:\n"
        "    s.recorder('a').checkpoint(9, {'y': 9})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _in_thread(fn: object) -> object:
    """Run ``fn`` in its own thread; its result or the CpstoreError it raised."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except CpstoreError as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive()
    return out[0]


def check_a_dropped_batch_is_reported_to_every_thread_in_it(store: str) -> None:
    """B queues, A's flush (holding B's checkpoint) fails: B's flush raises, never returns ok."""
    with cpstore.open(store, durability="batched", batch_size=64) as st:
        st.recorder("a").checkpoint(0, {"x": 0})
        st.flush()
        ra, rb = st.recorder("a"), st.recorder("b")
        queued_b = _in_thread(lambda: rb.checkpoint(1, {"b": 1}))
        ra.checkpoint(2, {"x": 2})
        _move_elsewhere(store)
        with pytest.raises(ConflictError):
            st.flush()
        got = _in_thread(st.flush)
        assert st.ref("b") != queued_b  # dropped with A's batch
        assert isinstance(got, ConflictError), f"B's flush acknowledged a dropped checkpoint: {got}"
        assert "another thread's batch commit" in got.what
        assert _in_thread(st.flush) is None  # told once; nothing of B's is owed now


class TestBatchedTwoThreads:
    def test_a_flush_raises_when_another_threads_failed_commit_dropped_its_checkpoints(
        self, tmp_path: Path
    ) -> None:
        """LMDB: B's flush after A's failed flush dropped B's queued checkpoint raises."""
        check_a_dropped_batch_is_reported_to_every_thread_in_it(str(tmp_path / "s"))

    def test_the_same_on_postgres(self, pg_url: str) -> None:  # noqa: F811 - the fixture
        """PostgreSQL: B's flush after A's failed flush dropped B's queued checkpoint raises."""
        check_a_dropped_batch_is_reported_to_every_thread_in_it(pg_url)

    def test_a_flush_waits_for_the_commit_another_thread_took_its_checkpoints_into(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """B's flush does not return while A's commit holding B's checkpoint is under way."""
        with cpstore.open(tmp_path / "s", durability="batched", batch_size=64) as st:
            rb = st.recorder("b")
            cid = _in_thread(lambda: rb.checkpoint(1, {"b": 1}))
            inside, go = threading.Event(), threading.Event()
            real = LmdbBackend._apply

            def slow(self: LmdbBackend, txn: object, op: object) -> None:
                inside.set()
                assert go.wait(timeout=120)
                real(self, txn, op)  # type: ignore[arg-type]

            monkeypatch.setattr(LmdbBackend, "_apply", slow)
            a = threading.Thread(target=st.flush)
            a.start()
            assert inside.wait(timeout=120)  # A took the batch, B's checkpoint in it
            seen: list[str | None] = []

            def flush_then_read() -> None:
                st.flush()
                seen.append(st.ref("b"))

            b = threading.Thread(target=flush_then_read)
            b.start()
            b.join(timeout=0.5)
            returned_early = not b.is_alive()
            go.set()
            a.join(timeout=120)
            b.join(timeout=120)
            assert not returned_early, "B's flush returned before the commit holding its write"
            assert seen == [cid]
