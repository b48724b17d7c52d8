"""repair72's other route: a repair of an intact ref while another ref is missing.

``repair_ref`` naming an intact ref (the way to clear a damaged refs digest, or to move
or delete a ref while the table fails its digest) re-derives the digest from the table
as it stands. With ``r/main`` deleted behind cpstore's back, ``repair_ref("s", "main",
head_of_s)`` therefore lifted refs70's refusal without ``r/main`` back: a new recorder
on ``r`` started a new root with ``verify()`` clean, the same loss repair72's put-back
check closes. Now, while the digest can name the missing ref (one ref short, the digest
well-formed, every ref passing its check, a non-zero difference), such a repair is
PutBackMismatchError naming it and writes nothing; ``force=True`` accepts it (recorded).
Both engines.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _main_vanished, _snapshot
from test_repair72_putback_check import _audits, _unchanged

import cpstore
from cpstore.errors import IntegrityError, PutBackMismatchError


@pytest.mark.parametrize("move", ["same_head", "other_head", "delete"])
def test_a_repair_of_an_intact_ref_is_refused_while_another_is_missing(url: str, move: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        s1 = st.recorder("s").checkpoint(1, {"s": 1})
        new = {"same_head": s1, "other_head": s0, "delete": None}[move]
        before, audits = _snapshot(st), _audits(st)
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("s", "main", new, operator="o", reason="clear the digest")
        exc = info.value
        assert isinstance(exc, IntegrityError) and exc.where == "refs/s/main"
        assert exc.expected == {"run": "r", "branch": "main", "head": ids[2]}
        assert exc.got == {"run": "s", "branch": "main", "head": new}
        assert "refs/r/main" in str(exc) and "force=True" in str(exc)
        _unchanged(st, before, audits)
        # what the error names first, then the run goes on from its true head
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert st.manifest(st.recorder("r").checkpoint(3, {"i": 3})).parent == ids[2]
        assert st.ref("s") == s1 and st.verify().ok


def test_force_accepts_the_loss_and_says_so(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        record = st.repair_ref("s", "main", s0, operator="o", reason="accept", force=True)
        assert record.body["forced"] is True
        assert ids[2] in record.body["kept"]  # the vanished history is kept retained
        assert st.verify().ok


def test_a_ref_that_fails_its_check_is_still_repaired(url: str) -> None:
    """A damaged ref beside the vanished one: the difference is not one ref's, so the
    repair of the damaged ref is not checked (as before)."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        _raw_ref(url, b"s\0main", b"\x00" * 5)
        record = st.repair_ref("s", "main", s0, operator="o", reason="damaged")
        assert record.body["forced"] is False
        assert ids[2] in record.body["kept"]
