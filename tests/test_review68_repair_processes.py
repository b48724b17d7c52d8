"""review68: refs repairs racing checkpoint writers in other processes lose nothing.

Three processes record on their own runs while a fourth, over and over, damages the
refs table behind the store's back (deletes run r's fork ref, or flips a digest bit)
and repairs it through run s. Every repair's scan and re-derived digest share one
write txn with its change, so a writer's ref move between the damage and the repair is
neither lost from the digest nor left unkept: afterwards every acknowledged checkpoint
a writer's branch holds, and r's history, survive ``prune(keep_last=1)``; ``verify`` is
clean. And four processes clearing one damage through four branches at once: one
repair lands, the rest are refused with nothing written. On both engines.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.errors import ConflictError, NotFoundError
from cpstore.store.refs import REFS_DIGEST_KEY

ROUNDS = 6


def _writer(url: str, run: str) -> list[str]:
    """Moves of ``run``'s main (made before the race: since refs70 a run's first
    checkpoint, a create, is refused while a deleted fork ref stands)."""
    with cpstore.open(url) as st:
        rec = st.recorder(run)
        return [rec.checkpoint(i, {"w": run, "i": i}) for i in range(1, 13)]


def _repairer(url: str, fork_head: str) -> list[list[str]]:
    kept: list[list[str]] = []
    with cpstore.open(url) as st:
        meta, refs = st.backend.db("meta"), st.backend.db("refs")
        for i in range(ROUNDS):

            def damage(txn: Any, i: int = i) -> None:
                if i % 2:
                    good = bytes(txn.get(REFS_DIGEST_KEY, db=meta))
                    txn.put(REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], db=meta)
                else:
                    txn.delete(b"r\0exp", db=refs)

            st.backend.write_txn(damage)
            try:
                record = st.repair_ref(
                    "s", "main", st.ref("s"), operator="p", reason="race", force=True
                )
            except (ConflictError, NotFoundError):
                continue
            kept.append(record.body["kept"])
            if not i % 2:  # the fork is put back (a name nothing else holds: every tip kept)
                st.fork("r", "exp", fork_head)
            if record.body["kept"]:  # this repair's holds only (holders69)
                st.release_retained_by(record.digest, operator="p", reason="put back")
    return kept


def test_repairs_racing_writers_in_other_processes_lose_nothing(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "exp", ids[1])
        st.recorder("s").checkpoint(0, {"s": 0})
        for i in range(3):
            st.recorder(f"w{i}").checkpoint(0, {"w": f"w{i}", "i": 0})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        writers = [pool.apply_async(_writer, (url, f"w{i}")) for i in range(3)]
        repairs = pool.apply_async(_repairer, (url, ids[1]))
        acked = [w.get(timeout=300) for w in writers]
        kept = repairs.get(timeout=300)
    assert len(kept) == ROUNDS  # every damage was repaired, none refused
    for i in range(0, ROUNDS, 2):
        assert ids[2] in kept[i]  # the vanished fork's head, under main's head
    with cpstore.open(url) as st:
        assert st.verify().ok
        assert len(list(st.audit_records(kind="ref_repair"))) == ROUNDS
        for cid, head in st.retained().items():  # a flipped digest keeps every tip
            for hold in head["holds"]:  # each hold, named (holders69)
                st.release_retained(
                    cid, operator="o", reason="the digest was the damage", holder=hold["audit"]
                )
        st.prune(keep_last=1)
        assert st.ref("r", "exp") == ids[1] and st.ref("r") == ids[2]
        for i, got in enumerate(acked):
            assert st.ref(f"w{i}") == got[-1]
            st.manifest(got[-1])
        st.manifest(ids[1])
        st.manifest(ids[2])
        assert st.verify().ok


def _digest_repair(url: str, run: str) -> bool:
    with cpstore.open(url) as st:
        try:
            st.repair_ref(run, "main", st.ref(run), operator=run, reason="race", force=True)
        except (ConflictError, NotFoundError):
            return False
        return True


def test_digest_repairs_through_different_branches_at_once_one_wins(url: str) -> None:
    """Four processes clear the same damage (a vanished fork) through four branches at
    once: one repair lands, with what it keeps; the others find the table whole and are
    refused with nothing written."""
    runs = ["r", "s", "t", "u"]
    with cpstore.open(url) as st:
        heads = {}
        for run in runs:
            rec = st.recorder(run)
            heads[run] = [rec.checkpoint(i, {"run": run, "i": i}) for i in range(3)]
        st.fork("r", "exp", heads["r"][1])
        audit = len(list(st.audit_records()))
        refs = st.backend.db("refs")
        st.backend.write_txn(lambda txn: txn.delete(b"r\0exp", db=refs))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        wins = pool.starmap(_digest_repair, [(url, run) for run in runs])
    assert sum(wins) == 1
    with cpstore.open(url) as st:
        records = list(st.audit_records())
        assert len(records) == audit + 1 and records[-1].kind == "ref_repair"
        assert heads["r"][2] in records[-1].body["kept"]  # every tip: the fork's under it
        assert st.verify().ok
        st.prune(keep_last=1)
        st.manifest(heads["r"][1])
