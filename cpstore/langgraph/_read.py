"""Reading LangGraph checkpoints back: index entry -> verified cpstore checkpoint -> tuple.

Every read goes through the index entry's check, then a
:class:`~cpstore.store.reader.CheckpointView` of the checkpoint it names (the
manifest hash-checked against its id, every state part hash-checked), so a
damaged byte anywhere is an :class:`IntegrityError`, never a wrong state.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
from langgraph.checkpoint.base import writes_sort_key

from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.langgraph._codec import (
    HEAD_KEY,
    unpack_head,
    unpack_typed,
)
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.content import records_of
from cpstore.store.lg_index import (
    CHECKPOINT_PREFIX,
    MAX_CHECKPOINT_NAMES,
    checked,
    checked_entry_key,
    checkpoint_key,
    get,
    over_limit,
    scan,
    split_checkpoint_key,
    thread_ns,
    unpack,
    write_key,
)
from cpstore.store.model import MAX_KEY_BYTES
from cpstore.store.reader import CheckpointView

__all__ = [
    "Entry",
    "StoredWrite",
    "entries",
    "entry_key",
    "id_after",
    "load_parts",
    "ns_prefix",
    "parent_loop",
    "stored_writes",
    "view_head",
]


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    """An index entry's body as the writer stores it (Entry.body_of), for the typed decode."""

    cp: bytes
    run: str
    branch: str
    parent: str | None
    run_id: str | None
    have: list[str]


#: ``tuple.__new__``: a NamedTuple of its fields in order, without the class's
#: Python-level ``__new__`` (the same object, one Python call less).
_new_tuple = tuple.__new__

_decode_body = msgspec.msgpack.Decoder(_Body).decode
_FIELDS = ("cp", "run", "branch", "parent", "run_id", "have")
_BODY_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


class Entry(NamedTuple):
    """One LangGraph index entry, its check verified (immutable: a tuple, built in one call)."""

    #: ``(thread_id, checkpoint_ns, checkpoint_id)``.
    thread_id: str
    ns: str
    checkpoint_id: str
    #: The raw id of the cpstore checkpoint holding it.
    cid: bytes
    #: The cpstore run and branch it was recorded on.
    run: str
    branch: str
    #: The LangGraph parent checkpoint id, or None.
    parent: str | None
    #: ``metadata["run_id"]`` as ``_codec.run_id_of`` keeps it (``delete_for_runs``).
    run_id: str | None
    #: Channels whose value the checkpoint stores (``channel/<name>`` parts).
    have: tuple[str, ...]

    @classmethod
    def decode(
        cls, key: bytes, value: bytes | memoryview, names: tuple[str, str, str] | None = None
    ) -> Entry:
        """The entry stored under ``key``; IntegrityError when it fails its check or shape.

        ``names`` is ``(thread_id, ns, checkpoint_id)`` when the caller built the key.
        The common shape (the six fields the writer stores, of the types it stores)
        is decoded by one typed msgspec decode once the check passed; anything else
        takes :func:`~cpstore.store.lg_index.unpack`'s generic decode, which accepts
        the same field types (unknown fields ignored: a later writer's) and refuses
        any other, as IntegrityError (audit23: it converted any value, e.g. an int
        ``cp`` to that many zero bytes, and let ``bytes(-1)``'s ValueError out).
        """
        thread_id, ns, checkpoint_id = names or split_checkpoint_key(key)
        data = checked(key, value)
        if data is not None:
            try:
                b = _decode_body(data)
            except _BODY_ERRORS:
                pass  # not the common shape: the generic path below
            else:
                return _new_tuple(cls, (
                    thread_id, ns, checkpoint_id, b.cp, b.run, b.branch, b.parent, b.run_id,
                    tuple(b.have),
                ))  # fmt: skip
        body = unpack(key, value)
        try:
            cp, run, branch, parent, run_id, have = (body[f] for f in _FIELDS)
        except (KeyError, TypeError, IndexError):
            cp = None  # not a map holding the six fields
        if (
            type(cp) is bytes
            and type(run) is str
            and type(branch) is str
            and (parent is None or type(parent) is str)
            and (run_id is None or type(run_id) is str)
            and type(have) is list
            and all(type(h) is str for h in have)
        ):
            return cls(thread_id, ns, checkpoint_id, cp, run, branch, parent, run_id, tuple(have))
        raise IntegrityError("LangGraph index entry has the wrong shape", where=f"meta/{key!r}")

    @staticmethod
    def id_of(key: bytes) -> str:
        """The LangGraph checkpoint id an entry key names."""
        return split_checkpoint_key(key)[2]

    def body(self) -> dict[str, Any]:
        """The canonical map stored for this entry."""
        return Entry.body_of(
            self.cid,
            run=self.run,
            branch=self.branch,
            parent=self.parent,
            run_id=self.run_id,
            have=self.have,
        )

    @staticmethod
    def body_of(
        cid: bytes,
        *,
        run: str,
        branch: str,
        parent: str | None,
        run_id: str | None,
        have: Sequence[str],
    ) -> dict[str, Any]:
        """:meth:`body` of an entry with these fields, built without the entry (the put path)."""
        return {
            "cp": cid,
            "run": run,
            "branch": branch,
            "parent": parent,
            "run_id": run_id,
            "have": list(have),
        }

    def config(self) -> dict[str, Any]:
        """The RunnableConfig naming this checkpoint."""
        return _config(self.thread_id, self.ns, self.checkpoint_id)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


