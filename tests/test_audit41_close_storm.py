"""audit41 guard: three threads closing one handle while two threads open the same path.

audit39's close claim (one close releases, the others wait for it) beside the registry's
close-off-the-lock (an open during the last close's wait shares the environment and the
close leaves it open, audit36): with 3 closers and 2 openers racing each round, no thread
hangs or fails, every handle count comes back to what is open (the registry empty, or
the long-lived handle's environment at 1 handle and usable), and every acknowledged
checkpoint reads back. Passes as merged (checked, not a fix).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cpstore.store import lmdb_registry_state
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_backend import Durability, LmdbBackend


@pytest.mark.parametrize("durability", ["sync", "batched"])
@pytest.mark.parametrize("keep_one", [False, True])
def test_closers_and_openers_racing_leave_every_handle_counted(
    tmp_path: Path, durability: Durability, keep_one: bool
) -> None:
    path = tmp_path / "s"
    keep = open_store(path, durability=durability) if keep_one else None
    acked: list[str] = []
    errors: list[BaseException] = []
    for rnd in range(6):
        shared = open_store(path, durability=durability)
        acked.append(str(shared.recorder(f"s{rnd}").checkpoint(0, {"s": rnd})))
        start = threading.Barrier(5, timeout=60)

        def close(handle=shared, start=start) -> None:  # type: ignore[no-untyped-def]
            try:
                start.wait()
                handle.close()
            except BaseException as exc:  # reported below
                errors.append(exc)

        def open_one(i: int, rnd: int = rnd, start=start) -> None:  # type: ignore[no-untyped-def]
            try:
                start.wait()
                with open_store(path, durability=durability) as mine:
                    cid = str(mine.recorder(f"o{rnd}-{i}").checkpoint(0, {"o": rnd}))
                    mine.flush()
                    acked.append(cid)
                    with mine.read(cid) as view:
                        assert view.state() == {"o": rnd}
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=close) for _ in range(3)]
        threads += [threading.Thread(target=open_one, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not any(th.is_alive() for th in threads), "a close or an open hung"
        assert not errors, errors
        if keep is None:
            assert not lmdb_registry_state._REGISTRY, rnd
        else:
            backend = keep._backend
            assert isinstance(backend, LmdbBackend)
            assert backend.env.handles == 1, rnd
            acked.append(str(keep.recorder(f"k{rnd}").checkpoint(0, {"k": rnd})))
            keep.flush()
    if keep is not None:
        keep.close()
    with open_store(path, readonly=True) as again:
        for cid in acked:
            with again.read(cid) as view:
                assert isinstance(view.state(), dict)
    assert len(acked) == 6 * (4 if keep_one else 3)
