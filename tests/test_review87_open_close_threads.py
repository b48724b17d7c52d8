"""review87: threads of one process opening and closing one store while others write
and compact it (LMDB only: the registry, its handle count and close-left-open bookkeeping
are LMDB's; PostgreSQL opens a connection per handle).

Each handle here is often the last: the environment is closed and opened again under
racing opens (release_env notes it left open from its last handle's drop until its close,
so a racing open's _close_left_open may close it first), ``is_open_here`` and an
in-process ``compact_store`` (refused while open here, else it runs and opens are
refused meanwhile). Every checkpoint acknowledged (its handle closed without error) is
read back afterwards, ``verify`` passes, nothing stays open and no descriptor is left."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

import pytest
from test_begin_interrupted import fds_in

import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry, lmdb_registry_state
from cpstore.store.maintenance import compact_store

ROUNDS = 40


def _compacting(exc: StoreError) -> bool:
    """A refusal while compact runs here: its own opens refuse others ("compacting"), or
    its verify holds the store open read-only ("another mode")."""
    return "compacting" in str(exc) or "another mode" in str(exc)


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_threads_opening_closing_writing_and_compacting_one_store_keep_every_ack(
    tmp_path: Path, durability: Literal["sync", "none"]
) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, durability=durability) as st:
        first = st.recorder("w0").checkpoint(0, {"i": 0})
    acked: dict[str, tuple[str, int]] = {}
    errors: list[BaseException] = []
    compacted = [0, 0]
    lock = threading.Lock()
    stop = threading.Event()

    def writer(name: str) -> None:
        try:
            i = 0
            while i < ROUNDS:
                try:
                    st = cpstore.open(path, durability=durability)
                except StoreError as exc:
                    if _compacting(exc):
                        continue
                    raise
                try:
                    cid = st.recorder(name).checkpoint(i, {"i": i, "by": name})
                finally:
                    st.close()
                with lock:
                    acked[cid] = (name, i)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    def opener() -> None:
        try:
            for _ in range(ROUNDS * 2):
                try:
                    with cpstore.open(path, durability=durability) as st, st.read(first) as cp:
                        assert cp.state() == {"i": 0}
                except StoreError as exc:
                    if not _compacting(exc):
                        raise
                lmdb_registry.is_open_here(str(path))
        except BaseException as exc:
            errors.append(exc)

    def compactor() -> None:
        try:
            while not stop.is_set():
                try:
                    compact_store(path)
                    compacted[0] += 1
                except StoreError as exc:
                    assert "open" in str(exc) or "changed" in str(exc), exc
                    compacted[1] += 1
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(f"w{k}",)) for k in (1, 2)]
    workers += [threading.Thread(target=opener) for _ in range(2)]
    squeezer = threading.Thread(target=compactor)
    for t in [*workers, squeezer]:
        t.start()
    for t in workers:
        t.join(timeout=600)
    stop.set()
    squeezer.join(timeout=600)
    assert not any(t.is_alive() for t in [*workers, squeezer])
    assert errors == []
    assert sum(compacted) > 0
    assert len(acked) == 2 * ROUNDS
    assert not lmdb_registry.is_open_here(str(path))
    assert fds_in(path) == []
    assert not lmdb_registry_state._LEFT_OPEN
    with cpstore.open(path, durability=durability) as st:
        assert st.verify().ok
        for cid, (name, i) in acked.items():
            with st.read(cid) as cp:
                assert cp.state() == {"i": i, "by": name}
