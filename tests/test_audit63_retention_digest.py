"""Retention never sweeps by a refs table that fails its digest (audit63).

A ref put back to an older head outside cpstore (a restored page, a hand edit, a
stale row copied in) keeps its own check (key, id and origin all true), so only the
refs digest in ``meta`` tells it from a head cpstore set. ``verify`` reported it, but
``prune``/``gc``/``delete_run`` marked from it and swept the acknowledged checkpoints
the true head reached. Now the sweep checks the table against its digest in its own
txn and stops with IntegrityError. The damage is done by another process (LMDB: a raw
lmdb handle; PostgreSQL: an UPDATE on another connection) under an open store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store.facade import Store
from cpstore.store.pg_open import parse_url
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, pack_ref

ROOT = Path(__file__).resolve().parent.parent

_LMDB_PUT = """
import sys, lmdb
path, table, key = sys.argv[1], sys.argv[4].encode(), bytes.fromhex(sys.argv[2])
value = None if sys.argv[3] == "-" else bytes.fromhex(sys.argv[3])
env = lmdb.open(path, max_dbs=64, subdir=True, create=False)
db = env.open_db(table, create=False)
with env.begin(write=True, db=db) as txn:
    txn.put(key, value) if value is not None else txn.delete(key)
env.close()
"""


def _raw_ref(url: str, key: bytes, value: bytes | None, table: str = "refs") -> None:
    """Put (or delete) a row behind cpstore's back, from another process/connection."""
    if url.startswith("postgresql"):
        schema = parse_url(url).schema
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
            if value is None:
                conn.execute(f'DELETE FROM "{schema}"."{table}" WHERE k = %s', (key,))
            else:
                conn.execute(f'UPDATE "{schema}"."{table}" SET v = %s WHERE k = %s', (value, key))
        return
    hexed = "-" if value is None else value.hex()
    subprocess.run(
        [sys.executable, "-c", _LMDB_PUT, url, key.hex(), hexed, table],
        check=True,
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def _sweeps(st: Store) -> dict[str, Callable[[], Any]]:
    return {
        "prune": lambda: st.prune(keep_last=1),
        "prune_other_run": lambda: st.prune(keep_last=1, run_id="s"),
        "gc": lambda: st.gc(keep_last=1),
        "gc_dry_run": lambda: st.gc(keep_last=1, dry_run=True),
        "delete_run": lambda: st.delete_run("s"),
    }


def _readable(st: Store, ids: list[str]) -> None:
    for cid in ids:
        with st.read(cid) as cp:
            cp.state()


def test_a_ref_put_back_to_an_older_head_stops_retention(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i, "pad": b"x" * 64}) for i in range(4)]
        st.recorder("s").checkpoint(0, {"s": 1})
        key = b"r\0main"
        _raw_ref(url, key, pack_ref(key, bytes.fromhex(ids[0]), RECORDED))  # a true check
        assert st.ref("r") == ids[0]  # the ref's own check holds
        for name, sweep in _sweeps(st).items():
            with pytest.raises(IntegrityError) as info:
                sweep()
                pytest.fail(f"{name} swept by a ref changed outside cpstore")
            assert info.value.where == "meta/refs_digest"
        _readable(st, ids)  # every acknowledged checkpoint is still stored
        whats = [p.what for p in st.verify().problems]
        assert whats == ["refs table does not match its digest: a ref was changed outside cpstore"]


def test_a_ref_deleted_outside_cpstore_stops_retention(url: str) -> None:
    """A vanished ref: its run's history would look unreachable and be swept."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        with pytest.raises(IntegrityError):
            st.prune(keep_last=1)
        _readable(st, ids)


def test_an_intact_store_still_sweeps(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "b", ids[0])
        st.reset_ref("r", "b", None, expected_old=ids[0], operator="o", reason="x")
        st.release_retained(ids[0], operator="o", reason="x")
        assert st.prune(keep_last=1) == 2
        st.recorder("s").checkpoint(0, {"s": 1})
        assert st.delete_run("s") == 1
        assert st.verify().ok


# -- a damaged refs digest has a repair path ---------------------------------------


def _digest(st: Store) -> bytes:
    with st.backend.read_txn() as txn:
        return bytes(txn.get(REFS_DIGEST_KEY, None, st.backend.db("meta")))


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_damaged_refs_digest_is_repaired_with_repair_ref(url: str, damage: str) -> None:
    """A flipped digest stops retention, a truncated one every ref move; the refs all
    pass their checks, so repair_ref refused them (ConflictError) and nothing could
    clear the damage. It now re-derives the digest, audited, and both run again."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        other = st.recorder("s").checkpoint(0, {"s": 1})
        with pytest.raises(ConflictError):
            st.repair_ref("r", "main", ids[2], operator="o", reason="intact")
        good = _digest(st)
        bad = bytes([good[0] ^ 1]) + good[1:] if damage == "flipped" else good[:-1]
        _raw_ref(url, REFS_DIGEST_KEY, bad, "meta")
        with pytest.raises(IntegrityError):
            st.prune(keep_last=1)
        if damage == "truncated":
            with pytest.raises(IntegrityError):
                rec.checkpoint(3, {"i": 3})
        assert not st.verify().ok
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="digest damaged")
        assert record.kind == "ref_repair" and record.body["retained"] is None
        assert _digest(st) == good
        assert st.verify().ok
        assert st.ref("r") == ids[2]
        # The damaged digest names no ref: every tip is kept (review68); released here.
        assert record.body["kept"] == sorted([ids[2], other])
        for cid in record.body["kept"]:
            st.release_retained(cid, operator="o", reason="the digest was the damage")
        rec = st.recorder("r")
        rec.checkpoint(3, {"i": 3})
        assert st.prune(keep_last=1) == 3
        assert st.verify().ok
