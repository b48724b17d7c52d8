"""review102: a ref's row under a damaged key, beside an intact ref at its own key.

refkey100's check does not look where a flip in an early byte of the run id sorts the row
(``run`` stored as ``\\xf2un``: among other runs' refs, the documented blind spot), so
``ref("run")`` reads None and a recorder starts the run anew: an intact ref at
``refs/run/main`` while the old one's row sits under the damaged key. ``repair_ref("run",
"main", head)`` took the intact ref, left the damaged row, and re-derived the digest over
the table as stored (the damaged row hashed as it is): from then on the ref and the table
passed their checks (``repair_ref`` ConflictError), ``verify()`` named the row for ever,
every create sorting beside it was refused for ever, and its key (not UTF-8) could be
named by no ``repair_ref``. Now the repair of a ref intact at its own key also deletes this
ref's row under a damaged key (a row failing its own check whose value passes the check
under the ref's key), records it (``moved_from``, ``moved_value``) and keeps its head
retained (``kept``), as it keeps the replaced head (``retained``): nothing is lost
whichever head the operator names. A row that passes its own check is never deleted.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_refkey100_neighbours import _flipped, _refs, _rename

import cpstore
from cpstore.cli import main
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store.facade import Store
from cpstore.store.model import ref_key
from cpstore.store.ref_table import record_refs_digest, refs_state

_KEY = ref_key("run", "main")
_DAMAGED = _flipped(_KEY, 0, 0x80)  # b"\xf2un\0main": not UTF-8, sorts past every run


def _blind(st: Store, url: str) -> tuple[str, str]:
    """Runs ``a``, ``run`` (three checkpoints) and ``zz``; ``run``'s row moved to
    :data:`_DAMAGED` (past ``zz``: not seen by refkey100's check), then the run started
    anew by a recorder (the blind spot). (old head, new root)."""
    st.recorder("a").checkpoint(0, {"a": 0})
    rec = st.recorder("run")
    head = ""
    for i in range(3):
        head = rec.checkpoint(i, {"i": i})
    st.recorder("zz").checkpoint(0, {"z": 0})
    _rename(url, _KEY, _DAMAGED)
    assert st.ref("run") is None  # the documented blind spot
    root = st.recorder("run").checkpoint(0, {"fresh": 1})
    assert st.ref("run") == root != head
    return head, root


def _rederived(st: Store) -> None:
    """The digest re-derived over the table as stored, the damaged row hashed as it is:
    what a repair of the intact ref left before review102."""
    b = st.backend

    def write(txn: object) -> None:
        state = refs_state(txn, b.dbs)
        record_refs_digest(txn, b.dbs, state.acc, state.found)

    b.write_txn(write)


def _whole(st: Store) -> None:
    """The damaged row gone: verify passes and creates beside where it sorted work."""
    assert _DAMAGED not in dict(_refs(st))
    report = st.verify()
    assert report.ok, report.problems
    st.recorder("zzz").checkpoint(0, {"x": 1})
    st.recorder("\U0010ffff").checkpoint(0, {"x": 2})


@pytest.mark.parametrize("keep", ["old", "new"])
def test_the_repair_of_the_intact_ref_deletes_its_moved_row(url: str, keep: str) -> None:
    with cpstore.open(url) as st:
        head, root = _blind(st, url)
        with pytest.raises(IntegrityError):
            st.recorder("zzz").checkpoint(0, {"x": 1})  # beside the damaged row: refused
        want = head if keep == "old" else root
        record = st.repair_ref("run", "main", want, operator="op", reason="flipped key")
        assert record.body["moved_from"] == _DAMAGED.hex()
        assert record.body["moved_value"] is not None
        assert record.body["moved_value"].startswith(head)
        assert st.ref("run") == want
        # Whichever head was named, the other is kept retained by this record.
        other = root if keep == "old" else head
        assert other in (record.body["retained"], *record.body["kept"])
        assert other in st.retained()
        _whole(st)
        st.recorder("run").checkpoint(9, {"on": 1})


def test_the_repair_after_an_old_repair_rederived_the_digest(url: str) -> None:
    """The state an earlier repair left: the ref intact, the digest matching the table
    with the damaged row in it. repair_ref was ConflictError there, for good."""
    with cpstore.open(url) as st:
        head, root = _blind(st, url)
        _rederived(st)
        assert not st.verify().ok  # the damaged row, named for ever before
        record = st.repair_ref("run", "main", root, operator="op", reason="flipped key")
        assert record.body["moved_from"] == _DAMAGED.hex()
        assert head in record.body["kept"] and head in st.retained()
        _whole(st)
        # Now nothing is damaged: a repair of the intact ref is refused as before.
        with pytest.raises(ConflictError):
            st.repair_ref("run", "main", root, operator="op", reason="again")


def test_the_cli_repairs_it_and_names_the_deleted_row(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cpstore.open(url) as st:
        head, _ = _blind(st, url)
    args = ["repair-ref", "--store", url, "--operator", "op", "--reason", "r"]
    assert main([*args, "run", "main", head]) == 0
    assert _DAMAGED.hex() in capsys.readouterr().out
    with cpstore.open(url) as st:
        assert st.ref("run") == head
        _whole(st)


def test_a_row_that_is_not_this_ref_is_never_deleted(url: str) -> None:
    """Controls: an intact store's intact ref is ConflictError, nothing deleted; a row
    failing its check whose value is not this ref's (another ref's key damaged) stays,
    and the repair of this intact ref leaves ``moved_from`` None. Then that other ref's
    own repair finds its row though the digest was re-derived over it."""
    with cpstore.open(url) as st:
        st.recorder("a").checkpoint(0, {"a": 0})
        head = st.recorder("run").checkpoint(0, {"i": 0})
        zz_head = st.recorder("zz").checkpoint(0, {"z": 0})
        before = _refs(st)
        with pytest.raises(ConflictError):
            st.repair_ref("run", "main", head, operator="op", reason="r")
        assert _refs(st) == before
        moved = _flipped(ref_key("zz", "main"), 0, 0x80)
        _rename(url, ref_key("zz", "main"), moved)
        record = st.repair_ref("run", "main", head, operator="op", reason="r")
        assert record.body["moved_from"] is None and record.body["moved_value"] is None
        assert moved in dict(_refs(st))  # zz's row: not run/main's, left for its repair
        assert st.ref("run") == head
        # That repair re-derived the digest over zz's moved row (a repair of an intact ref
        # accepts the table as stored): the table now passes its digest, and zz's put-back
        # was NotFoundError ("no ref vanished") with its key named by no repair_ref.
        record = st.repair_ref("zz", "main", zz_head, operator="op", reason="r")
        assert record.body["moved_from"] == moved.hex()
        assert st.ref("zz") == zz_head
        report = st.verify()
        assert report.ok, report.problems


def test_verify_and_a_refusal_name_the_ref_a_damaged_key_row_is(url: str) -> None:
    """The row under ``\\xf2un\\0main`` was named only by its hex key (no name encodes to
    it): verify and the refusal of a create beside it now name ``refs/run/main``, the ref
    ``repair_ref`` needs (its value passes the check under a key one bit away)."""
    with cpstore.open(url) as st:
        head, _ = _blind(st, url)
        said = "passes the check under refs/run/main, one bit of its key flipped: the row is"
        whats = [p.what for p in st.verify().problems if p.where == f"refs/{_DAMAGED.hex()}"]
        assert len(whats) == 1 and said in whats[0], whats
        with pytest.raises(IntegrityError) as refused:
            st.recorder("zzz").checkpoint(0, {"x": 1})
        assert said in str(refused.value)
        st.repair_ref("run", "main", head, operator="op", reason="verify named it")
        _whole(st)


def test_a_value_flip_names_no_other_ref(url: str) -> None:
    """Control: a row damaged in its value passes no key one bit away; verify says what
    it said."""
    with cpstore.open(url) as st:
        st.recorder("run").checkpoint(0, {"i": 0})
        value = dict(_refs(st))[_KEY]
        flipped = bytearray(value)
        flipped[3] ^= 0x10
        b = st.backend
        b.write_txn(lambda txn: txn.put(_KEY, bytes(flipped), db=b.db("refs")))
        whats = [p.what for p in st.verify().problems if p.where == "refs/run/main"]
        assert whats == ["ref does not match its check (key or value damaged)"], whats


def test_a_row_that_passes_no_refs_check_is_deleted_by_its_own_name(url: str) -> None:
    """What docs/store.md says is left: a row under a damaged key whose value is damaged
    too passes no ref's check, so no repair finds it; when its key is a name, the repair
    of that name (``--delete``) takes it out, its head kept."""
    with cpstore.open(url) as st:
        head = st.recorder("run").checkpoint(0, {"i": 0})
        st.recorder("zz").checkpoint(0, {"z": 0})
        value = bytearray(dict(_refs(st))[_KEY])
        value[-1] ^= 0x01  # the check's last byte: the value passes no key's check
        moved = ref_key("run", "maio")
        b = st.backend

        def write(txn: object) -> None:
            refs = b.db("refs")
            txn.delete(_KEY, db=refs)  # type: ignore[attr-defined]
            txn.put(moved, bytes(value), db=refs)  # type: ignore[attr-defined]

        b.write_txn(write)
        problems = st.verify().problems
        assert [p.what for p in problems if p.where == "refs/run/maio"] == [
            "ref does not match its check (key or value damaged)"
        ], problems
        record = st.repair_ref("run", "maio", None, operator="op", reason="two flips")
        assert record.body["retained"] == head and head in st.retained()
        assert moved not in dict(_refs(st))
        st.fork("run", "main", head)
        report = st.verify()
        assert report.ok, report.problems
