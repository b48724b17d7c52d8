"""review73: a repair that leaves the refs table one ref short keeps the digest naming it.

repair72 checks a put-back against the XOR difference between ``meta/refs_digest`` and
the table while the table is one ref short. ``repair_ref`` re-derived the XOR from the
table on every repair, carrying only the count: a repair that left a ref still missing
(a ref failing its check beside the vanished one replaced at its true head, or one of two
vanished refs put back) left a difference of zero, and the next put-back was not checked
at all: ``r/main`` put back at an older head (or any name) was accepted, unforced,
lifting refs70's refusal; a repair of an intact ref was accepted likewise. Now, when the
difference after such a repair names a ref absent from the table, the recorded XOR is
kept, so the next put-back is checked against it. Both engines.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _main_vanished
from test_repair72_putback_check import _flip_check

import cpstore
from cpstore.errors import IntegrityError, PutBackMismatchError


def test_after_a_damaged_ref_beside_is_repaired_a_wrong_put_back_is_refused(url: str) -> None:
    with cpstore.open(url) as st:
        t0 = st.recorder("t").checkpoint(0, {"t": 0})
        ids = _main_vanished(url, st)
        _flip_check(url, st, b"t\0main")
        record = st.repair_ref("t", "main", t0, operator="o", reason="check failed")
        assert ids[2] in record.body["kept"]
        with pytest.raises(IntegrityError, match="fewer refs"):  # still one short (refs70)
            st.recorder("r").checkpoint(9, {"new": "root"})
        for branch, head in (("main", ids[1]), ("typo", ids[2])):
            with pytest.raises(PutBackMismatchError) as info:
                st.repair_ref("r", branch, head, operator="o", reason="wrong")
            assert info.value.expected == {"run": "r", "branch": "main", "head": ids[2]}
        with pytest.raises(PutBackMismatchError):  # the intact-ref route, likewise
            st.repair_ref("t", "main", t0, operator="o", reason="clear")
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["forced"] is False
        assert st.verify().ok
        nxt = st.recorder("r").checkpoint(3, {"i": 3})
        assert st.manifest(nxt).parent == ids[2]


def test_after_one_of_two_vanished_refs_is_put_back_the_other_is_checked(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        _raw_ref(url, b"s\0main", None)
        st.repair_ref("s", "main", s0, operator="o", reason="put back")  # not checked
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("r", "main", ids[0], operator="o", reason="wrong")
        assert info.value.expected == {"run": "r", "branch": "main", "head": ids[2]}
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert st.verify().ok


def test_a_damaged_ref_replaced_at_another_head_leaves_it_unchecked_as_before(url: str) -> None:
    """The difference is then two refs' (the vanished one and the damaged one's true
    hash against its new one), which names none: re-derived, as before."""
    with cpstore.open(url) as st:
        rec = st.recorder("t")
        t0, _ = rec.checkpoint(0, {"t": 0}), rec.checkpoint(1, {"t": 1})
        ids = _main_vanished(url, st)
        _flip_check(url, st, b"t\0main")
        st.repair_ref("t", "main", t0, operator="o", reason="older")
        record = st.repair_ref("r", "main", ids[1], operator="o", reason="not checked")
        assert record.body["forced"] is False and ids[2] in record.body["kept"]
