"""holders69: a retained head keeps every hold on it, not only the last one written.

A retained head was one ``meta`` row per checkpoint holding one ``{"run", "branch",
"audit"}``: a second audited move away from the same checkpoint (two branches at one
head, each reset away by its own operator; a repair keeping a vanished fork at a head a
reset retained) overwrote or skipped it, and releasing the first let
``prune(keep_last=1)`` sweep what the second still had a reason to keep. Now each hold
is recorded (v1 map for one, ``[2, holds]`` for more); a checkpoint is a root while any
hold stands; ``release_retained`` names the holder when there are several. Both engines.
"""

from __future__ import annotations

import multiprocessing

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review68_repair_model import _stored

import cpstore
from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_BAD_INPUT, EXIT_OK
from cpstore.errors import NotFoundError, SeveralHoldersError
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store
from cpstore.store.model import AuditRecord


def _two_resets(st: Store) -> tuple[list[str], AuditRecord, AuditRecord]:
    """main at ids[2] and a fork ``exp`` at the same head, each reset away from it by its
    own operator: two holds on ids[2]."""
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
    st.fork("r", "exp", ids[2])
    a = st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="ann", reason="bad run")
    b = st.reset_ref("r", "exp", ids[0], expected_old=ids[2], operator="bob", reason="audit")
    return ids, a, b


def _row(st: Store, cid: str) -> bytes | None:
    with st.backend.read_txn() as txn:
        raw = txn.get(b"retained/" + bytes.fromhex(cid), None, st.backend.db("meta"))
        return None if raw is None else bytes(raw)


def test_two_resets_away_from_one_head_are_both_held(url: str) -> None:
    with cpstore.open(url) as st:
        ids, a, b = _two_resets(st)
        head = st.retained()[ids[2]]
        assert [h["audit"] for h in head["holds"]] == [a.digest, b.digest]
        assert [h["branch"] for h in head["holds"]] == ["main", "exp"]
        assert (head["run"], head["branch"], head["audit"]) == ("r", "main", a.digest)
        st.release_retained_by(a.digest, operator="ann", reason="done")
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])  # bob's hold stands
        assert [h["audit"] for h in st.retained()[ids[2]]["holds"]] == [b.digest]
        [rel] = st.release_retained_by(b.digest, operator="bob", reason="done too")
        assert rel.body["holder"] == b.digest and rel.body["holders_left"] == []
        st.prune(keep_last=1)
        assert not _stored(st, ids[2]) and not _stored(st, ids[1])
        assert st.verify().ok


def test_release_of_a_head_two_records_hold_must_name_one(url: str) -> None:
    with cpstore.open(url) as st:
        ids, a, b = _two_resets(st)
        count = len(list(st.audit_records()))
        with pytest.raises(SeveralHoldersError) as err:
            st.release_retained(ids[2], operator="ann", reason="mine")
        assert err.value.expected == [a.digest, b.digest]
        assert len(list(st.audit_records())) == count  # nothing written
        with pytest.raises(NotFoundError):
            st.release_retained(ids[2], operator="ann", reason="x", holder=ids[0])
        rel = st.release_retained(ids[2], operator="ann", reason="mine", holder=a.digest)
        assert rel.kind == "retained_release" and rel.body["checkpoint"] == ids[2]
        assert rel.body["holder"] == a.digest and rel.body["holders_left"] == [b.digest]
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])
        # One hold left: naming it is optional, as before.
        rel = st.release_retained(ids[2], operator="bob", reason="done")
        assert rel.body["holder"] == b.digest and rel.body["holders_left"] == []
        assert st.retained() == {}
        st.prune(keep_last=1)
        assert not _stored(st, ids[2])


def test_rows_are_v1_for_one_hold_and_v2_for_more(url: str) -> None:
    """One hold is the map every cpstore wrote (an old store's row is read as one hold);
    two are ``[2, [hold, hold]]``; back to one, the map again."""
    with cpstore.open(url) as st:
        ids, a, b = _two_resets(st)
        one = {"audit": a.digest, "branch": "main", "run": "r"}
        two = {"audit": b.digest, "branch": "exp", "run": "r"}
        assert _row(st, ids[2]) == encode_value([2, [one, two]])
        st.release_retained_by(a.digest, operator="o", reason="r")
        assert _row(st, ids[2]) == encode_value(two)


