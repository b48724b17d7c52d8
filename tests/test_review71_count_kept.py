"""review71: what refs70's count cannot see, pinned with the net that catches it.

The create check compares counts only. A ref row deleted and another added behind
cpstore's back (an operator's restore of the wrong row, say) keep the count: a new
recorder on the run whose ``main`` vanished then starts a new root, as before refs70.
This is inherent to a count (docs/store.md, "No ref is created from nothing"): what
must hold is that ``verify()`` names ``meta/refs_digest`` (the XOR differs), retention
stays stopped, and the vanished head's history is still stored, so ``repair_ref`` can
put the true head back. The damage is done by another process (LMDB) or connection
(PostgreSQL), on both engines.
"""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.pg_open import parse_url
from cpstore.store.refs import SET, pack_ref


def _add_ref(url: str, key: bytes, value: bytes) -> None:
    if url.startswith("postgresql"):
        schema = parse_url(url).schema
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
            conn.execute(f'INSERT INTO "{schema}"."refs" (k, v) VALUES (%s, %s)', (key, value))
        return
    _raw_ref(url, key, value)


def test_a_deletion_and_an_addition_keep_the_count(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        s0 = st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, b"r\0main", None)
    _add_ref(url, b"s\0extra", pack_ref(b"s\0extra", bytes.fromhex(s0), SET))
    with cpstore.open(url) as st:
        st.recorder("r").checkpoint(0, {"i": "a new root"})  # the count cannot see it
        assert [p.where for p in st.verify().problems] == ["meta/refs_digest"]
        with pytest.raises(IntegrityError) as info:
            st.gc(keep_last=1)
        assert info.value.where == "meta/refs_digest"
        for cid in ids:  # the vanished head's history is still stored
            with st.read(cid) as cp:
                assert cp.manifest.step == ids.index(cid)
