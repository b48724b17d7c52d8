"""review66: repair_ref clears a refs digest whose count is what was damaged.

ae936ae let ``repair_ref`` repair a damaged ``meta/refs_digest`` when every ref passes
its check (a flipped digest stopped retention with no way back). The repair re-derived
the XOR but carried the stored ref count forward (as it must for a damaged ref: a ref
that vanished before it stays reported). A digest whose count bytes were the damaged
part kept its wrong count: ``repair_ref`` was accepted and audited, yet verify still
failed and retention stayed stopped, every later repair the same. Damage done by
another process / connection under the open store, on both engines.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.refs import REFS_DIGEST_KEY


def test_a_refs_digest_with_a_damaged_count_is_repaired(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.recorder("s").checkpoint(0, {"s": 1})
        good = _digest(st)
        bad = good[:16] + bytes([good[16] ^ 4]) + good[17:]  # the count, not the XOR
        _raw_ref(url, REFS_DIGEST_KEY, bad, "meta")
        with pytest.raises(IntegrityError):
            st.prune(keep_last=1)
        assert not st.verify().ok
        st.repair_ref("r", "main", ids[2], operator="o", reason="digest count damaged")
        assert _digest(st) == good
        assert st.verify().ok
        assert st.prune(keep_last=1) == 2