#: Names longer than this (thread id and namespace, in characters) are not cached: a
#: key field may hold 65,535 bytes, and 1,024 such keys would pin ~0.5 GB (audit23).
_CACHED_CHARS = 256


def ns_prefix(thread_id: str, ns: str) -> bytes:
    """``checkpoint_key(thread_id, ns)``, kept for the last 1,024 short namespaces
    (bytes of two strings: no stored data is cached)."""
    if len(thread_id) + len(ns) > _CACHED_CHARS:
        return checkpoint_key(thread_id, ns)
    return _ns_prefix(thread_id, ns)


@functools.lru_cache(maxsize=1024)
def _ns_prefix(thread_id: str, ns: str) -> bytes:
    return checkpoint_key(thread_id, ns)


def _thread_ns(thread_id: str, ns: str) -> bytes:
    """``thread_ns(thread_id, ns)``, kept as :func:`ns_prefix` is."""
    if len(thread_id) + len(ns) > _CACHED_CHARS:
        return thread_ns(thread_id, ns)
    return _thread_ns_cached(thread_id, ns)


@functools.lru_cache(maxsize=1024)
def _thread_ns_cached(thread_id: str, ns: str) -> bytes:
    return thread_ns(thread_id, ns)


def id_after(key: bytes, at: int) -> str:
    """The checkpoint id of an entry key whose thread and namespace fields end at ``at``
    (``split_checkpoint_key(key)[2]``, its error on bytes that are not UTF-8)."""
    try:
        return key[at:].decode("utf-8")
    except UnicodeDecodeError:
        raise IntegrityError("damaged LangGraph index key", where=f"meta/{key!r}") from None


def entry_key(thread_id: str, ns: str, checkpoint_id: str) -> bytes:
    """``checkpoint_key(thread_id, ns, checkpoint_id)`` (the same bytes, the same size check
    and the same InvalidInputError for an id without a UTF-8 form)."""
    try:
        # ns_prefix(), inline: one call less a put and a get (saver87)
        prefix = (
            _ns_prefix(thread_id, ns)
            if len(thread_id) + len(ns) <= _CACHED_CHARS
            else checkpoint_key(thread_id, ns)
        )
        key = prefix + checkpoint_id.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        return checkpoint_key(thread_id, ns, checkpoint_id)
    return key if len(key) <= _ENTRY_KEY_MAX else checked_entry_key(key)


#: The longest entry key :func:`checked_entry_key` passes (9 fixed bytes + the names).
_ENTRY_KEY_MAX = MAX_CHECKPOINT_NAMES + len(CHECKPOINT_PREFIX) + 4


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """One pending write as stored: its sort key, channel and serde pair."""

    task_path: str
    task_id: str
    idx: int
    channel: str
    typed: tuple[str, bytes]


