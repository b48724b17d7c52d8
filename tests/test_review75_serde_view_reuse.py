"""A serde view kept by id (lgfix72) never serves a later serde that took a dropped
one's id: each kept entry holds its serde, so its id is not reused while it is kept,
and an evicted id is looked up afresh.

Pinned, not a fix (review75 found it sound): serdes assigned one after another and
dropped (plain and an ``EncryptedSerializer`` with a stand-in cipher, alternating, more
than the 8 kept views so entries are evicted and CPython hands freed ids to new
objects): every checkpoint is stored through the serde assigned when it was put.
"""

from __future__ import annotations

import gc
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import unpack_typed
from cpstore.langgraph._read import entry_at, load_parts
from cpstore.langgraph._write import _CACHED_VIEWS
from cpstore.store import Store


class _Cipher:
    """A stand-in cipher (reversed bytes): enough to tell what went through it."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "rev", bytes(reversed(plaintext))

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return bytes(reversed(ciphertext))


def _kinds(store: Store, checkpoint_id: str) -> list[str]:
    backend = store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), "t", "", checkpoint_id)
        assert entry is not None
        parts = load_parts(txn, store, entry)
    return [unpack_typed(part, name)[0] for name, part in parts.items()]


def test_dropped_serdes_and_reused_ids_never_take_a_stale_view(store: Store) -> None:
    saver = CpstoreSaver(store)
    at: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n in range(1, 4 * _CACHED_VIEWS + 1):
        encrypted = n % 2 == 0
        saver.serde = (
            EncryptedSerializer(_Cipher(), JsonPlusSerializer())
            if encrypted
            else JsonPlusSerializer()
        )
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["channel_values"] = {"x": f"secret {n}"}
        cp["channel_versions"] = {"x": str(n)}
        at = saver.put(at, cp, {"source": "loop", "step": n}, {"x": str(n)})
        kinds = _kinds(store, at["configurable"]["checkpoint_id"])
        assert kinds and all(k.endswith("+rev") == encrypted for k in kinds), (n, kinds)
        gc.collect()  # the serde assigned before is freed once its view is evicted
    assert len(saver._writer._views) == _CACHED_VIEWS
