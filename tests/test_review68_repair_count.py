"""review68: a repair whose carried ref count falls out of range takes the table's.

``repair_ref`` carries the digest's recorded count (a vanished ref stays reported);
dropping a damaged ref when that count was itself damaged to 0 carried -1, which
``struct`` cannot pack: the repair ended in ``struct.error`` (outside cpstore's error
root), nothing written, and that repair was impossible. The count is the table's then,
as for a damaged digest, and the repair keeps what the damaged ref held.
"""

from __future__ import annotations

import struct
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.store.refs import REFS_DIGEST_KEY


def test_dropping_a_damaged_ref_when_the_count_reads_zero(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        other = st.recorder("s").checkpoint(0, {"s": 0})
        refs, meta = st.backend.db("refs"), st.backend.db("meta")

        def damage(txn: Any) -> None:  # behind cpstore's back: a check byte, the count
            value = bytes(txn.get(b"r\0main", db=refs))
            txn.put(b"r\0main", value[:-1] + bytes([value[-1] ^ 1]), db=refs)
            good = bytes(txn.get(REFS_DIGEST_KEY, db=meta))
            txn.put(REFS_DIGEST_KEY, good[:16] + struct.pack("<Q", 0), db=meta)

        st.backend.write_txn(damage)
        record = st.repair_ref("r", "main", None, operator="o", reason="check and count")
        assert record.body["retained"] == ids[2]
        assert record.body["refs"] == {"recorded": 0, "found": 2}
        assert st.ref("r") is None and st.ref("s") == other
        assert st.verify().ok
        st.prune(keep_last=1)
        for cid in [*ids, other]:
            st.manifest(cid)
