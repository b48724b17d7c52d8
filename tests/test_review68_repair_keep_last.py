"""review68: a refs repair keeps the damaged ref's head even where another ref's lineage
reaches it.

``forgotten_heads`` took "reached by a root's whole lineage" for "kept by the next
sweep"; ``prune(keep_last=N)`` keeps only each ref's newest N, so the head of a vanished
(or changed) fork lying deep in another branch's lineage was kept by nothing and the
next ``prune(keep_last=1)`` removed it, ``verify()`` clean. Before the damage, the fork's
ref kept it through every prune.
"""

from __future__ import annotations

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_review68_repair_model import _stored

import cpstore
from cpstore.store.facade import Store
from cpstore.store.refs import SET, pack_ref


def _three(st: Store, run: str = "r") -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"i": i, "run": run}) for i in range(3)]


def test_a_vanished_fork_inside_main_lineage_survives_prune(url: str) -> None:
    """A fork never recorded on (its name nothing else holds) at an older checkpoint of
    main: the table no longer reaches less than before (main reaches it), so nothing was
    kept, and prune(keep_last=1) took the fork's head."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0exp", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert ids[2] in record.body["kept"]  # unnamed: every tip, main's head too
        assert st.verify().ok
        st.prune(keep_last=1)
        assert _stored(st, ids[1])


def test_a_vanished_fork_named_by_a_ref_at_its_head_survives_its_moving_on(url: str) -> None:
    """The digest names the vanished fork; another fork is at the same head, so nothing
    was kept: that fork records on, and prune(keep_last=1) took the vanished one's head."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        head = st.recorder("r", branch="exp").checkpoint(5, {"exp": 0})
        st.fork("r", "exp2", head)
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0exp", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert head in record.body["kept"]
        rec = st.recorder("r", branch="exp2")
        rec.checkpoint(6, {"exp2": 0})
        rec.checkpoint(7, {"exp2": 1})
        st.prune(keep_last=1)
        assert _stored(st, head)


def test_a_fork_put_back_outside_cpstore_keeps_its_true_head(url: str) -> None:
    """A fork's ref put back to an older head of main (a valid value): its true head is
    in main's lineage; the repair kept nothing and prune(keep_last=1) took it."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        other = st.recorder("s").checkpoint(0, {"s": 1})
        key = b"r\0exp"
        _raw_ref(url, key, pack_ref(key, bytes.fromhex(ids[0]), SET))
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert ids[1] in record.body["kept"]
        st.prune(keep_last=1)
        assert _stored(st, ids[1])


def test_a_vanished_fork_at_a_retained_head_survives_its_release(url: str) -> None:
    """The vanished fork's head is a retained head (a reset moved main away from it):
    nothing was kept (one retained row per checkpoint); the release of main's reset then
    let prune take the fork's head. The repair now adds its own hold (holders69)."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[2])
        reset = st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="o", reason="back")
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0exp", None)
        repair = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert ids[2] in repair.body["kept"]
        st.release_retained_by(reset.digest, operator="o", reason="main's reset")
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])
