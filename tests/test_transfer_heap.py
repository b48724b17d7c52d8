"""Store layouts 5 and 6 across engines: a half-upgraded LMDB store (legacy tables and
heap) through PostgreSQL and back (audit6); a layout-5 store's records (``c`` entries)
through PostgreSQL into a layout-6 store (compact ``r`` entries)."""

from __future__ import annotations

from pathlib import Path

from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from stored import record_entry, to_layout_4, to_layout_5

import cpstore
from cpstore.cli import main
from cpstore.store.content import KIND_COMPACT
from cpstore.store.facade import Store
from cpstore.store.transfer import transfer


def _record(st: Store, run: str, steps: int, start: int = 0) -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"a": f"{run} {i} " * 40, "b": i}) for i in range(start, steps)]


class TestMixedStores:
    def test_a_half_upgraded_store_round_trips_through_postgresql(
        self, tmp_path: Path, pg_url: str
    ) -> None:
        """Legacy-table and heap checkpoints (one object in both writes: put again after the
        upgrade) push to PostgreSQL and pull into a new layout-5 store: every state equal,
        verify clean, each object counted once everywhere."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            old = _record(st, "r", 3)
        to_layout_4(path)
        with cpstore.open(path) as st:
            new = _record(st, "r", 6, start=3)
            with st.read(old[0]) as cp:  # an object of the legacy table, put again
                part = bytes(cp.manifest.raw["state"]["parts"]["a"])
            st.put_object(bytes(st.get_object(part)))
            with st.backend.read_txn() as txn:
                assert txn.get(part, db=st.backend.db("oloc")) is None  # not duplicated
            counts = st.verify().counts
            with cpstore.open(pg_url) as pg:
                transfer(st.backend, pg.backend)
                assert pg.verify().ok and pg.verify().counts["objects"] == counts["objects"]
                with cpstore.open(tmp_path / "back") as back:
                    transfer(pg.backend, back.backend)
                    report = back.verify()
                    assert report.ok, report.problems
                    assert report.counts == counts
                    for cid in old + new:
                        with st.read(cid) as a, pg.read(cid) as b, back.read(cid) as c:
                            assert a.state() == b.state() == c.state()

    def test_push_and_pull_between_a_layout_5_store_and_postgresql(
        self, tmp_path: Path, pg_url: str
    ) -> None:
        """LMDB at 5 (c entries) -> PostgreSQL -> a new LMDB store (r entries): every
        checkpoint reads with its state, verify clean on each side."""
        five, back = tmp_path / "five", tmp_path / "back"
        with cpstore.open(five) as st:
            ids = [st.recorder("old").checkpoint(i, {"a": i}) for i in range(3)]
        to_layout_5(five)
        assert main(["push", "--store", str(five), pg_url]) == 0
        with cpstore.open(five, readonly=True) as st:
            assert st.backend.layout == 5
        assert main(["pull", "--store", str(back), pg_url]) == 0
        for where in (pg_url, str(back)):
            with cpstore.open(where, readonly=True) as st:
                assert st.verify().ok, st.verify().problems
                for i, cid in enumerate(ids):
                    with st.read(cid) as cp:
                        assert cp.state() == {"a": i}
        with cpstore.open(back, readonly=True) as st:
            assert {record_entry(st, c)[1][0] for c in ids} == {KIND_COMPACT}
