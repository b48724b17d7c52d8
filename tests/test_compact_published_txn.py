"""compact_store compares the txn its verify read with the txn it copies (chaos2).

LMDB writes a commit's meta page before it publishes the commit's id in lock.mdb; a
read txn begun in between sees the txn before. compact_store took "the last txn" from
the newest meta page (``info()["last_txnid"]``) and then verified through a read txn:
in that window it verified txn N, called it N + 1, copied N + 1 and raised
IntegrityError "the compacted copy does not hold what the store holds" on a sound store
(the chaos test met it about once in 20 runs: audit 18 vs 19). The window is inside
LMDB's commit, so the test puts a store in it by hand: the meta page says one txn
more than a read sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend


class _MetaAhead:
    """An LMDB environment whose newest meta page is one txn past what reads see."""

    def __init__(self, env: Any) -> None:
        self._env = env

    def info(self) -> dict[str, Any]:
        info = dict(self._env.info())
        info["last_txnid"] += 1
        return info

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def test_last_txnid_is_the_txn_a_read_begun_now_sees(tmp_path: Path) -> None:
    """With the meta page ahead of the published id, last_txnid names what a read sees."""
    with cpstore.open(tmp_path / "s") as store:
        store.recorder("r").checkpoint(0, {"v": 1})
        backend = store.backend
        assert isinstance(backend, LmdbBackend)
        env = backend.env
        txn = env.begin_read()
        try:
            seen = int(txn.id())  # type: ignore[attr-defined]
        finally:
            env.end_read(txn)
        real = env.env
        env.env = _MetaAhead(real)
        try:
            assert backend.last_txnid() == seen
        finally:
            env.env = real
