"""orphan68: repair_ref puts a vanished ref back, and a digest repair forgets no history.

A ref row deleted behind the store's back fails ``meta/refs_digest``, which stops
retention. ``repair_ref`` of the absent ref was NotFoundError (the way out was a fork,
then a repair), and a digest repair naming ANY other branch accepted the table as it
stood: the vanished ref's history became unreachable and the next sweep removed it with
``verify()`` clean. Now ``repair_ref`` puts an absent ref back (audited, ``damaged``:
None), and a repair that leaves the table short of what the digest recorded keeps what
the table no longer reaches as retained heads (``kept``). The damage is done by another
process (LMDB) or connection (PostgreSQL), on both engines.
"""

from __future__ import annotations

import multiprocessing

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref

import cpstore
from cpstore.errors import (
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    PutBackMismatchError,
)
from cpstore.store import ref_forgotten
from cpstore.store.facade import Store
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, pack_ref


def _stored(st: Store, ids: list[str]) -> bool:
    for cid in ids:
        with st.read(cid) as cp:
            cp.state()
    return True


def _swept(st: Store, ids: list[str]) -> bool:
    for cid in ids:
        with pytest.raises(NotFoundError):
            st.manifest(cid)
    return True


def _three(st: Store, run: str = "r") -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"i": i, "run": run}) for i in range(3)]


# -- 1. an absent ref is put back ---------------------------------------------------


def test_a_vanished_ref_is_put_back_and_retention_runs_again(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _three(st)
        other = st.recorder("s").checkpoint(0, {"s": 1})
        good = _digest(st)
        _raw_ref(url, b"r\0main", None)
        with pytest.raises(IntegrityError):
            st.prune(keep_last=1)
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="vanished")
        assert record.kind == "ref_repair"
        assert record.body["damaged"] is None and record.body["new"] == ids[2]
        assert record.body["retained"] is None and record.body["kept"] == []
        assert record.body["refs"] == {"recorded": 2, "found": 1}
        assert st.ref("r") == ids[2] and st.ref("s") == other
        assert _digest(st) == good  # the table is whole again
        assert st.verify().ok
        assert st.prune(keep_last=1) == 2  # retention runs again
        assert _stored(st, [ids[2], other])
        assert st.verify().ok


def test_an_absent_ref_is_refused_when_nothing_vanished(url: str) -> None:
    """The digest holds: nothing to put back; fork makes a branch. Nothing is written."""
    with cpstore.open(url) as st:
        ids = _three(st)
        with pytest.raises(NotFoundError, match="fork") as info:
            st.repair_ref("r", "b", ids[1], operator="o", reason="no")
        assert info.value.where == "refs/r/b"
        assert st.ref("r", "b") is None
        assert list(st.audit_records()) == []


def test_deleting_an_absent_ref_is_refused(url: str) -> None:
    """new=None on a ref that is not there: nothing to delete, digest failing or not."""
    with cpstore.open(url) as st:
        _three(st)
        st.recorder("s").checkpoint(0, {"s": 1})
        for branch in ("b", "main"):  # the digest holding, then failing
            if branch == "main":
                _raw_ref(url, b"r\0main", None)
            with pytest.raises(NotFoundError, match="nothing to delete"):
                st.repair_ref("r", branch, None, operator="o", reason="no")
        assert list(st.audit_records()) == []


