"""review71: a refs table with refs and no ``meta/refs_digest`` row creates no ref.

refs70 refuses a create while the table holds fewer refs than the digest counts. A digest
row deleted behind cpstore's back read as a count of 0, which no table is short of: with
``r``'s ``main`` row deleted too, a new recorder on ``r`` started a new root (the runtime
saw its run as new and would replay its effects), the harm refs70 closed, with verify
saying only "a ref was added outside cpstore". No intact store holds a ref without the
digest row (every ref write writes it; layout 1's upgrade writes it), so its absence
beside a ref means the count is unknown: a create is refused then, and ``repair_ref``
putting the vanished ref back records the table's own count, which ends it and leaves
the store verified. The damage is done by another process (LMDB) or connection
(PostgreSQL), on both engines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.facade import Store
from cpstore.store.refs import REFS_DIGEST_KEY
from cpstore.store.stats import store_stats
from cpstore.store.transfer import transfer


def _snapshot(st: Store) -> tuple[Any, ...]:
    """What a refused create must leave as it was: refs, digest row, checkpoints."""
    b = st.backend
    with b.read_txn() as txn, txn.cursor(db=b.db("refs")) as cur:
        refs = sorted((bytes(k), bytes(v)) for k, v in cur)
        digest = txn.get(REFS_DIGEST_KEY, None, b.db("meta"))
        row = None if digest is None else bytes(digest)
    return refs, row, store_stats(st).checkpoints


def test_no_create_while_the_digest_row_is_missing(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    _raw_ref(url, b"r\0main", None)
    with cpstore.open(url) as st:
        before = _snapshot(st)
        for create in (
            lambda: st.recorder("r").checkpoint(0, {"i": "a new root"}),
            lambda: st.fork("s", "b", st.branches("s")["main"]),
            lambda: st.recorder("t").checkpoint(0, {"t": 0}),
        ):
            with pytest.raises(IntegrityError) as info:
                create()
            assert info.value.where == "meta/refs_digest"
            assert "repair_ref" in str(info.value)
        assert _snapshot(st) == before
        assert st.branches("r") == {}
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert st.verify().ok
        assert st.branches("r") == {"main": ids[2]}
        st.recorder("t").checkpoint(0, {"t": 0})
        st.fork("s", "b", st.branches("s")["main"])
        assert st.verify().ok


def test_an_empty_store_without_a_digest_creates(url: str) -> None:
    with cpstore.open(url) as st:
        st.recorder("r").checkpoint(0, {"i": 0})
        st.reset_ref(
            "r", "main", None, expected_old=st.branches("r")["main"], operator="o", reason="x"
        )
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")  # the table is empty: nothing lost
    with cpstore.open(url) as st:
        st.recorder("r2").checkpoint(0, {"i": 0})
        assert st.verify().ok


def test_verify_and_push_say_the_digest_row_is_missing(url: str, tmp_path: Path) -> None:
    """verify() and a push name what is wrong: the digest row is missing (they said "a ref
    was added outside cpstore", sending the operator after a ref that was never added)."""
    with cpstore.open(url) as st:
        st.recorder("r").checkpoint(0, {"i": 0})
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    with cpstore.open(url) as st:
        [problem] = st.verify().problems
        assert problem.where == "meta/refs_digest"
        assert "meta/refs_digest is missing" in problem.what
        with cpstore.open(str(tmp_path / "dst")) as dst, pytest.raises(IntegrityError) as info:
            transfer(st.backend, dst.backend, run_id="r")
        assert "meta/refs_digest is missing" in str(info.value)


def test_only_the_digest_row_missing_is_mended_naming_an_intact_ref(url: str) -> None:
    """Nothing vanished but the digest row: creates are refused (the count is unknown)
    until repair_ref names an intact ref at its own head, which records the table."""
    with cpstore.open(url) as st:
        head = st.recorder("r").checkpoint(0, {"i": 0})
        st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    with cpstore.open(url) as st:
        with pytest.raises(IntegrityError):
            st.fork("r", "b", head)
        st.repair_ref("r", "main", head, operator="o", reason="digest row lost")
        assert st.verify().ok
        st.fork("r", "b", head)
        assert st.branches("r") == {"main": head, "b": head}
        assert st.verify().ok


def test_a_move_or_a_delete_does_not_write_a_missing_row_back(url: str) -> None:
    """A move (or a delete) on a store whose digest row is missing wrote the row back with
    a count of 0 (counted from nothing): the next create then met no refusal, and a new
    recorder on the run whose ``main`` vanished started a new root. The row is left
    missing until repair_ref records the table."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        s = st.recorder("s")
        s.checkpoint(0, {"s": 0})
        st.fork("s", "gone", st.branches("s")["main"])
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    _raw_ref(url, b"r\0main", None)
    with cpstore.open(url) as st:
        s = st.recorder("s")
        s.checkpoint(1, {"s": 1})  # a move
        with pytest.raises(IntegrityError) as info:
            st.recorder("r").checkpoint(0, {"i": "a new root"})
        assert info.value.where == "meta/refs_digest"
        head = st.branches("s")["gone"]
        st.reset_ref("s", "gone", None, expected_old=head, operator="o", reason="x")  # a delete
        with pytest.raises(IntegrityError) as info:
            st.recorder("r").checkpoint(0, {"i": "a new root"})
        assert "meta/refs_digest is missing while the refs table holds refs" in str(info.value)
        assert st.branches("r") == {}
        assert "meta/refs_digest is missing" in st.verify().problems[0].what
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert st.verify().ok
        st.recorder("t").checkpoint(0, {"t": 0})
        assert st.verify().ok


def test_a_repair_after_the_row_went_missing_keeps_every_tip(url: str) -> None:
    """The row missing, the digest names no ref: the repair keeps every tip of the store as
    a retained head of its own (docs/store.md), so no sweep takes what a ref held."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        s0 = st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    _raw_ref(url, b"r\0main", None)
    with cpstore.open(url) as st:
        record = st.repair_ref("s", "main", s0, operator="o", reason="accept")
        assert sorted(record.body["kept"]) == sorted([ids[2], s0])
        st.gc(keep_last=1)
        with st.read(ids[2]) as cp:
            assert cp.state() == {"i": 2}
        assert st.verify().ok
