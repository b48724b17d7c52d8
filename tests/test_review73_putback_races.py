"""review73: a put-back racing creates, deletes and wrong put-backs in other processes.

``r/main`` deleted behind cpstore's back; then, at once: a process forking new branches
of run ``u`` (creates: refused while the table is short, refs70), a process deleting
branches of run ``v`` (``reset_ref`` to None: deletes move the digest's XOR and count
together and are not refused), a process putting back wrong refs over and over, and the
test putting back the exact ref. Every wrong put-back is PutBackMismatchError naming
``r/main`` at its head while the ref is missing and NotFoundError (nothing vanished) once
it is back, never accepted; every delete lands; the creator's forks land only once the
ref is back (each acknowledged fork is there, each refused one is not); one ``ref_repair``
record, keeping nothing; the store verifies. And the XOR a repair keeps naming a ref
still missing (review73's carry) while two processes move their heads: the wrong
put-backs after it are refused (accepted before the carry). Both engines.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_refs70_create_short import _main_vanished
from test_repair72_putback_check import _flip_check, _moving

import cpstore
from cpstore.errors import CpstoreError, IntegrityError, NotFoundError, PutBackMismatchError

DELETES = 12


def _creator(url: str, head: str, start: Any, out: Any) -> None:
    acked: list[str] = []
    refused: list[str] = []
    errors: list[str] = []
    with cpstore.open(url) as st:
        start.wait()
        i = 0
        while len(acked) < 5 and i < 20000:
            name = f"c{i}"
            try:
                st.fork("u", name, head)
                acked.append(name)
            except IntegrityError as exc:
                if "fewer refs" not in str(exc):
                    errors.append(f"{type(exc).__name__}: {exc}")
                    break
                refused.append(name)
            i += 1
    out.put(("creator", acked, refused, errors))


def _deleter(url: str, heads: dict[str, str], start: Any, out: Any) -> None:
    acked: list[str] = []
    errors: list[str] = []
    with cpstore.open(url) as st:
        start.wait()
        for name, head in heads.items():
            try:
                st.reset_ref("v", name, None, expected_old=head, operator="d", reason="drop")
                acked.append(name)
            except CpstoreError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    out.put(("deleter", acked, [], errors))


def _wrong(url: str, heads: tuple[str, str], start: Any, done: Any, out: Any) -> None:
    """Put back ``u/typo<i>`` at ``heads[0]`` until the ref ``r/main`` (at ``heads[1]``)
    is back and the table passes its digest."""
    head, vanished = heads[0], {"run": "r", "branch": "main", "head": heads[1]}
    mismatch = 0
    absent = 0
    errors: list[str] = []
    with cpstore.open(url) as st:
        start.wait()
        i = 0
        while not (done.is_set() and absent) and i < 5000:
            try:
                st.repair_ref("u", f"typo{i}", head, operator="w", reason="race")
                errors.append(f"accepted typo{i}")
                break
            except PutBackMismatchError as exc:
                if exc.expected != vanished:
                    errors.append(f"named {exc.expected}")
                mismatch += 1
            except NotFoundError:
                absent += 1
            i += 1
    out.put(("wrong", [str(mismatch)], [str(absent)], errors))


def test_a_put_back_racing_creates_deletes_and_wrong_put_backs(url: str) -> None:
    with cpstore.open(url) as st:
        u0 = st.recorder("u").checkpoint(0, {"u": 0})
        v0 = st.recorder("v").checkpoint(0, {"v": 0})
        for i in range(DELETES):
            st.fork("v", f"b{i}", v0)
        ids = _main_vanished(url, st)
    vanished = {"run": "r", "branch": "main", "head": ids[2]}
    ctx = multiprocessing.get_context("spawn")
    start, done, out = ctx.Barrier(4), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_creator, args=(url, u0, start, out)),
        ctx.Process(target=_deleter, args=(url, {f"b{i}": v0 for i in range(DELETES)}, start, out)),
        ctx.Process(target=_wrong, args=(url, (u0, ids[2]), start, done, out)),
    ]
    for p in procs:
        p.start()
    try:
        with cpstore.open(url) as st:
            start.wait()
            for i in range(10):  # wrong ones of its own first, among the others' writes
                try:
                    st.repair_ref("r", "main", ids[i % 2], operator="o", reason="wrong")
                except PutBackMismatchError as exc:
                    assert exc.expected == vanished
                else:
                    raise AssertionError("a wrong put-back was accepted")
            record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
            assert record.body["kept"] == [] and record.body["forced"] is False
            done.set()
    finally:
        done.set()
        results = {r[0]: r[1:] for r in (out.get(timeout=300) for _ in procs)}
        for p in procs:
            p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    assert [r[2] for r in results.values() if r[2]] == []
    created, refused, _ = results["creator"]
    assert len(created) == 5  # the forks went on once the ref was back
    assert results["deleter"][0] == [f"b{i}" for i in range(DELETES)]
    assert int(results["wrong"][1][0]) >= 1  # it saw the ref back
    with cpstore.open(url) as st:
        assert st.ref("r") == ids[2]
        branches = st.branches("u")
        assert set(created) <= set(branches) and not set(refused) & set(branches)
        assert set(st.branches("v")) == {"main"}
        assert [r.body["branch"] for r in st.audit_records(kind="ref_repair")] == ["main"]
        assert st.verify().ok


def test_a_carried_difference_racing_moves_in_other_processes(url: str) -> None:
    """r/main vanished and t/main failing its check while two processes move s's and v's
    heads: t repaired at its true head keeps the digest naming r/main (the moves shift
    the recorded XOR and the table's alike, in their own txns), so every wrong put-back
    after it is refused naming r/main at its head and the exact one lands; no move is
    refused and the store verifies."""
    with cpstore.open(url) as st:
        t0 = st.recorder("t").checkpoint(0, {"t": 0})
        st.recorder("v").checkpoint(0, {"v": 0})
        ids = _main_vanished(url, st)
        _flip_check(url, st, b"t\0main")
    vanished = {"run": "r", "branch": "main", "head": ids[2]}
    with _moving(url, "sv") as start, cpstore.open(url) as st:
        start.wait()
        st.repair_ref("t", "main", t0, operator="o", reason="check failed")
        for i in range(20):
            try:
                st.repair_ref(
                    "r", f"b{i}" if i % 2 else "main", ids[i % 2], operator="o", reason="wrong"
                )
            except PutBackMismatchError as exc:
                assert exc.expected == vanished
            else:
                raise AssertionError("a wrong put-back was accepted")
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.body["forced"] is False
    with cpstore.open(url) as st:
        assert st.ref("r") == ids[2] and st.ref("t") == t0
        assert st.verify().ok
