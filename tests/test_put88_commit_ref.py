"""put88: ``commit_ref``'s move with the old ref's hash given (every commit's) and a well
formed ``meta/refs_digest`` row writes in one frame exactly what its general path writes
(the same ref value, the same row: XOR moved, count kept), for any key, ids, origins and
row; a missing, short or view-typed row still takes the general path and its checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpstore.errors import IntegrityError
from cpstore.store import refs
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, SET, commit_ref, pack_ref

_id = st.binary(min_size=16, max_size=16)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    e = lmdb.open(str(tmp_path_factory.mktemp("refs")), max_dbs=4, map_size=1 << 24)
    yield e
    e.close()


def _after(env: Any, key: bytes, cid: bytes, old: tuple[Any, ...], row: bytes | None) -> Any:
    """(ref value, digest row, _WRITTEN) after commit_ref in a write txn that is then undone."""
    dbs = {"refs": env.open_db(b"refs"), "meta": env.open_db(b"meta")}
    txn = env.begin(None, None, True, False)  # the commit's txn: bytes copies
    try:
        txn.put(key, pack_ref(key, old[0], old[1]), db=dbs["refs"])
        if row is not None:
            txn.put(REFS_DIGEST_KEY, row, db=dbs["meta"])
        commit_ref(txn, dbs, key, cid, RECORDED, old=old)
        return (
            txn.get(key, None, dbs["refs"]),
            txn.get(REFS_DIGEST_KEY, None, dbs["meta"]),
            refs._WRITTEN[0],
        )
    finally:
        txn.abort()


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(min_size=1, max_size=40),
    cid=_id,
    old_cid=_id,
    old_origin=st.sampled_from([RECORDED, SET]),
    acc=_id,
    count=st.integers(0, 2**64 - 1),
)
def test_the_move_writes_what_the_general_path_writes(
    env: Any, *, key: bytes, cid: bytes, old_cid: bytes, old_origin: int, acc: bytes, count: int
) -> None:
    row = acc + count.to_bytes(8, "little")
    old_hash = refs.stored_hash(key, old_cid, old_origin)
    fast = _after(env, key, cid, (old_cid, old_origin, old_hash), row)
    general = _after(env, key, cid, (old_cid, old_origin), row)  # no hash given: general
    assert fast == general
    x = int.from_bytes(acc, "little") ^ int.from_bytes(old_hash, "little")
    x ^= int.from_bytes(refs.stored_hash(key, cid, RECORDED), "little")
    assert fast[1] == x.to_bytes(16, "little") + row[16:]


@pytest.mark.parametrize("row", [None, b"", bytes(23), bytes(25)])
def test_an_odd_row_takes_the_general_path(env: Any, row: bytes | None) -> None:
    key, cid, old = b"run\x00main", bytes(range(16)), bytes(16)
    old3 = (old, RECORDED, refs.stored_hash(key, old, RECORDED))
    if row is None:  # a move with the row missing: written back? the general path says
        assert _after(env, key, cid, old3, row) == _after(env, key, cid, old3[:2], row)
        return
    with pytest.raises(IntegrityError, match="refs digest is malformed"):
        _after(env, key, cid, old3, row)


def test_the_commit_path_writes_the_ref_and_its_hash(env: Any) -> None:
    key, cid, old = b"r\x00b", bytes(range(16)), bytes(16)
    old3 = (old, RECORDED, refs.stored_hash(key, old, RECORDED))
    row = bytes(16) + (3).to_bytes(8, "little")
    value, got_row, written = _after(env, key, cid, old3, row)
    assert value == pack_ref(key, cid, RECORDED)
    assert got_row[16:] == row[16:]
    assert written == (key, value, refs.stored_hash(key, cid, RECORDED))
