"""intr88: ``TailCover.cover``'s own open of the data file, interrupted (a signal
handler's exception: Ctrl-C, a watchdog's alarm).

A write txn's tail cover opens the data file for writing when the open held none (its
held descriptor could not be opened). It was a bare ``fd = self.fd = os.open(...)``: an
interrupt landing on the open's return, where CPython runs pending handlers, lost the
descriptor before either name held it, so the cover's close never closed it: one
descriptor on the data file for the process's life per such landing. It is now kept as
it is opened (``map`` opens, the loop's step stores: no landing between), as
``TailCover.hold`` keeps its own (review87).

tests/test_begin_interrupted.py's sweep lands at each frame start and C call's return of
``cover``; after each, the cover's close leaves no descriptor on the folder."""

from __future__ import annotations

from pathlib import Path

from test_begin_interrupted import fds_in, interrupted_at

from cpstore.store.lmdb_pages import TailCover


def test_a_covers_own_open_interrupted_leaves_no_descriptor(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    data = folder / "data.mdb"
    data.write_bytes(b"")
    leaked: list[str] = []
    k = 0
    while True:
        k += 1
        cover = TailCover(str(data), 4096)  # nothing held: the cover opens the file itself
        landed = interrupted_at(k, {"cover", "open_into"}, lambda: cover.cover(1))  # noqa: B023
        cover.close()
        if fds_in(folder):  # before: cover@170, on os.open's return
            leaked.append(f"{landed}: {fds_in(folder)}")
            break
        if not landed:
            break
    assert leaked == []
    assert k > 3
    assert data.stat().st_size >= 2 * 4096  # the sweep's last, whole run covered the pages