def test_an_old_single_holder_row_is_read_and_released(url: str) -> None:
    """The row an older cpstore wrote (bytes written here directly): one hold, listed,
    released by its record, and a hold added beside it."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "exp", ids[2])
        reset = st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="o", reason="r")
        meta = st.backend.db("meta")
        # MessagePack map of 3, keys sorted by their bytes: run, audit, branch.
        old = bytes.fromhex(
            "83" + "a3" + b"run".hex() + "a1" + b"r".hex()
            + "a5" + b"audit".hex() + "d920" + reset.digest.encode().hex()
            + "a6" + b"branch".hex() + "a4" + b"main".hex()
        )  # fmt: skip
        assert old == encode_value({"run": "r", "branch": "main", "audit": reset.digest})
        key = b"retained/" + bytes.fromhex(ids[2])
        st.backend.write_txn(lambda txn: txn.put(key, old, db=meta))
        assert st.retained()[ids[2]]["holds"] == [
            {"run": "r", "branch": "main", "audit": reset.digest}
        ]
        other = st.reset_ref("r", "exp", None, expected_old=ids[2], operator="p", reason="gone")
        assert [h["audit"] for h in st.retained()[ids[2]]["holds"]] == [
            reset.digest,
            other.digest,
        ]
        st.release_retained_by(reset.digest, operator="o", reason="done")
        st.prune(keep_last=1)
        assert _stored(st, ids[2])
        st.release_retained(ids[2], operator="p", reason="done")
        st.prune(keep_last=1)
        assert not _stored(st, ids[2])
        assert st.verify().ok


def test_verify_checks_every_row_form(url: str) -> None:
    """A v2 row naming a checkpoint not stored does not resolve; a row of neither form is
    malformed, reported, and still a root (prune keeps its lineage)."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="o", reason="r")
        meta = st.backend.db("meta")
        hold = {"audit": "ab" * 16, "branch": "b", "run": "r"}
        lost = "cd" * 16
        bad = encode_value([2, [hold]])  # v2 with one hold: the map is the one-hold form
        two = encode_value([2, [hold, {**hold, "audit": "ef" * 16}]])
        st.backend.write_txn(
            lambda txn: (
                txn.put(b"retained/" + bytes.fromhex(lost), two, db=meta),
                txn.put(b"retained/" + bytes.fromhex(ids[2]), bad, db=meta),
            )
        )
        problems = {(p.what, p.where) for p in st.verify().problems}
        assert ("retained head does not resolve", f"meta/retained/{lost}") in problems
        assert ("retained head row is malformed", f"meta/retained/{ids[2]}") in problems
        assert ("retained head row is malformed", f"meta/retained/{lost}") not in problems
        st.backend.write_txn(lambda txn: txn.delete(b"retained/" + bytes.fromhex(lost), db=meta))
        st.prune(keep_last=1)
        assert _stored(st, ids[2]) and _stored(st, ids[1])
        # Released whole, as the one thing it holds, with a record saying no holder.
        rel = st.release_retained(ids[2], operator="o", reason="malformed")
        assert rel.body["holder"] is None and st.retained() == {}


def test_the_cli_lists_every_holder_and_releases_one(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cpstore.open(url) as st:
        ids, a, b = _two_resets(st)
    assert main(["retained", "--store", url]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"{ids[2]}  r@main  (kept by audit {a.digest})" in out
    assert f"{ids[2]}  r@exp  (kept by audit {b.digest})" in out
    assert "1 retained head(s), 2 hold(s)" in out
    base = ["retained", "--store", url, "--release", ids[2], "--operator", "o", "--reason", "r"]
    assert main(base) == EXIT_BAD_INPUT
    assert a.digest in capsys.readouterr().err
    assert main(["retained", "--store", url, "--holder", b.digest]) == EXIT_BAD_INPUT
    assert main([*base, "--holder", b.digest]) == EXIT_OK
    assert f"still kept by audit {a.digest}" in capsys.readouterr().out
    with cpstore.open(url) as st:
        assert [h["audit"] for h in st.retained()[ids[2]]["holds"]] == [a.digest]


def _hold_and_maybe_release(url: str, n: int, head: str) -> tuple[str, bool]:
    """Fork a branch at ``head``, reset it away (a hold on ``head``); every third also
    releases its own hold. Returns (the reset's digest, released)."""
    with cpstore.open(url) as st:
        branch = f"b{n}"
        st.fork("r", branch, head)
        rec = st.reset_ref("r", branch, None, expected_old=head, operator=branch, reason="race")
        released = n % 3 == 0
        if released:
            st.release_retained(head, operator=branch, reason="race", holder=rec.digest)
        return rec.digest, released


def test_holds_added_and_released_by_racing_processes_are_never_lost(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        first = st.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="o", reason="r")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        got = pool.starmap(_hold_and_maybe_release, [(url, n, ids[2]) for n in range(8)])
    with cpstore.open(url) as st:
        standing = {first.digest} | {digest for digest, released in got if not released}
        assert {h["audit"] for h in st.retained()[ids[2]]["holds"]} == standing
        assert st.verify().ok
        for digest in sorted(standing):
            st.prune(keep_last=1)
            assert _stored(st, ids[2]) and _stored(st, ids[1])
            st.release_retained_by(digest, operator="o", reason="one by one")
        st.prune(keep_last=1)
        assert not _stored(st, ids[2])


def test_a_malformed_row_is_listed_not_a_crash(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cpstore retained`` and a gc of a run with no refs read every row; a malformed one
    was ``{}`` and both ended in KeyError (exit 1)."""
    with cpstore.open(url) as st:
        ids = [st.recorder("r").checkpoint(0, {"i": 0})]
        meta = st.backend.db("meta")
        key = b"retained/" + bytes.fromhex(ids[0])
        st.backend.write_txn(lambda txn: txn.put(key, encode_value([9]), db=meta))
        with pytest.raises(NotFoundError):
            st.gc(keep_last=1, run_id="gone")
    capsys.readouterr()
    assert main(["retained", "--store", url]) == EXIT_OK
    assert f"{ids[0]}  (its retained row is malformed" in capsys.readouterr().out
