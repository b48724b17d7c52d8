"""review101: a ref row whose key took a flipped bit is repaired by naming the ref itself.

refkey100 refuses a create (and an absent read) beside a ref row that fails its check,
and says: run verify, then repair_ref. But the documented repair left the store refusing:
``repair_ref(run, "main", head)`` put ``main`` back and left the damaged row beside it, so
every other create in the run (a fork, a new branch's recorder) and a new run sorting just
past it stayed IntegrityError; and when the flipped bit left a key no name encodes to (bit 7
of an ASCII byte: not UTF-8; the NUL flipped), no ``repair_ref(run, branch, ...)`` could
name the row to delete it, and the refusal named it only as ``refs`` (``refs._where``
caught UnicodeDecodeError, which ``split_ref_key`` had already turned into IntegrityError).
Now the repair of an absent ref whose row sits under a damaged key (a row failing its own
check whose value passes the check under the ref's key: it is that ref) deletes that row
in the same txn and records its key (``moved_from``); the refusal names a row whose key is
not a name as ``refs/<hex>``, and says when the damaged row's value passes the check
under the absent ref's key (the row is that ref: the name ``repair_ref`` needs).
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_refkey100_neighbours import _flipped, _refs, _rename

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.facade import Store
from cpstore.store.model import ref_key


def _store(st: Store) -> str:
    st.recorder("a").checkpoint(0, {"a": 0})
    rec = st.recorder("run")
    head = ""
    for i in range(3):
        head = rec.checkpoint(i, {"i": i})
    st.recorder("zz").checkpoint(0, {"z": 0})
    return head


def _usable(st: Store, head: str) -> None:
    """What refkey100's refusal blocked beside the damaged row works again."""
    assert st.ref("run") == head
    st.fork("run", "other", head)
    assert st.ref("run", "other") == head
    st.recorder("run", branch="new").checkpoint(0, {"n": 0})
    st.recorder("ruo").checkpoint(0, {"o": 0})  # sorts just past run's rows
    st.recorder("run").checkpoint(3, {"i": 3})
    report = st.verify()
    assert report.ok, report.problems


@pytest.mark.parametrize(
    ("at", "bit"),
    [(-3, 0x80), (-1, 0x01), (len(b"run"), 0x02)],
    ids=["not-utf8", "utf8-branch", "nul-flipped"],
)
def test_the_put_back_deletes_the_ref_row_under_its_damaged_key(
    url: str, at: int, bit: int
) -> None:
    with cpstore.open(url) as st:
        head = _store(st)
        key = ref_key("run", "main")
        damaged = _flipped(key, at, bit)
        _rename(url, key, damaged)
        with pytest.raises(IntegrityError) as refused:
            st.fork("run", "other", head)
        assert refused.value.where != "refs", refused.value  # the row is named
        assert "it is that ref" not in str(refused.value)  # run/other's: it is not
        if at == -3:
            assert refused.value.where == f"refs/{damaged.hex()}"
        with pytest.raises(IntegrityError) as read:
            st.ref("run")
        # The name repair_ref needs, which the damaged key no longer gives.
        assert "passes the check under refs/run/main: it is that ref" in str(read.value)
        record = st.repair_ref("run", "main", head, operator="op", reason="flipped key")
        assert record.body["moved_from"] == damaged.hex()
        assert record.body["damaged"] is not None
        assert damaged not in dict(_refs(st))
        _usable(st, head)


def test_a_delete_names_the_ref_and_takes_its_damaged_row_out(url: str) -> None:
    """``--delete`` of the ref whose row sits under a key no name encodes to takes that
    row out; the run is then made again from its kept head."""
    with cpstore.open(url) as st:
        head = _store(st)
        key = ref_key("run", "main")
        damaged = _flipped(key, -3, 0x80)
        _rename(url, key, damaged)
        record = st.repair_ref("run", "main", None, operator="op", reason="flipped key")
        assert record.body["moved_from"] == damaged.hex()
        assert damaged not in dict(_refs(st))
        # A delete of the ref (its value passes its check under its key): the digest is
        # re-derived without it and its head kept retained, as for any ref deleted.
        assert st.verify().ok and st.ref("run") is None
        assert head in st.retained()
        st.fork("run", "main", head)
        _usable(st, head)


def test_an_intact_store_keeps_its_refusals(url: str) -> None:
    """No moved row: a put-back of a ref that is not there on an intact table is refused
    as before, and a repair of an intact ref leaves ``moved_from`` None."""
    with cpstore.open(url) as st:
        head = _store(st)
        with pytest.raises(cpstore.errors.NotFoundError):
            st.repair_ref("run", "nope", head, operator="op", reason="r")
        other = st.ref("a")
        assert other is not None
        damaged = _flipped(ref_key("a", "main"), -1, 0x01)
        _rename(url, ref_key("a", "main"), damaged)
        record = st.repair_ref("a", "maio", None, operator="op", reason="r")
        assert record.body["moved_from"] is None
