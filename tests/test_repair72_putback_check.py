"""repair72: a ref put back must be the ref that vanished, when the digest says which.

A ref row deleted behind cpstore's back leaves the refs table one ref short of the count
``meta/refs_digest`` records, and the digest's XOR difference is that ref's full hash.
``repair_ref`` putting back a ref under another name (``repair_ref("s", "typo", ...)``)
or at another head filled the count, lifted refs70's refusal of every create and
re-derived the digest: a new recorder on the vanished ref's run then started a new root
(the runtime saw its run as new) with ``verify()`` clean (review71's "Left (policy)").
Now such a put-back is PutBackMismatchError (an IntegrityError) naming the vanished ref
(run, branch, head) when a stored checkpoint and branch name give it, and writes
nothing; ``force=True`` accepts it, recorded as ``forced`` in the ``ref_repair`` record.
Where the difference is not one ref's (several refs short, a malformed or missing
digest, a ref failing its check, a zero difference) nothing is checked, as before.
Both engines; the damage is done by another process (LMDB) or connection (PostgreSQL).
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref
from test_refs70_create_short import _main_vanished, _snapshot

import cpstore
from cpstore.errors import (
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    PutBackMismatchError,
)
from cpstore.store.facade import Store
from cpstore.store.pg_open import parse_url
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, SET, pack_ref


def _audits(st: Store) -> list[str]:
    return [r.digest for r in st.audit_records()]


def _unchanged(st: Store, before: tuple[Any, ...], audits: list[str]) -> None:
    """Nothing written: refs, digest, checkpoints, objects, the audit log; the run whose
    head vanished is still refused a new root (refs70)."""
    assert _snapshot(st) == before and _audits(st) == audits
    assert st.branches("r") == {}
    with pytest.raises(IntegrityError, match="fewer refs"):
        st.recorder("r").checkpoint(9, {"new": "root"})


def test_a_put_back_under_a_name_that_never_existed_is_refused(url: str) -> None:
    """The hole: ``repair_ref("s", "typo", head_of_s)`` while r/main is gone."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        before, audits = _snapshot(st), _audits(st)
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("s", "typo", s0, operator="o", reason="typo")
        exc = info.value
        assert isinstance(exc, IntegrityError) and exc.where == "refs/s/typo"
        assert exc.expected == {"run": "r", "branch": "main", "head": ids[2]}
        assert exc.got == {"run": "s", "branch": "typo", "head": s0}
        assert "refs/r/main" in str(exc) and ids[2] in str(exc) and "force=True" in str(exc)
        _unchanged(st, before, audits)
        # the operator repairs exactly what the error names: the run goes on from its head
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["forced"] is False and record.body["kept"] == []
        nxt = st.recorder("r").checkpoint(3, {"i": 3})
        assert st.manifest(nxt).parent == ids[2]
        assert st.verify().ok


@pytest.mark.parametrize("how", ["older_head", "root", "other_branch_at_head"])
def test_a_wrong_head_or_name_in_the_right_run_is_refused_naming_the_true_head(
    url: str, how: str
) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        before, audits = _snapshot(st), _audits(st)
        branch, head = {
            "older_head": ("main", ids[1]),
            "root": ("main", ids[0]),
            "other_branch_at_head": ("b", ids[2]),
        }[how]
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("r", branch, head, operator="o", reason="wrong")
        assert info.value.expected == {"run": "r", "branch": "main", "head": ids[2]}
        assert info.value.got == {"run": "r", "branch": branch, "head": head}
        _unchanged(st, before, audits)


def test_a_vanished_fork_no_manifest_names_is_refused_unnamed_and_put_back_by_name(
    url: str,
) -> None:
    """A fork never recorded on has a name no manifest holds: the search cannot name it
    (``expected`` all None), but the operator who knows the name puts it back."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "exp", ids[1])
        _raw_ref(url, b"r\0exp", None)
        before, audits = _snapshot(st), _audits(st)
        with pytest.raises(PutBackMismatchError, match="no stored checkpoint") as info:
            st.repair_ref("r", "other", ids[1], operator="o", reason="guess")
        assert info.value.expected == {"run": None, "branch": None, "head": None}
        assert _snapshot(st) == before and _audits(st) == audits
        record = st.repair_ref("r", "exp", ids[1], operator="o", reason="put back")
        assert record.body["forced"] is False
        assert st.ref("r", "exp") == ids[1] and st.verify().ok


def test_force_accepts_another_put_back_and_the_record_says_so(url: str) -> None:
    """The old behaviour on request: the refusal lifts, the vanished head is kept as a
    retained head, and the audit record carries ``forced``."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        record = st.repair_ref("s", "typo", s0, operator="o", reason="accept", force=True)
        assert record.body["forced"] is True and record.body["damaged"] is None
        assert ids[2] in record.body["kept"]  # with every tip: the XOR names no one ref
        [logged] = st.audit_records(kind="ref_repair")
        assert logged.digest == record.digest and logged.body["forced"] is True
        assert st.ref("s", "typo") == s0 and st.verify().ok
        assert st.prune(keep_last=1) == 0  # the vanished history is held
        st.recorder("r").checkpoint(0, {"new": "root"})  # accepted: the operator's call


