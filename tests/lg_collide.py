"""Colliding LangGraph names for the hashed-name tests: a real XXH3-128 collision.

``A`` and ``B`` are two valid-UTF-8 400-byte strings with one XXH3-128 (built by a
study from XXH3's public default secret: they differ only in the first byte of lane
3 of stripes 0 and 4, +1 and -1, with that lane's upper 32 key bits zero, so the
accumulators meet). Their first 24 bytes may be replaced by any bytes both share
(the same length, so the stripes stay aligned): ``"main@" + FORK_A`` and
``"main@" + FORK_B`` collide as well, the hashed names of fork branches off the root
namespace (``_codec.fork_branch``).

Hashed names are BLAKE2b-256 now (scheme 2, ``lg:#b2:<hex>``); :func:`scheme1_names`
makes the saver name as releases before it did (``lg:#<XXH3-128 hex>``), to build the
stores those releases left behind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from langgraph.checkpoint.base import empty_checkpoint

from cpstore.langgraph import CpstoreSaver, _codec
from cpstore.langgraph._read import Entry
from cpstore.native.binding import digest
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, scan

A = (
    "#AAAAAAAAAAAAAAAAAAAAAAAAAA\u1df3g\x1fAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x81:&LAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)
B = (
    "#AAAAAAAAAAAAAAAAAAAAAAABAA\u1df3g\x1fAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA@AA\x81:&LAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)
#: Checkpoint ids whose fork branch names off the root namespace ("main@" + id) collide.
FORK_A, FORK_B = A[5:], B[5:]


def conf(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    """A config of ``thread`` and namespace ``ns``, naming ``checkpoint_id`` when given."""
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def put_at(
    saver: CpstoreSaver, thread: str, parent: str | None, cid: str, value: str, *, ns: str = ""
) -> None:
    """Put checkpoint ``cid`` of ``thread``/``ns`` (parent ``parent``), channel ``x`` = value."""
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["id"] = cid
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": value}
    meta = {"source": "loop", "step": 0, "parents": {}}
    saver.put(conf(thread, ns, parent), cp, meta, {"x": value})


def values(saver: CpstoreSaver, thread: str, ns: str | None = "") -> list[str]:
    """Channel ``x`` of every checkpoint ``list`` gives for the thread (newest first)."""
    c = conf(thread, ns) if ns is not None else {"configurable": {"thread_id": thread}}
    return [t.checkpoint["channel_values"]["x"] for t in saver.list(c)]


def placed(store: Store, thread: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(ns, checkpoint id) -> the (run, branch) its index entry names, for one thread."""
    backend = store.backend
    with backend.read_txn() as txn:
        found = scan(txn, backend.db("meta"), checkpoint_key(thread, sized=False))
        return {
            (e.ns, e.checkpoint_id): (e.run, e.branch)
            for e in (Entry.decode(k, v) for k, v in found)
        }


def scheme1(prefix: str, text: str) -> str:
    """A hashed name as releases before scheme 2 made it: ``<prefix><XXH3-128 hex>``."""
    return prefix + digest(text.encode("utf-8", "surrogatepass")).hex()


def scheme2(prefix: str, text: str) -> str:
    """A hashed name as this release makes it: ``<prefix>b2:<BLAKE2b-256 hex>``."""
    return prefix + "b2:" + hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


@contextmanager
def scheme1_names() -> Iterator[None]:
    """Within: the saver hashes names with scheme 1 (an older release's store)."""
    with mock.patch.object(_codec, "_hashed", scheme1):
        yield