def entries(txn: Txn[memoryview], meta: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Index entries under ``prefix``, newest checkpoint id first within each namespace."""
    return scan(txn, meta, prefix, reverse=True)


def stored_writes(
    txn: Txn[memoryview], meta: Any, thread_id: str, ns: str, checkpoint_id: str
) -> list[StoredWrite]:
    """A checkpoint's pending writes in ``writes_sort_key`` order, each check verified."""
    out: list[StoredWrite] = []
    for key, value in scan(txn, meta, write_key(thread_id, ns, checkpoint_id, sized=False)):
        body = unpack(key, value)
        try:
            path, task_id, idx, channel, kind, data = body
        except (TypeError, ValueError):
            path = None  # not a list of six fields
        if not (
            type(path) is str
            and type(task_id) is str
            and type(idx) is int
            and type(channel) is str
            and type(kind) is str
            and type(data) is bytes
        ):
            # An int ``data`` would become that many zero bytes through bytes() (audit23's
            # finding on index entries): every field's type is checked as written.
            raise IntegrityError(
                "pending write has the wrong shape",
                where=f"meta/{key!r}",
                expected="[task_path, task_id, idx, channel, type, bytes]",
                got=repr(body)[:80],
            )
        out.append(StoredWrite(path, task_id, idx, channel, (kind, data)))
    out.sort(key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
    return out


def stored(txn: Txn[memoryview], store: Store, entry: Entry) -> bool:
    """True when the entry's checkpoint is stored; False when retention pruned it.

    A checkpoint neither stored nor pruned is damage (IntegrityError).
    """
    backend = store.backend
    if records_of(backend.dbs).exists(txn, entry.cid):
        return True
    return _pruned(txn, backend.db("tombstones"), entry)


def _pruned(txn: Txn[memoryview], tombstones: Any, entry: Entry) -> bool:
    """False when a tombstone says retention pruned the entry's checkpoint; else damage."""
    if txn.get(entry.cid, db=tombstones) is not None:
        return False
    raise IntegrityError(
        "the LangGraph index names a checkpoint that is not stored",
        where=f"thread {entry.thread_id!r} checkpoint {entry.checkpoint_id}",
        expected=entry.cid.hex(),
        got="missing",
    )


def _head(state: Any, metadata: Any, entry: Entry) -> tuple[bytes, bytes, dict[str, bytes]]:
    """``(checkpoint part, metadata part, state parts)`` of a LangGraph checkpoint.

    Layout 1 holds the head as the state parts ``checkpoint`` and ``metadata``;
    layout 2 in the manifest's metadata under ``HEAD_KEY`` (_codec.pack_head).
    Either way it was hash-checked with the manifest or the parts.
    """
    if isinstance(state, dict):
        if "checkpoint" in state and "metadata" in state:
            return state["checkpoint"], state["metadata"], state
        if type(metadata) is dict and HEAD_KEY in metadata:
            ck, meta = unpack_head(metadata[HEAD_KEY], f"checkpoint {entry.cid.hex()}")
            return ck, meta, state
    raise IntegrityError(
        "not a LangGraph checkpoint",
        where=f"checkpoint {entry.cid.hex()}",
        expected="parts checkpoint, metadata (layout 1) or a head in the metadata (layout 2)",
    )


def _with_head(state: Any, metadata: Any, entry: Entry) -> dict[str, bytes]:
    """The state parts with ``checkpoint`` and ``metadata`` among them (either layout)."""
    ck, meta, parts = _head(state, metadata, entry)
    if parts.get("checkpoint") is ck:
        return parts  # layout 1: they are parts already
    return {**parts, "checkpoint": ck, "metadata": meta}


def view_head(view: CheckpointView, entry: Entry) -> tuple[bytes, bytes]:
    """The packed ``checkpoint`` and ``metadata`` of an open view, without its channels."""
    parts = view.manifest.raw["state"]["parts"]
    if "checkpoint" in parts and "metadata" in parts:
        ck, meta = view.state_part("checkpoint"), view.state_part("metadata")
    else:
        ck, meta, _ = _head({}, view.manifest.metadata, entry)
    # both halves are serde pairs, though the caller (diff) decodes only the metadata
    where = f"checkpoint {entry.cid.hex()}"
    unpack_typed(ck, f"{where}: head checkpoint")
    unpack_typed(meta, f"{where}: head metadata")
    return ck, meta


def load_parts(txn: Txn[memoryview], store: Store, entry: Entry) -> dict[str, bytes]:
    """The checkpoint's parts (name -> packed serde bytes), every object hash-checked:
    its state parts and, for either layout, ``checkpoint`` and ``metadata``.

    Through a :class:`CheckpointView`, not :class:`StateReads`: the maintenance
    paths read one checkpoint at a time, and tests use this as the oracle the fast
    path (:class:`~cpstore.langgraph._loader.Loader`) is compared with (audit23: it
    must not share that path).
    """
    with CheckpointView(store.backend, entry.cid, verify=True, txn=txn) as view:
        parts = _with_head(view.state(), view.manifest.metadata, entry)
    # both halves are serde pairs, though a caller may decode only one (a copy writes
    # the other as it is: a malformed half is refused here, never copied)
    where = f"checkpoint {entry.cid.hex()}"
    unpack_typed(parts["checkpoint"], f"{where}: head checkpoint")
    unpack_typed(parts["metadata"], f"{where}: head metadata")
    return parts


#: Values a serde may hand to more than one tuple: none can be changed.


def entry_at(
    txn: Txn[memoryview], meta: Any, thread_id: str, ns: str, checkpoint_id: str | None
) -> Entry | None:
    """The entry of a checkpoint id, or the newest of the namespace when it is None.

    Names longer than a put may use (``lg_index.over_limit``) are looked up all the
    same: an older release stored them (PostgreSQL took any length, LMDB entry keys up
    to 511 bytes), and what is stored is found; LMDB finds nothing for a key it cannot
    hold (``lg_index.get``, ``scan``)."""
    try:
        if checkpoint_id is not None:
            key = entry_key(thread_id, ns, checkpoint_id)
        else:
            key = ns_prefix(thread_id, ns)
    except InvalidInputError:
        if not over_limit(thread_id, ns, checkpoint_id or ""):
            raise
        key = checkpoint_key(thread_id, ns, checkpoint_id, sized=False)
    if checkpoint_id is not None:
        # lg_index.get, inline for a key LMDB can hold: Entry.decode copies the view
        found = txn.get(key, None, meta) if len(key) <= MAX_KEY_BYTES else get(txn, meta, key)
        if found is None:
            return None
        return Entry.decode(key, found, (thread_id, ns, checkpoint_id))
    for k, value in entries(txn, meta, key):
        return Entry.decode(k, value)
    return None


def thread_entries(txn: Txn[memoryview], meta: Any, thread_ids: Iterable[str]) -> list[Entry]:
    """Every entry of the threads, each check verified."""
    out: list[Entry] = []
    for thread_id in thread_ids:
        prefix = checkpoint_key(thread_id, sized=False)
        out.extend(Entry.decode(k, v) for k, v in scan(txn, meta, prefix))
    return out


def parent_loop(e: Entry) -> IntegrityError:
    """The error of a parent chain that comes back to ``e``: each re-put of a stored id
    (any saver takes one, LangGraph's loop never makes one) may name any parent, the id
    itself too, so ``parent`` links can loop. A walk that must reach the root (a diff)
    refuses it; the other walks stop at the first checkpoint they see again (lgsaver96:
    they went round for ever, a prune holding the writer lock)."""
    return IntegrityError(
        "the LangGraph parent chain loops (a checkpoint re-put under a later parent)",
        where=f"thread {e.thread_id[:64]!r} ns {e.ns[:64]!r}",
        expected="parent links that end at a root",
        got=f"checkpoint {e.checkpoint_id[:64]!r} met twice",
    )