def test_force_on_the_exact_put_back_changes_nothing_but_the_record(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        good = _digest(st)
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="x", force=True)
        assert record.body["forced"] is True and record.body["kept"] == []
        assert _digest(st) == good and st.verify().ok


def test_force_must_be_a_bool(url: str) -> None:
    """What the record carries is what was meant: a truthy string is no override."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        with pytest.raises(InvalidInputError, match="force"):
            st.repair_ref("r", "main", ids[2], operator="o", reason="x", force="no")  # type: ignore[arg-type]
        assert list(st.audit_records()) == []


def _flip_check(url: str, st: Store, key: bytes) -> None:
    """Ref ``key``'s row made to fail its check (its true hash unknown)."""
    _raw_ref(url, key, _raw_value(st, key)[:-1] + bytes([_raw_value(st, key)[-1] ^ 1]))


def _raw_value(st: Store, key: bytes) -> bytes:
    with st.backend.read_txn() as txn:
        return bytes(txn.get(key, None, st.backend.db("refs")))


@pytest.mark.parametrize(
    "damage", ["two_vanished", "malformed_digest", "missing_digest", "damaged_ref", "rederived"]
)
def test_where_the_difference_names_no_one_ref_a_put_back_is_not_checked(
    url: str, damage: str
) -> None:
    """Several refs short, a malformed or missing digest, a ref failing its check beside
    the vanished one, or a digest a repair of another ref re-derived (its XOR then holds,
    only the count is short): the difference is not the vanished ref's hash, so the
    put-back goes on as before (the true head kept as a retained head)."""
    with cpstore.open(url) as st:
        t0 = st.recorder("t").checkpoint(0, {"t": 0})
        if damage == "two_vanished":
            st.fork("t", "bare", t0)  # never recorded on: its name is in no checkpoint
        ids = _main_vanished(url, st)
        if damage == "two_vanished":
            # The other vanished ref unnameable: no two refs give the difference, so
            # the put-back may be right and is not refused (two nameable ones are
            # checked: tests/test_two_vanished_putback.py).
            _raw_ref(url, b"t\0bare", None)
        elif damage == "malformed_digest":
            _raw_ref(url, REFS_DIGEST_KEY, _digest(st)[:-1], "meta")
        elif damage == "missing_digest":
            _raw_ref(url, REFS_DIGEST_KEY, None, "meta")
        else:
            _flip_check(url, st, b"t\0main")
            if damage == "rederived":
                st.repair_ref("t", "main", None, operator="o", reason="check failed")
        record = st.repair_ref("r", "main", ids[1], operator="o", reason="not checked")
        assert record.body["forced"] is False
        assert st.ref("r") == ids[1]
        assert ids[2] in record.body["kept"]  # the true head is kept, not lost


def _rolled_back_beside(url: str, st: Store) -> tuple[list[str], str]:
    """r/main vanished, and s/main put back to its root outside cpstore with a true check
    (a ref changed beside it): the digest's difference is both. (r's ids, s's true head)"""
    ids = _main_vanished(url, st)
    s0 = st.ref("s")
    s1 = st.recorder("s").checkpoint(1, {"s": 1})
    assert s0 is not None
    _raw_ref(url, b"s\0main", pack_ref(b"s\0main", bytes.fromhex(s0), RECORDED))
    return ids, s1


def test_the_exact_put_back_beside_a_ref_changed_outside_cpstore_is_accepted(url: str) -> None:
    """The put-back and s's true head give the difference together: accepted, unforced,
    and s's true head kept (as a changed ref's is)."""
    with cpstore.open(url) as st:
        ids, s1 = _rolled_back_beside(url, st)
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["forced"] is False and record.body["kept"] == [s1]
        assert st.ref("r") == ids[2]


