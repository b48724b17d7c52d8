"""Cold opens racing compaction, growth and creation in other processes (audit10).

An open stats ``data.mdb`` once under the folder's creation lock and its size
check starts from that size (``lmdb_pages.check_data_size(seen=)``); the only
thing that replaces the file is compaction, under the exclusive creation lock.
These runs open read-only over and over while other processes compact, write
(the map and the file grow) and create, with and without ``flock`` (a file
system without it: the open goes on unlocked): every open must read what was
acknowledged, no process may die of a signal (a short map is a SIGBUS), and no
acknowledged checkpoint may be lost to a swap.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import cpstore
import cpstore.errors
from cpstore.store import maintenance
from cpstore.store.maintenance import compact_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork-free spawn")

ROUNDS = 25


def _no_flock() -> None:
    """This process's file system "has no flock": every flock fails (lock_folder goes on)."""

    def refuse(*_args: Any) -> None:
        raise OSError(37, "No locks available")

    fcntl.flock = refuse


def _reader(path: str, first: str, no_flock: bool, out: Any) -> None:
    if no_flock:
        _no_flock()
    seen = 0
    for _ in range(ROUNDS * 2):
        with cpstore.open(path, readonly=True) as st:
            with st.read(first) as cp:
                assert cp.state() == {"i": 0, "pad": "x" * 3000}
            seen = max(seen, len(st.history("w")))
    out.put(("reader", seen))


def _writer(path: str, no_flock: bool, out: Any) -> None:
    if no_flock:
        _no_flock()
    acked = []
    for i in range(1, ROUNDS + 1):
        with cpstore.open(path, map_size=1 << 20) as st:
            # ~200 KB of fresh state each: the map grows and the file with it.
            acked.append(st.recorder("w").checkpoint(i, {"i": i, "pad": os.urandom(100_000).hex()}))
    out.put(("writer", acked))


def _compactor(path: str, no_flock: bool, out: Any) -> None:
    if no_flock:
        _no_flock()
    done = refused = 0
    for _ in range(ROUNDS):
        try:
            compact_store(path)
            done += 1
        except cpstore.errors.StoreError as exc:
            assert "open" in str(exc) or "changed" in str(exc), exc
            refused += 1
    out.put(("compactor", (done, refused)))


def _creator(base: str, no_flock: bool, out: Any) -> None:
    if no_flock:
        _no_flock()
    for i in range(ROUNDS):
        with cpstore.open(os.path.join(base, f"new{i}")) as st:
            st.recorder("c").checkpoint(0, {"i": i})
        with cpstore.open(os.path.join(base, f"new{i}"), readonly=True) as st:
            assert st.runs() == ["c"]
    out.put(("creator", ROUNDS))


@pytest.mark.parametrize("no_flock", [False, True], ids=["flock", "no-flock"])
def test_read_only_opens_racing_compaction_growth_and_creation_read_what_was_acknowledged(
    tmp_path: Path, no_flock: bool
) -> None:
    """Readers opening cold while other processes compact, grow and create: every
    process ends cleanly (no signal), each read is the acknowledged state, and every
    checkpoint the writer acknowledged is in the store afterwards."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        first = st.recorder("w").checkpoint(0, {"i": 0, "pad": "x" * 3000})
        st.recorder("gone").checkpoint(0, {"pad": os.urandom(200_000).hex()})
        st.delete_run("gone")  # free pages: a compaction shrinks the file
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_reader, args=(str(path), first, no_flock, out)),
        ctx.Process(target=_reader, args=(str(path), first, no_flock, out)),
        ctx.Process(target=_writer, args=(str(path), no_flock, out)),
        ctx.Process(target=_compactor, args=(str(path), no_flock, out)),
        ctx.Process(target=_creator, args=(str(tmp_path), no_flock, out)),
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)  # small results: nothing waits on the queue
    assert [p.exitcode for p in procs] == [0] * len(procs)
    got = [out.get(timeout=10) for _ in procs]
    assert sorted(kind for kind, _ in got) == ["compactor", "creator", "reader", "reader", "writer"]
    results = dict(got)
    assert sum(results["compactor"]) == ROUNDS
    acked = results["writer"]
    assert len(acked) == ROUNDS
    with cpstore.open(path, readonly=True) as st:
        assert st.verify().ok
        for i, cid in enumerate(acked, start=1):
            with st.read(cid) as cp:
                state = cp.state()
                assert isinstance(state, dict) and state["i"] == i


def test_a_commit_between_compacts_check_and_its_copy_is_a_retry_not_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint committed after compact verified the store, before compact took it:
    compact refuses with StoreError (the store changed, nothing swapped), never an
    IntegrityError calling the copy damaged; run again, it compacts and keeps both."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        first = st.recorder("r").checkpoint(0, {"a": 1})
    real = maintenance._verified
    later: list[str] = []

    def verified_then_written(where: str, audit_key: bytes | None) -> Any:
        report = real(where, audit_key)
        if not later:  # the store's own check: another writer commits right after it
            with cpstore.open(where) as other:
                later.append(other.recorder("r").checkpoint(1, {"a": 2}))
        return report

    monkeypatch.setattr(maintenance, "_verified", verified_then_written)
    with pytest.raises(cpstore.errors.StoreError, match="changed"):
        compact_store(path)
    compact_store(path)
    with cpstore.open(path, readonly=True) as st:
        for cid, want in ((first, {"a": 1}), (later[0], {"a": 2})):
            with st.read(cid) as cp:
                assert cp.state() == want