def test_a_ref_is_put_back_only_at_a_stored_checkpoint_of_its_run(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _three(st)
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        with pytest.raises(InvalidInputError, match="its own run"):
            st.repair_ref("r", "main", other, operator="o", reason="wrong run")
        with pytest.raises(NotFoundError):
            st.repair_ref("r", "main", "ab" * 16, operator="o", reason="not stored")
        assert st.ref("r") is None and list(st.audit_records()) == []
        with pytest.raises(IntegrityError):
            st.prune(keep_last=1)  # nothing was repaired
        assert _stored(st, ids)


def _put_back_race(path: str, new: str, who: str) -> bool:
    with cpstore.open(path) as st:
        try:
            st.repair_ref("r", "main", new, operator=who, reason="race")
        except (ConflictError, NotFoundError):
            return False
        return True


def test_concurrent_put_backs_one_wins_and_one_audit_record(url: str) -> None:
    """Four processes put the same vanished ref back at once: one wins, one record."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.recorder("s").checkpoint(0, {"s": 1})
    _raw_ref(url, b"r\0main", None)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        wins = pool.starmap(_put_back_race, [(url, ids[2], f"op{i}") for i in range(4)])
    assert sum(wins) == 1
    with cpstore.open(url) as st:
        assert len(list(st.audit_records(kind="ref_repair"))) == 1
        assert st.ref("r") == ids[2] and st.verify().ok


# -- 2. a digest repair that would forget a vanished ref loses nothing ----------------


def test_a_digest_repair_through_another_branch_keeps_the_vanished_history(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _three(st)
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == [ids[2]]  # the digest names the vanished ref
        hold = {"run": "r", "branch": "main", "audit": record.digest}
        assert st.retained() == {ids[2]: {**hold, "holds": [hold]}}
        assert st.verify().ok
        assert st.prune(keep_last=1) == 0
        assert st.gc(keep_last=1).checkpoints == ()
        assert _stored(st, ids) and st.verify().ok
        # released by the existing API, the next sweep may take it
        st.release_retained(ids[2], operator="o", reason="not wanted")
        assert st.prune(keep_last=1) == 3 and _swept(st, ids)
        assert st.verify().ok


def test_a_released_lineage_awaiting_the_sweep_is_not_kept(url: str) -> None:
    """What a release made unreachable is the next sweep's: the digest names the vanished
    ref, so only its head is kept and the released lineage is swept as before."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "b", ids[0])
        rec = st.recorder("r", branch="b")
        dropped = [rec.checkpoint(i, {"b": i}) for i in range(2)]
        st.reset_ref("r", "b", None, expected_old=dropped[1], operator="o", reason="drop b")
        st.release_retained(dropped[1], operator="o", reason="drop b")
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == [ids[2]]
        assert st.prune(keep_last=1) == 2  # the released lineage, not main's history
        assert _swept(st, dropped) and _stored(st, ids)
        assert st.verify().ok


def test_a_fork_back_is_refused_and_repair_puts_it_back(url: str) -> None:
    """A fork of the vanished ref's name used to put it back (its CAS "absent" met only
    by the damage); now no ref is created from nothing while the table is short of the
    refs its digest counts (refs70), and repair_ref puts it back: the digest's XOR then
    holds, so a pending released lineage is not kept either."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "b", ids[0])
        dropped = st.recorder("r", branch="b").checkpoint(0, {"b": 0})
        st.reset_ref("r", "b", None, expected_old=dropped, operator="o", reason="drop b")
        st.release_retained(dropped, operator="o", reason="drop b")
        _raw_ref(url, b"r\0main", None)
        with pytest.raises(IntegrityError, match="fewer refs"):
            st.fork("r", "main", ids[2])
        assert st.branches("r") == {}
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["kept"] == [] and record.body["refs"] == {"recorded": 1, "found": 0}
        assert st.verify().ok
        assert st.prune(keep_last=1) == 3  # ids[0], ids[1] and the released one
        assert _swept(st, [dropped]) and _stored(st, [ids[2]])


def test_a_ref_put_back_at_the_wrong_head_keeps_the_true_one(url: str) -> None:
    """Refused unless forced since repair72 (the digest names the true head, and
    tests/test_repair72_putback_check.py checks the refusal); forced, the true head is
    kept."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        with pytest.raises(PutBackMismatchError):
            st.repair_ref("r", "main", ids[1], operator="o", reason="put back")
        record = st.repair_ref("r", "main", ids[1], operator="o", reason="put back", force=True)
        assert record.body["kept"] == [ids[2]]
        assert st.verify().ok and st.prune(keep_last=1) == 0
        assert _stored(st, ids)


def test_two_vanished_refs_keep_both_histories(url: str) -> None:
    """Two refs missing: the XOR names neither; every tip of the store is kept (either
    head could lie in any lineage, review68)."""
    with cpstore.open(url) as st:
        r, t = _three(st), _three(st, "t")
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        _raw_ref(url, b"t\0main", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == sorted([r[2], t[2], other])
        assert record.body["refs"] == {"recorded": 3, "found": 1}
        assert st.verify().ok and st.prune(keep_last=1) == 0
        assert _stored(st, r + t)


def test_a_vanished_fork_no_manifest_names_is_kept_inside_a_released_lineage(url: str) -> None:
    """A fork that never recorded has a name no manifest holds, and its head can lie in a
    lineage a release let go (or in main's): nothing tells them apart, so every tip, the
    released head too, is kept with its lineage (over-kept, not lost)."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="o", reason="back")
        st.release_retained(ids[2], operator="o", reason="back")
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0exp", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == sorted([ids[2], other])
        assert st.verify().ok and st.prune(keep_last=1) == 0
        assert _stored(st, ids)


def test_a_malformed_digest_with_a_vanished_ref_keeps_its_history(url: str) -> None:
    """The count unknowable: what the table no longer reaches is kept."""
    with cpstore.open(url) as st:
        ids = _three(st)
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, REFS_DIGEST_KEY, _digest(st)[:-1], "meta")
        _raw_ref(url, b"r\0main", None)
        record = st.repair_ref("s", "main", other, operator="o", reason="digest truncated")
        assert record.body["kept"] == sorted([ids[2], other])
        assert record.body["refs"] == {"recorded": None, "found": 1}
        assert st.verify().ok and st.prune(keep_last=1) == 0
        assert _stored(st, ids)


def _released_lineage(st: Store, base: str) -> list[str]:
    """Two checkpoints on branch b of run r from ``base``, b deleted and its head released:
    unreachable, the next sweep's to remove."""
    st.fork("r", "b", base)
    rec = st.recorder("r", branch="b")
    dropped = [rec.checkpoint(i, {"b": i}) for i in range(2)]
    st.reset_ref("r", "b", None, expected_old=dropped[1], operator="o", reason="drop b")
    st.release_retained(dropped[1], operator="o", reason="drop b")
    return dropped


def test_a_vanished_fork_whose_head_is_still_reached_keeps_only_its_head(url: str) -> None:
    """The digest names the vanished fork (its head was recorded on it); another fork
    still reaches that head, but may move on and a prune(keep_last=N) take it, so the
    head is kept (review68); the released lineage is swept as before."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        head = st.recorder("r", branch="exp").checkpoint(5, {"exp": 0})
        st.fork("r", "exp2", head)
        dropped = _released_lineage(st, ids[0])
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0exp", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == [head]
        assert record.body["refs"] == {"recorded": 4, "found": 3}
        assert st.verify().ok
        assert st.prune(keep_last=3) == 2 and _swept(st, dropped)
        assert _stored(st, [*ids, head])


def test_a_damaged_count_keeps_nothing(url: str) -> None:
    """The digest's count flipped up, its XOR intact: no ref is missing, nothing kept
    (a released lineage awaiting the sweep is not held back by the repair)."""
    with cpstore.open(url) as st:
        ids = _three(st)
        dropped = _released_lineage(st, ids[0])
        good = _digest(st)
        _raw_ref(url, REFS_DIGEST_KEY, good[:16] + bytes([good[16] ^ 4]) + good[17:], "meta")
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="count damaged")
        assert record.body["kept"] == [] and record.body["refs"] == {"recorded": 5, "found": 1}
        assert _digest(st) == good and st.verify().ok
        assert st.prune(keep_last=3) == 2 and _swept(st, dropped)


def test_a_name_search_past_its_budget_keeps_every_unreachable_tip(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many branches per run bound the search for the vanished ref's name (NAME_TRIES):
    past it, the repair keeps every tip of the store (the released lineage too), never
    fewer."""
    monkeypatch.setattr(ref_forgotten, "NAME_TRIES", 0)
    with cpstore.open(url) as st:
        ids = _three(st)
        dropped = _released_lineage(st, ids[0])
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == sorted([ids[2], dropped[1], other])
        assert st.verify().ok and st.prune(keep_last=1) == 0
        assert _stored(st, ids + dropped)


# -- a ref changed outside cpstore: the same forgetting, one ref not short ------------


def test_a_digest_repair_through_another_branch_keeps_a_changed_ref_history(url: str) -> None:
    """A ref put back to an older head outside cpstore keeps a true check; a digest
    repair naming another branch accepted it and the next sweep removed the history the
    true head reached (the table was not short, so nothing was scanned). The digest's
    XOR difference names the true head: it is kept, the released lineage is not."""
    with cpstore.open(url) as st:
        ids = _three(st)
        dropped = _released_lineage(st, ids[0])
        other = st.recorder("s").checkpoint(0, {"s": 1})
        key = b"r\0main"
        _raw_ref(url, key, pack_ref(key, bytes.fromhex(ids[0]), RECORDED))
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.body["kept"] == [ids[2]]
        assert record.body["refs"] == {"recorded": 2, "found": 2}
        assert st.verify().ok
        assert st.prune(keep_last=1) == 2 and _swept(st, dropped)
        assert _stored(st, ids)


def test_a_flipped_digest_keeps_what_no_root_reaches(url: str) -> None:
    """A flipped XOR names no ref: a released lineage awaiting the sweep cannot be told
    from a changed ref's history, so it is kept, and so is every other tip (a changed
    ref's head may lie in any lineage; over-kept, never lost)."""
    with cpstore.open(url) as st:
        ids = _three(st)
        dropped = _released_lineage(st, ids[0])
        good = _digest(st)
        _raw_ref(url, REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], "meta")
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="digest flipped")
        assert record.body["kept"] == sorted([dropped[1], ids[2]]) and _digest(st) == good
        assert st.verify().ok and st.prune(keep_last=3) == 0
        assert _stored(st, ids + dropped)


def test_a_damaged_fork_dropped_keeps_nothing_more(url: str) -> None:
    """A fork's ref fails its check and is dropped (new=None): its head is retained as
    before; the digest names the dropped ref, so a released lineage is not kept."""
    with cpstore.open(url) as st:
        ids = _three(st)
        st.fork("r", "exp", ids[1])
        dropped = _released_lineage(st, ids[0])
        with st.backend.read_txn() as txn:
            value = bytes(txn.get(b"r\0exp", None, st.backend.db("refs")))
        _raw_ref(url, b"r\0exp", value[:-1] + bytes([value[-1] ^ 1]))
        record = st.repair_ref("r", "exp", None, operator="o", reason="check damaged")
        assert record.body["retained"] == ids[1] and record.body["kept"] == []
        assert st.verify().ok
        assert st.prune(keep_last=3) == 2 and _swept(st, dropped)
