"""A serde assigned to a saver after it was made is the one every path uses.

``BaseCheckpointSaver.serde`` is an attribute LangGraph itself assigns: ``with_allowlist``
(which ``StateGraph.compile`` calls on every checkpointer) returns a shallow clone and
sets ``clone.serde``. The saver's put path kept the serde it was made with: after
``saver.serde = EncryptedSerializer(...)``, ``put_writes`` encrypted while every
checkpoint's head and channel values were stored in plaintext, silently (reads decode
both, as ``EncryptedSerializer`` passes a type without a cipher name through), and
``copy_thread`` and ``prune`` decoded with the old serde. Now ``put``, ``copy_thread``
and ``prune`` take the saver's serde at each call; a shallow clone shares the writer's
lock and cached branches, each through its own serde.
"""

from __future__ import annotations

import copy
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import unpack_typed
from cpstore.langgraph._read import entry_at, load_parts
from cpstore.store import Store

SECRET = "the launch code is 0000"


class _Cipher:
    """A stand-in cipher (reversed bytes): enough to tell what went through it."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "rev", bytes(reversed(plaintext))

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "rev"
        return bytes(reversed(ciphertext))


def _conf(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: CpstoreSaver, parent: dict[str, Any], value: str, n: int) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": value, "y": n}
    cp["channel_versions"] = {"x": str(n), "y": str(n)}
    return saver.put(parent, cp, {"source": "loop", "step": n}, {"x": str(n), "y": str(n)})


def _kinds(store: Store, thread: str, checkpoint_id: str) -> dict[str, str]:
    """The serde type tag of every part of a stored checkpoint (head halves included)."""
    backend = store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), thread, "", checkpoint_id)
        assert entry is not None
        parts = load_parts(txn, store, entry)
    return {name: unpack_typed(part, name)[0] for name, part in parts.items()}


def _assigned(store: Store) -> CpstoreSaver:
    saver = CpstoreSaver(store)
    saver.serde = EncryptedSerializer(_Cipher(), JsonPlusSerializer())
    return saver


def test_a_put_after_the_serde_is_assigned_stores_through_it(store: Store) -> None:
    saver = _assigned(store)
    first = _put(saver, _conf("t"), SECRET, 1)
    second = _put(saver, first, SECRET + "!", 2)
    saver.put_writes(second, [("x", SECRET)], "task")
    for done in (first, second):
        kinds = _kinds(store, "t", done["configurable"]["checkpoint_id"])
        assert kinds and all(k.endswith("+rev") for k in kinds.values()), kinds
    got = saver.get_tuple(_conf("t"))
    assert got is not None
    assert got.checkpoint["channel_values"] == {"x": SECRET + "!", "y": 2}
    assert got.pending_writes == [("task", "x", SECRET)]


def test_copy_and_prune_after_the_serde_is_assigned_read_and_record_through_it(
    store: Store,
) -> None:
    saver = _assigned(store)
    at = _conf("t")
    for n in range(1, 4):
        at = _put(saver, at, f"{SECRET} {n}", n)
    saver.put_writes(at, [("x", SECRET)], "task")
    saver.copy_thread("t", "u")
    saver.prune(["t"])
    for thread in ("t", "u"):
        got = saver.get_tuple(_conf(thread))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"x": f"{SECRET} 3", "y": 3}
        assert got.pending_writes == [("task", "x", SECRET)]
        kinds = _kinds(store, thread, got.config["configurable"]["checkpoint_id"])
        assert all(k.endswith("+rev") for k in kinds.values()), kinds
    assert len(list(saver.list(_conf("t")))) == 1
    assert len(list(saver.list(_conf("u")))) == 3


def test_a_shallow_clone_with_its_own_serde_puts_through_it(store: Store) -> None:
    """What ``with_allowlist`` makes (``copy.copy``, then ``clone.serde = ...``): the clone
    and the saver share one writer's lock and caches, and each stores through its own
    serde; the clone's (which passes a type without a cipher name through) reads both."""
    saver = CpstoreSaver(store)
    clone = copy.copy(saver)
    clone.serde = EncryptedSerializer(_Cipher(), JsonPlusSerializer())
    first = _put(clone, _conf("t"), SECRET, 1)
    second = _put(saver, first, SECRET + "?", 2)
    third = _put(clone, second, SECRET + "!", 3)
    for done, sealed in ((first, True), (second, False), (third, True)):
        kinds = _kinds(store, "t", done["configurable"]["checkpoint_id"])
        head = {k: v for k, v in kinds.items() if k in ("checkpoint", "metadata")}
        assert all(k.endswith("+rev") == sealed for k in head.values()), kinds
        assert kinds["channel/x"].endswith("+rev") == sealed, kinds
    got = clone.get_tuple(_conf("t"))
    assert got is not None and got.checkpoint["channel_values"]["x"] == SECRET + "!"
    listed = [t.checkpoint["channel_values"]["x"] for t in clone.list(_conf("t"))]
    assert listed == [SECRET + "!", SECRET + "?", SECRET]
