"""trim79's read-path trims pass py-lmdb's arguments positionally instead of by keyword
(``env.begin(None, None, False, buffers)`` for ``env.begin(buffers=...)`` in
``EnvTxns.begin_read``; ``txn.get(key, None, db)`` for ``txn.get(key, db=db)`` in
``lg_index.get``): py-lmdb parses a keyword ~1k instructions slower. Differential: the
old and the new expression give the same txn kind and the same answers on arbitrary keys
and values, present and missing; and a store read through the changed begin still hashes
every part (a damaged part is IntegrityError, as before).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stored import raw_get, raw_put

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store import lg_index

_KEYS = st.binary(min_size=1, max_size=64)
_ITEMS = st.dictionaries(_KEYS, st.binary(max_size=300), max_size=20)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    e = lmdb.open(str(tmp_path_factory.mktemp("env")), max_dbs=2, map_size=1 << 24)
    yield e
    e.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=_ITEMS, probes=st.lists(_KEYS, max_size=10), buffers=st.booleans())
def test_positional_begin_and_get_answer_as_the_keyword_forms(
    env: Any, items: dict[bytes, bytes], probes: list[bytes], buffers: bool
) -> None:
    db = env.open_db(b"t")
    with env.begin(db, None, True) as w:
        w.drop(db, False)
        for k, v in items.items():
            w.put(k, v, True, True, False, db)
    old_txn = env.begin(buffers=buffers)
    new_txn = env.begin(None, None, False, buffers)  # EnvTxns.begin_read's form
    try:
        for key in [*items, *probes]:
            old = old_txn.get(key, db=db)
            new = new_txn.get(key, None, db)  # lg_index.get's form
            assert type(old) is type(new)
            assert (None if old is None else bytes(old)) == (None if new is None else bytes(new))
            if new is not None:
                assert bytes(new) == items[key]
                assert (type(new) is memoryview) is buffers  # the same buffers mode
            assert lg_index.get(new_txn, db, key) == (None if old is None else bytes(old))
        with pytest.raises(lmdb.ReadonlyError):  # a read txn, as before
            new_txn.put(b"k", b"v", True, True, False, db)
    finally:
        old_txn.abort()
        new_txn.abort()


def test_a_damaged_part_is_still_refused_on_read(tmp_path: Path) -> None:
    """Read through the positional begin, a part whose bytes were changed fails its hash,
    by id and by latest (as tests/test_store_read_fast_paths.py damages it)."""
    with cpstore.open(tmp_path / "s") as store:
        cid = store.recorder("t").checkpoint(0, {"a": "x" * 200, "b": "y" * 200})
        with store.read(cid) as cp:
            assert cp.state() == {"a": "x" * 200, "b": "y" * 200}
            key = bytes(cp.manifest.raw["state"]["parts"]["b"])
        dbs = store.backend.dbs

        def flip(txn: Any) -> None:
            old = raw_get(txn, dbs, "objects", key)
            if old is None:
                raise AssertionError("the part is stored")
            out = bytearray(old)
            out[len(out) // 2] ^= 0x01
            raw_put(txn, dbs, "objects", key, bytes(out))

        store.backend.write_txn(flip)
        with store.read(cid) as cp, pytest.raises(IntegrityError):
            cp.state()
        with store.latest("t") as cp, pytest.raises(IntegrityError):
            cp.state()