def test_a_wrong_put_back_beside_a_ref_changed_outside_cpstore_is_refused_unnamed(
    url: str,
) -> None:
    """The difference is two refs' (the vanished one and the changed one), which the
    search cannot split: refused, naming nobody; ``force`` accepts it, keeping both
    true heads."""
    with cpstore.open(url) as st:
        ids, s1 = _rolled_back_beside(url, st)
        before, audits = _snapshot(st), _audits(st)
        with pytest.raises(PutBackMismatchError, match="other damage") as info:
            st.repair_ref("r", "main", ids[1], operator="o", reason="wrong")
        assert info.value.expected == {"run": None, "branch": None, "head": None}
        assert _snapshot(st) == before and _audits(st) == audits
        record = st.repair_ref("r", "main", ids[1], operator="o", reason="x", force=True)
        assert record.body["forced"] is True
        assert {ids[2], s1} <= set(record.body["kept"])


def test_a_table_longer_than_its_count_is_not_checked(url: str) -> None:
    """A ref added behind cpstore's back: no ref is short, nothing to compare with; an
    absent ref put back under another name goes on as before."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        key = b"r\0extra"
        value = pack_ref(key, bytes.fromhex(ids[0]), SET)
        if url.startswith("postgresql"):
            with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
                conn.execute(
                    f'INSERT INTO "{parse_url(url).schema}"."refs" (k, v) VALUES (%s, %s)',
                    (key, value),
                )
        else:
            _raw_ref(url, key, value)
        record = st.repair_ref("r", "b", ids[0], operator="o", reason="not short")
        assert record.body["forced"] is False and st.ref("r", "b") == ids[0]


def test_a_refused_put_back_is_not_found_first_when_nothing_vanished(url: str) -> None:
    """The digest holds: NotFoundError as before (fork makes a branch), not the check."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        with pytest.raises(NotFoundError, match="fork"):
            st.repair_ref("r", "typo", ids[1], operator="o", reason="no")


# -- a put-back racing ordinary moves in other processes ------------------------------


def _mover(url: str, run: str, start: Any, stop: Any, out: Any) -> None:
    """Checkpoint on ``run``'s main (a move: the digest's XOR changes) until told to stop."""
    heads: list[str] = []
    errors: list[str] = []
    with cpstore.open(url) as st:
        rec = st.recorder(run)
        start.wait()
        i = 1
        while not stop.is_set() and i < 5000:
            try:
                heads.append(rec.checkpoint(i, {run: i}))
            except CpstoreError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                break
            i += 1
    out.put((heads, errors))


@contextlib.contextmanager
def _moving(url: str, runs: str) -> Iterator[Any]:
    """A spawned process per run of ``runs`` moving its head (:func:`_mover`) until the
    block ends; yields the barrier the block waits on with them. After: none failed,
    every one moved its head."""
    ctx = multiprocessing.get_context("spawn")
    start, stop, out = ctx.Barrier(len(runs) + 1), ctx.Event(), ctx.Queue()
    movers = [ctx.Process(target=_mover, args=(url, run, start, stop, out)) for run in runs]
    for p in movers:
        p.start()
    try:
        yield start
    finally:
        stop.set()
        results = [out.get(timeout=300) for _ in movers]
        for p in movers:
            p.join(120)
    assert all(p.exitcode == 0 for p in movers)
    assert [e for _, e in results if e] == []
    assert all(h for h, _ in results)


def test_put_backs_racing_moves_in_other_processes(url: str) -> None:
    """Two processes move their runs' heads while the test puts r/main back: every wrong
    put-back is refused naming r/main at its head, the exact one is accepted, no move is
    refused, and the store verifies. The repair reads the digest and the table in its
    own write txn (a move between two reads would shift the XOR difference)."""
    with cpstore.open(url) as st:
        for run in ("u", "v"):
            st.recorder(run).checkpoint(0, {run: 0})
        ids = _main_vanished(url, st)
        u0 = st.ref("u")
        assert u0 is not None
    with _moving(url, "sv") as start, cpstore.open(url) as st:
        start.wait()
        for i in range(40):
            with pytest.raises(PutBackMismatchError) as info:
                st.repair_ref("u", f"typo{i}", u0, operator="o", reason="race")
            assert info.value.expected == {"run": "r", "branch": "main", "head": ids[2]}
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["kept"] == []
    with cpstore.open(url) as st:
        assert st.ref("r") == ids[2] and st.verify().ok
        assert len(list(st.audit_records(kind="ref_repair"))) == 1
