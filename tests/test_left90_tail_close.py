"""left90: ``TailCover.close`` interrupted after its first close, then closed again.

The close took both descriptors into locals and set both attributes to None in one
statement, then closed the held one and the written one: an interrupt (a signal
handler's exception) landing on the held one's ``os.close`` return, where CPython runs
pending handlers, left the written one in a local only, and the caller's second close
(``Env._let_go``'s loop) found nothing to close: one descriptor on the data file for the
process's life. The two differ only when the cover opened the file for writing itself
beside a held descriptor: a read-only hold with a write txn's cover. No ``Env`` makes
that pair today (a writable open's hold is its write descriptor, a read-only open never
covers), so this is the cover's own contract: each step may run again.

tests/test_begin_interrupted.py's sweep lands at each frame start and C call's return of
``close`` (and ``cover``'s ``open_into``); after each, the caller's second close, then no
descriptor on the folder."""

from __future__ import annotations

from pathlib import Path

from test_begin_interrupted import fds_in, interrupted_at

from cpstore.store.lmdb_pages import TailCover


def _swept(folder: Path, writable_hold: bool) -> tuple[list[str], int]:
    data = folder / "data.mdb"
    leaked: list[str] = []
    k = 0
    while True:
        k += 1
        cover = TailCover(str(data), 4096)
        cover.hold(str(folder), writable_hold)
        cover.cover(1)  # a read-only hold: the cover opens its own write descriptor
        landed = interrupted_at(k, {"TailCover.close"}, cover.close, qualified=True)
        cover.close()  # the caller's loop: again until it returns
        if fds_in(folder):
            leaked.append(f"{landed}: {fds_in(folder)}")
            cover.close()
            break
        if not landed:
            break
    return leaked, k


def test_a_close_interrupted_after_the_held_descriptor_leaves_none(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "data.mdb").write_bytes(b"")
    leaked, k = _swept(folder, writable_hold=False)
    assert leaked == []  # before: TailCover.close@..., the write descriptor left open
    assert k > 3


def test_a_writable_holds_close_interrupted_leaves_none(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "data.mdb").write_bytes(b"")
    leaked, k = _swept(folder, writable_hold=True)
    assert leaked == []
    assert k > 3
