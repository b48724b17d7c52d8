"""review68: a ref count out of range, carried by a repair or moved by a ref move.

``repair_ref`` carries the digest's recorded count (a vanished ref stays reported);
dropping a damaged ref when that count was itself damaged to 0 carried -1, which
``struct`` cannot pack: the repair ended in ``struct.error`` (outside cpstore's error
root), nothing written, and that repair was impossible. The count is the table's then,
as for a damaged digest, and the repair keeps what the damaged ref held. A ref deleted
(``reset_ref`` to None) at a recorded count of 0 ended in ``struct.error`` too: a move
now keeps the count modulo its 8 bytes (the digest stays failing, as after any move on a
damaged digest) and the repair clears it.
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


def test_a_ref_deleted_while_the_count_reads_zero(url: str) -> None:
    """A ref move while the digest is damaged goes on and leaves the digest failing (a
    reset mends nothing); deleting a ref at a recorded count of 0 ended in struct.error
    instead. The count moves modulo its 8 bytes: still reported, then repaired."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        meta = st.backend.db("meta")

        def damage(txn: Any) -> None:  # behind cpstore's back: the count 1 -> 0
            good = bytes(txn.get(REFS_DIGEST_KEY, db=meta))
            txn.put(REFS_DIGEST_KEY, good[:16] + struct.pack("<Q", 0), db=meta)

        st.backend.write_txn(damage)
        st.reset_ref("r", "main", None, expected_old=ids[2], operator="o", reason="drop")
        assert st.ref("r") is None and ids[2] in st.retained()
        assert not st.verify().ok  # the damaged count is still reported
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        st.repair_ref("r", "main", ids[2], operator="o", reason="the count")
        assert st.verify().ok
        st.prune(keep_last=1)
        for cid in ids:
            st.manifest(cid)
