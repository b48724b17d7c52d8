"""review69: a hold added to a malformed retained row no longer replaces it.

A retained row damaged behind cpstore's back (truncated, here) is still a root and
``verify()`` reports it, but its holders cannot be read. A reset away from the same
head (or a repair keeping it) replaced the row with its own hold: ``verify()`` went
clean, and that one holder's release let ``prune`` sweep the history the unreadable
hold (an operator's reset) still kept. Now the hold is refused (IntegrityError, the
reset or repair written not at all) until the row is dropped, audited, with
``release_retained(id)``. The damage is done by another process (LMDB) or connection
(PostgreSQL), on both engines.
"""

from __future__ import annotations

import pytest
from lg_puts import thread_with_held_fork
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref
from test_review68_repair_model import _stored

import cpstore
from cpstore.errors import IntegrityError, NotFoundError
from cpstore.store.facade import Store
from cpstore.store.refs import REFS_DIGEST_KEY


def _row(st: Store, cid: str) -> bytes | None:
    with st.backend.read_txn() as txn:
        raw = txn.get(b"retained/" + bytes.fromhex(cid), None, st.backend.db("meta"))
        return None if raw is None else bytes(raw)


def _damaged(st: Store, url: str, *, both: bool = False) -> list[str]:
    """main reset away from ids[2] by ann (a hold), a fork ``exp`` at ids[2] (reset away
    too when ``both``: ids[2] is then a tip no ref reaches); the row then truncated
    behind cpstore's back."""
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
    st.fork("r", "exp", ids[2])
    st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="ann", reason="keep")
    if both:
        st.reset_ref("r", "exp", ids[0], expected_old=ids[2], operator="o", reason="x")
    row = _row(st, ids[2])
    assert row is not None
    _raw_ref(url, b"retained/" + bytes.fromhex(ids[2]), row[:-3], "meta")
    return ids


def _malformed(st: Store, cid: str) -> bool:
    return ("retained head row is malformed", f"meta/retained/{cid}") in {
        (p.what, p.where) for p in st.verify().problems
    }


def test_a_reset_away_from_a_head_with_a_malformed_row_is_refused(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _damaged(st, url)
        row, count = _row(st, ids[2]), len(list(st.audit_records()))
        assert _malformed(st, ids[2])
        with pytest.raises(IntegrityError) as err:
            st.reset_ref("r", "exp", None, expected_old=ids[2], operator="bob", reason="gone")
        assert err.value.where == f"meta/retained/{ids[2]}"
        # Nothing written: the row, the fork, the log as they were; the damage reported.
        assert _row(st, ids[2]) == row and st.ref("r", "exp") == ids[2]
        assert len(list(st.audit_records())) == count and _malformed(st, ids[2])
        # The way out: drop the unreadable row, audited; the reset then holds it alone.
        st.release_retained(ids[2], operator="ann", reason="malformed, holders from the log")
        st.reset_ref("r", "exp", None, expected_old=ids[2], operator="bob", reason="gone")
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])
        assert st.verify().ok


def test_a_repair_keeping_a_head_with_a_malformed_row_is_refused(url: str) -> None:
    """A flipped refs digest names no ref: the repair keeps every tip, ids[2] among
    them; its hold would have replaced the malformed row (then release_retained_by of
    the repair, the way to let go of what it over-kept, freed ids[2])."""
    with cpstore.open(url) as st:
        ids = _damaged(st, url, both=True)
        good = _digest(st)
        _raw_ref(url, REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], "meta")
        row, count = _row(st, ids[2]), len(list(st.audit_records()))
        with pytest.raises(IntegrityError) as err:
            st.repair_ref("r", "main", ids[0], operator="o", reason="digest damaged")
        assert err.value.where == f"meta/retained/{ids[2]}"
        assert _row(st, ids[2]) == row and len(list(st.audit_records())) == count
        assert _digest(st) != good and _malformed(st, ids[2])
        st.release_retained(ids[2], operator="o", reason="malformed, holders from the log")
        record = st.repair_ref("r", "main", ids[0], operator="o", reason="digest damaged")
        assert ids[2] in record.body["kept"] and _digest(st) == good
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])


def test_a_langgraph_prune_stops_at_a_malformed_row_and_finishes_once_dropped(
    url: str,
) -> None:
    """keep_latest resets each old branch away (a hold on its head): on a head whose
    row is malformed the reset refuses and the prune stops, nothing swept; run again
    after the row is dropped, it finishes and the store verifies clean."""
    with cpstore.open(url) as st:
        saver, run, branch, head, _ = thread_with_held_fork(st)
        row = _row(st, head)
        assert row is not None
        _raw_ref(url, b"retained/" + bytes.fromhex(head), row[:-2], "meta")
        with pytest.raises(IntegrityError):
            saver.prune(["t"])
        assert _stored(st, head) and branch in st.branches(run) and _malformed(st, head)
        st.release_retained(head, operator="ann", reason="malformed, holders from the log")
        saver.prune(["t"])
        assert branch not in st.branches(run) and st.verify().ok
        latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert latest is not None and latest.checkpoint["channel_values"]


def test_release_by_a_record_whose_hold_is_in_a_malformed_row_says_so(url: str) -> None:
    """release_retained_by of ann's reset, whose one hold is in the truncated row: it is
    NotFoundError (the row cannot be read), now saying a malformed row may hold it; the
    row stands."""
    with cpstore.open(url) as st:
        ids = _damaged(st, url)
        [ann] = [r for r in st.audit_records() if r.kind == "ref_reset"]
        with pytest.raises(NotFoundError) as err:
            st.release_retained_by(ann.digest, operator="ann", reason="done")
        assert "1 malformed retained row(s)" in str(err.value)
        assert _malformed(st, ids[2])
