"""review69: ``verify()`` reports a retained hold that names no audit record retaining it.

A hold is the digest of the audit record that keeps its checkpoint (a ``ref_reset``
away from it, a ``ref_repair`` retaining or keeping it). A hold written behind
cpstore's back (a digest no record has, or a row restored under another checkpoint's
key, naming a reset of a different checkpoint) keeps its lineage from every sweep
until released, and nothing said so: ``verify()`` stayed clean. Now each such hold is
reported ("retained hold names no audit record that retained it"), and still kept
(a root until released). Both engines; the rows are written by another process (LMDB)
or connection (PostgreSQL).
"""

from __future__ import annotations

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_review68_repair_model import _stored

import cpstore
from cpstore.native.canonical import encode_value

WHAT = "retained hold names no audit record that retained it"


def _found(st: cpstore.Store) -> set[tuple[str, str, object]]:
    return {(p.what, p.where, p.got) for p in st.verify().problems}


def test_a_forged_or_misplaced_hold_is_reported_and_still_kept(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(4)]
        st.fork("r", "exp", ids[1])
        real = st.reset_ref("r", "main", ids[1], expected_old=ids[3], operator="o", reason="x")
        side = st.reset_ref("r", "exp", None, expected_old=ids[1], operator="o", reason="y")
        assert st.verify().ok  # every hold names the reset that made it
        forged = "ab" * 16
        hold = {"run": "r", "branch": "main"}
        # ids[3]: its true hold and a forged one; ids[2]: side's hold (side reset away
        # from ids[1], not ids[2]: a row restored under another checkpoint's key).
        two = encode_value([2, [{**hold, "audit": real.digest}, {**hold, "audit": forged}]])
        _raw_ref(url, b"retained/" + bytes.fromhex(ids[3]), two, "meta")
        misplaced = encode_value({**hold, "audit": side.digest})
        key = b"retained/" + bytes.fromhex(ids[2])  # a new row: _raw_ref only updates on PG
        st.backend.write_txn(lambda txn: txn.put(key, misplaced, db=st.backend.db("meta")))
        found = _found(st)
        assert (WHAT, f"meta/retained/{ids[3]}", forged) in found
        assert (WHAT, f"meta/retained/{ids[2]}", side.digest) in found
        assert (WHAT, f"meta/retained/{ids[3]}", real.digest) not in found
        assert not any(where == f"meta/retained/{ids[1]}" for _, where, _ in found)
        # Reported, not swept: a root until its holder is released.
        st.prune(keep_last=1)
        assert _stored(st, ids[3]) and _stored(st, ids[2])
        st.release_retained(ids[3], operator="o", reason="forged", holder=forged)
        st.release_retained(ids[2], operator="o", reason="misplaced")
        assert st.verify().ok
