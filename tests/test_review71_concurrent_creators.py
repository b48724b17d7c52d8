"""review71: refs70's count check refuses no create on an intact store while creators in
several processes race, on both engines.

Each create counts the refs table against ``meta/refs_digest`` in its own write txn
(LMDB: one writer; PostgreSQL: the advisory writer lock, READ COMMITTED, ``count(*)``
after the txn's own buffered writes). Three processes each start new runs (a recorder's
first checkpoint), fork branches and delete some of them again (``reset_ref`` to None),
while a fourth moves existing branches: a false refusal (a count taken before another
writer's commit, or before this txn's own earlier create or delete) would be an
IntegrityError naming ``meta/refs_digest``. Every create is acknowledged, the table holds
exactly the refs acknowledged and not deleted, and ``verify()`` passes.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore

_ROUNDS = 12


def _creator(url: str, who: int, start: Any, out: Any) -> None:
    made: dict[str, dict[str, str]] = {}
    errors: list[str] = []
    with cpstore.open(url) as st:
        start.wait(60)
        for i in range(_ROUNDS):
            run = f"p{who}-{i}"
            try:
                head = st.recorder(run).checkpoint(0, {"who": who, "i": i})
                st.fork(run, "f", head)
                st.fork(run, "g", head)
                st.reset_ref(run, "g", None, expected_old=head, operator="o", reason="drop")
                made[run] = {"main": head, "f": head}
            except Exception as exc:  # reported to the parent
                errors.append(f"{type(exc).__name__}: {exc}")
    out.put((made, errors))


def _mover(url: str, start: Any, out: Any) -> None:
    errors: list[str] = []
    with cpstore.open(url) as st:
        rec = st.recorder("base")
        start.wait(60)
        for i in range(_ROUNDS * 2):
            try:
                rec.checkpoint(i + 1, {"i": i})
            except Exception as exc:  # reported to the parent
                errors.append(f"{type(exc).__name__}: {exc}")
        head = st.branches("base")["main"]
    out.put(({"base": {"main": head}}, errors))


def test_concurrent_creators_are_never_refused(url: str) -> None:
    with cpstore.open(url) as st:
        st.recorder("base").checkpoint(0, {"i": -1})
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_creator, args=(url, w, start, out)) for w in range(3)]
    procs.append(ctx.Process(target=_mover, args=(url, start, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    made: dict[str, dict[str, str]] = {}
    for refs, errors in results:
        assert errors == []
        made.update(refs)
    assert len(made) == 3 * _ROUNDS + 1
    with cpstore.open(url) as st:
        assert {run: st.branches(run) for run in made} == made
        assert sorted(st.runs()) == sorted(made)
        assert st.verify().ok


def test_one_txn_creating_and_deleting_refs_counts_its_own_writes(url: str) -> None:
    """Creates and deletes in one write txn (as a batch or a group commit holds them):
    each create's count sees the txn's own earlier creates and deletes (PostgreSQL flushes
    its buffered writes before the ``count(*)``), so none is refused and the digest ends
    matching the table."""
    from cpstore.store.refs import SET, delete_ref, read_ref, write_ref  # noqa: PLC0415

    with cpstore.open(url) as st:
        heads = [st.recorder(f"r{i}").checkpoint(0, {"i": i}) for i in range(2)]
        b = st.backend
        cid = bytes.fromhex(heads[0])

        def batch(txn: Any) -> None:
            for name in ("a", "b"):
                key = f"r0\0{name}".encode()
                write_ref(txn, b.dbs, key, cid, SET, old=read_ref(txn, b.dbs, key, layout=b.layout))
            delete_ref(txn, b.dbs, b"r0\0a")
            delete_ref(txn, b.dbs, b"r1\0main")
            for name in ("c", "a"):
                key = f"r0\0{name}".encode()
                write_ref(txn, b.dbs, key, cid, SET, old=None)

        b.write_txn(batch)
        assert st.branches("r0") == {"main": heads[0], "a": heads[0], "b": heads[0], "c": heads[0]}
        assert st.branches("r1") == {}
        assert st.verify().ok
