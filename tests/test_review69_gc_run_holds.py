"""review69: ``gc(delete_run=run)`` of a run with no refs counts every retained head a
hold of the run keeps, in its NotFoundError, as ``cpstore retained --run`` lists them.

A checkpoint can be held for several runs: a repair whose damaged ref value names
another run's checkpoint holds it for the repaired ref's run. The count read only the
oldest hold's run. Both engines; the damage is written by another process (LMDB) or
connection (PostgreSQL).
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import NotFoundError
from cpstore.store.refs import SET, pack_ref


def test_gc_of_a_run_left_with_holds_counts_every_head_a_hold_of_it_keeps(url: str) -> None:
    """A repair of r/main whose damaged value names s's checkpoint holds it for r (a
    second hold beside s's own reset's). gc(delete_run="r") of the run left with no refs
    counted only heads whose oldest hold is r's: 1, where `cpstore retained --run r`
    lists 2."""
    with cpstore.open(url) as st:
        [st.recorder("r").checkpoint(i, {"i": i}) for i in range(2)]
        s = [st.recorder("s").checkpoint(i, {"s": i}) for i in range(2)]
        st.reset_ref("s", "main", s[0], expected_old=s[1], operator="o", reason="s keeps")
        bad = bytearray(pack_ref(b"r\0main", bytes.fromhex(s[1]), SET))
        bad[-1] ^= 1
        _raw_ref(url, b"r\0main", bytes(bad))
        rec = st.repair_ref("r", "main", None, operator="o", reason="damaged")
        assert rec.body["retained"] == s[1] and len(rec.body["kept"]) == 1
        held = [c for c, h in st.retained().items() if any(x["run"] == "r" for x in h["holds"])]
        assert len(held) == 2
        with pytest.raises(NotFoundError) as err:
            st.gc(delete_run="r")
        assert "2 retained head(s) of it" in str(err.value)
