"""A batch of LangGraph tuples read in one txn: :class:`Loader` (``get_tuple``, ``list``).

Split from ``_read.py`` (the index entries, the verified part reads and the pending
writes' decode live there); every read here goes through
:class:`~cpstore.store.lg_states.StateReads`, so every object is hash-checked once per
txn and a serde's refusal of hash-checked bytes is an :class:`IntegrityError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite

from cpstore.errors import IntegrityError
from cpstore.langgraph._codec import (
    CHANNEL,
    HEAD_KEY,
    HEAD_LAYOUT,
    LIST_KIND,
    PASS_THROUGH,
    load_value,
    loads_checked,
    msgpack_options,
    part_loader,
    undecodable,
)
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    _head,
    _pruned,
    _thread_ns,
    stored_writes,
)
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.lg_index import WRITE_PREFIX, write_prefix
from cpstore.store.lg_states import StateReads
from cpstore.store.model import MAX_KEY_BYTES

__all__ = ["Loader"]

_new_tuple = tuple.__new__
_unpackb = ormsgpack.unpackb

_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})

#: A head's two maps (checkpoint, metadata).
#: Aliases: inside the class, ``tuple`` names Loader.tuple.
_HeadMaps = tuple[dict[str, Any], dict[str, Any]]


class Loader:
    """CheckpointTuples of index entries, read in one read txn the caller owns.

    One per ``get_tuple`` (``share=False``), one per ``list`` batch. The states
    are read by :class:`~cpstore.store.lg_states.StateReads` (every object
    hash-checked, once per txn). With ``share`` (a ``list`` batch), a channel
    whose part is the very object the last tuple decoded (StateReads hands out
    the one object again for a part it checked before in this txn) takes that
    tuple's value when it is immutable (str, bytes, numbers, None): the same
    stored bytes, the same serde, the same value. Any other value is decoded
    afresh for each tuple, so no two tuples share a list, a dict or a message.
    """

    __slots__ = (
        "_backend", "_cursor", "_load", "_meta", "_opts", "_prev", "_reads",
        "_serde", "_share", "_txn", "_written",
    )  # fmt: skip

    def __init__(
        self,
        txn: Txn[memoryview],
        store: Store,
        serde: Any,
        load: Callable[[Any, str], Any] | None = None,
        opts: tuple[Callable[..., Any], int] | None = None,
        *,
        share: bool = True,
    ) -> None:
        backend = store.backend
        self._txn = txn
        self._reads = StateReads(backend, txn)
        self._serde = serde
        #: ``part_loader(serde)``; a saver passes the one it built for this serde.
        self._load = part_loader(serde) if load is None else load
        #: ``msgpack_options(serde)`` (passed with ``load``): a msgpack part decoded in
        #: the loop below by ``ormsgpack.unpackb`` called there, with no call between.
        self._opts = msgpack_options(serde) if load is None else opts
        self._meta = backend.db("meta")
        #: The tombstones table is looked up only when a checkpoint is missing.
        self._backend = backend
        self._cursor: Any = None
        #: Whether values of one tuple are kept for the next (a ``list`` batch).
        self._share = share
        #: part name -> (the part, its immutable serde value, channel) of the last tuple.
        #: StateReads hands out the one bytes object again for a part it read before in
        #: this txn, so ``is`` finds a channel the last checkpoint already held.
        self._prev: dict[str, tuple[bytes, Any, str]] = {}
        #: thread_ns(thread, ns) -> whether any pending write of that namespace is
        #: stored (in this txn's snapshot): a ``list`` batch of a namespace without
        #: writes seeks once, not once per checkpoint.
        self._written: dict[bytes, bool] = {}

    def _read(self, entry: Entry) -> tuple[bytes, bytes, dict[str, bytes]] | None:
        """:func:`_head` of the entry's checkpoint; None when retention pruned it."""
        got = self._reads.state_and_metadata(entry.cid)
        if got is None:
            _pruned(self._txn, self._backend.db("tombstones"), entry)
            return None
        return _head(got[0], got[1], entry)

    def parts(self, entry: Entry) -> dict[str, bytes] | None:
        """The entry's parts as :func:`load_parts` gives them; None when retention pruned it."""
        got = self._read(entry)
        if got is None:
            return None
        ck, meta, parts = got
        return (
            parts
            if parts.get("checkpoint") is ck
            else {**parts, "checkpoint": ck, "metadata": meta}
        )

    def tuple(self, entry: Entry) -> CheckpointTuple | None:
        """The CheckpointTuple of ``entry`` (None when retention pruned its checkpoint)."""
        if not self._share:  # one tuple (get_tuple): decoded straight from the part bytes
            fast = self._from_views(entry)
            if fast is not None:
                return fast
        got = self._reads.state_and_metadata(entry.cid)
        if got is None:
            _pruned(self._txn, self._backend.db("tombstones"), entry)
            return None
        parts: Any = got[0]  # a dict of bytes for a LangGraph checkpoint (checked below)
        manifest_meta = got[1]
        # _head() of a layout-2 checkpoint by _halves (lg_head.split_head's checks), one
        # call where _head makes four; any other shape (layout 1, a malformed or unknown
        # head) takes _head, which splits it or raises naming what is wrong.
        halves = (
            _halves(manifest_meta.get(HEAD_KEY))
            if type(parts) is dict and "checkpoint" not in parts and type(manifest_meta) is dict
            else None
        )
        if halves is None:
            head, head_meta, parts = _head(parts, manifest_meta, entry)
        else:
            head, head_meta = halves
        load, prev, opts = self._load, self._prev, self._opts
        hook, option = opts if opts is not None else (None, 0)
        if (
            hook is not None
            and type(head) is bytes
            and type(head_meta) is bytes
            and head.startswith(_MSGPACK)
            and head_meta.startswith(_MSGPACK)
        ):  # _head_maps(), inline: a list batch pays no call for it
            try:
                checkpoint = _unpackb(head[_MSGPACK_AT:], ext_hook=hook, option=option)
                metadata = _unpackb(head_meta[_MSGPACK_AT:], ext_hook=hook, option=option)
            except PASS_THROUGH:
                raise
            except Exception as exc:  # the serde's refusal of hash-checked bytes
                raise undecodable(exc, f"checkpoint {entry.cid.hex()}") from exc
            if type(checkpoint) is not dict or type(metadata) is not dict:
                checkpoint, metadata = self._head_maps(entry, head, head_meta)  # its error
        else:
            checkpoint, metadata = self._head_maps(entry, head, head_meta)
        values: dict[str, Any] = {}
        share = self._share
        kept: dict[str, tuple[bytes, Any, str]] = {}
        channels = _CHANNELS
        for name, part in parts.items():
            if prev:
                hit = prev.get(name)
                if hit is not None and hit[0] is part:
                    values[hit[2]] = hit[1]
                    kept[name] = hit
                    continue
            channel = channels.get(name, _MISS)  # _channel_of(name), its lookup inline
            if channel is _MISS:
                channel = _channel_of(name)
            if channel is None:
                continue
            if type(part) is bytes:
                if hook is not None and part.startswith(_MSGPACK):  # load(), inline
                    try:
                        value = values[channel] = _unpackb(
                            part[_MSGPACK_AT:], ext_hook=hook, option=option
                        )
                    except PASS_THROUGH:
                        raise
                    except Exception as exc:  # the serde's refusal of hash-checked bytes
                        where = f"checkpoint {entry.cid.hex()}: state[{name!r}]"
                        raise undecodable(exc, where) from exc
                    if share and type(value) in _IMMUTABLE:
                        kept[name] = (part, value, channel)
                    continue
                if part.startswith(_EMPTY):  # no value stored for the channel
                    continue
                if part.startswith(_LIST):
                    at = f"state[{name!r}] of {entry.cid.hex()}"
                    values[channel] = load_value(self._serde, parts, channel, at)
                    continue
            value = values[channel] = load(part, f"checkpoint {entry.cid.hex()}: state[{name!r}]")
            if share and type(value) in _IMMUTABLE:
                kept[name] = (part, value, channel)
        self._prev = kept
        return self._finish(entry, checkpoint, metadata, values)

    def _head_maps(self, entry: Entry, head: Any, head_meta: Any) -> _HeadMaps:
        """(checkpoint, metadata) a head's two halves decode to; IntegrityError when they
        do not decode, or decode to anything but two maps."""
        opts = self._opts
        if (
            opts is not None
            and type(head) is bytes
            and type(head_meta) is bytes
            and head.startswith(_MSGPACK)
            and head_meta.startswith(_MSGPACK)
        ):  # load(), inline
            hook, option = opts
            try:
                checkpoint = _unpackb(head[_MSGPACK_AT:], ext_hook=hook, option=option)
                metadata = _unpackb(head_meta[_MSGPACK_AT:], ext_hook=hook, option=option)
            except PASS_THROUGH:
                raise
            except Exception as exc:  # the serde's refusal of hash-checked bytes
                raise undecodable(exc, f"checkpoint {entry.cid.hex()}") from exc
        else:
            where = f"checkpoint {entry.cid.hex()}"
            checkpoint = self._load(head, where)
            metadata = self._load(head_meta, where)
        if type(checkpoint) is not dict or type(metadata) is not dict:
            raise IntegrityError(
                "a LangGraph checkpoint head does not decode to two maps",
                where=f"checkpoint {entry.cid.hex()}",
                expected="checkpoint dict, metadata dict",
                got=(type(checkpoint).__name__, type(metadata).__name__),
            )
        return checkpoint, metadata

    def _from_views(self, entry: Entry) -> CheckpointTuple | None:
        """:meth:`tuple` of the common case, each channel value decoded from the bytes of
        its part as stored (hash-checked, :meth:`StateReads.part_views`), not from a copy
        msgpack's decode made: a layout-2 checkpoint whose every part is a channel's,
        each one msgpack bin (nothing before or after it) holding the serde's type and
        bytes. None for anything else, and for a channel stored as a list: the caller
        then takes the general path, which reads the checkpoint again and decodes (or
        refuses, naming what is wrong) exactly as it always did. Every value is decoded
        afresh: nothing is shared with another tuple."""
        got = self._reads.part_views(entry.cid)
        if got is None:
            return None
        parts, views, manifest_meta = got
        halves = None if "checkpoint" in parts else _halves(manifest_meta.get(HEAD_KEY))
        if halves is None:
            return None
        # Every part's framing first (the general path decodes every part before the
        # head): one msgpack bin (bin16, else bin8) of exactly the part's length holding
        # "msgpack" NUL and the serde's bytes; anything else takes the general path.
        names: list[str] = []
        payloads: list[memoryview] = []
        channels = _CHANNELS
        try:
            for name, view in zip(parts, views):  # noqa: B905 - equal lengths
                kind, n, tag = _BIN16(view)
                if kind == 0xC5 and n == len(view) - 3 and tag == _MSGPACK:
                    payloads.append(view[_BIN16_AT:])
                else:
                    kind, n, tag = _BIN8(view)
                    if kind != 0xC4 or n != len(view) - 2 or tag != _MSGPACK:
                        return None
                    payloads.append(view[_BIN8_AT:])
                names.append(name)
        except struct.error:
            return None  # shorter than a header and a tag
        checkpoint, metadata = self._head_maps(entry, halves[0], halves[1])
        opts = self._opts
        values: dict[str, Any] = {}
        for name, payload in zip(names, payloads):  # noqa: B905 - equal lengths
            channel = channels.get(name, _MISS)  # _channel_of(name), its lookup inline
            if channel is _MISS:
                channel = _channel_of(name)
            if channel is None:
                return None  # not a channel's part (a list's segment): the general path
            if opts is None:  # another serde: its loads_typed, on the part as a copy
                where = f"checkpoint {entry.cid.hex()}: state[{name!r}]"
                values[channel] = self._load(_MSGPACK + bytes(payload), where)
                continue
            try:  # load(), inline, on the stored bytes
                values[channel] = _unpackb(payload, ext_hook=opts[0], option=opts[1])
            except PASS_THROUGH:
                raise
            except Exception as exc:  # the serde's refusal of hash-checked bytes
                where = f"checkpoint {entry.cid.hex()}: state[{name!r}]"
                raise undecodable(exc, where) from exc
        return self._finish(entry, checkpoint, metadata, values)

    def _finish(
        self, entry: Entry, checkpoint: dict[str, Any], metadata: Any, values: dict[str, Any]
    ) -> CheckpointTuple:
        """The CheckpointTuple of ``entry`` with its head maps and channel values."""
        checkpoint["channel_values"] = values
        thread_id, ns, parent = entry.thread_id, entry.ns, entry.parent
        # Dict literals and tuple.__new__ (the fields in order): what _config and
        # CheckpointTuple(...) build, without their Python-level calls.
        config = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": entry.checkpoint_id,
            }
        }
        parent_config = (
            None
            if parent is None
            else {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent,
                }
            }
        )
        return _new_tuple(
            CheckpointTuple, (config, checkpoint, metadata, parent_config, self._writes(entry))
        )

    def _writes(self, entry: Entry) -> list[PendingWrite]:
        """The entry's pending writes (most checkpoints have none: one cursor seek)."""
        names = _thread_ns(entry.thread_id, entry.ns)
        cursor = self._cursor
        if cursor is None:
            cursor = self._cursor = self._txn.cursor(db=self._meta)
        if self._share:  # a list batch: is any write of the namespace stored at all?
            written = self._written.get(names)
            if written is None:
                under = WRITE_PREFIX + names
                written = self._written[names] = _starts(cursor, under)
            if not written:
                return []
        raw_id = entry.checkpoint_id.encode("utf-8")  # decoded from a key: it has one
        if len(raw_id) > _MAX_FIELD:
            prefix = write_prefix(names, entry.checkpoint_id, sized=False)  # its error
        else:  # write_prefix(names, checkpoint_id, sized=False), inline
            prefix = WRITE_PREFIX + names + len(raw_id).to_bytes(2, "big") + raw_id
        n = len(prefix)
        # _starts(cursor, prefix), inline
        if n <= MAX_KEY_BYTES and not (
            cursor.set_range(prefix) and bytes(cursor.key()[:n]) == prefix
        ):
            return []
        serde = self._serde
        return [
            (w.task_id, w.channel, loads_checked(serde, w.typed, _write_where(entry, w)))
            for w in stored_writes(
                self._txn, self._meta, entry.thread_id, entry.ns, entry.checkpoint_id
            )
        ]


#: part name -> its channel (``channel/<c>`` -> ``c``), or None for any other part: one
#: lookup instead of a prefix test and a slice per part of every tuple, and the channel
#: str handed out again keeps its hash for the values dict. Names only (strings derived
#: from names, as ``_read.ns_prefix`` keeps): no stored value is cached. Bounded: cleared
#: when full, and names longer than ``_CHANNEL_NAME_MAX`` are never kept.
_CHANNELS: dict[str, str | None] = {}
_MISS: Any = object()
_CHANNELS_MAX = 4096
_CHANNEL_NAME_MAX = 256


def _channel_of(name: str) -> str | None:
    """``name[len(CHANNEL):]`` when ``name`` starts with :data:`CHANNEL`, else None."""
    if name in _CHANNELS:
        return _CHANNELS[name]
    channel = name[_CHANNEL_AT:] if name.startswith(CHANNEL) else None
    if len(name) <= _CHANNEL_NAME_MAX:
        if len(_CHANNELS) >= _CHANNELS_MAX:
            _CHANNELS.clear()
        _CHANNELS[name] = channel
    return channel


def _halves(framed: object) -> tuple[bytes, bytes] | None:
    """A layout-2 head's two halves (checkpoint, metadata), cut as ``lg_head.split_head``
    cuts them; None for anything else (not bytes, shorter than its framing, another
    layout, a length past its end), which the caller reads the general way."""
    if type(framed) is not bytes or len(framed) < _HEAD_AT:
        return None
    layout, size = _HEAD_LEN.unpack_from(framed)
    end = _HEAD_AT + size
    if layout != HEAD_LAYOUT or end > len(framed):
        return None
    return framed[_HEAD_AT:end], framed[end:]


def _starts(cursor: Any, prefix: bytes) -> bool:
    """Whether a key starting with ``prefix`` is stored (the cursor is moved to it); True
    ("look") for a prefix longer than an LMDB key (names an older release stored:
    ``stored_writes`` then scans it as ``lg_index.scan`` does)."""
    if len(prefix) > MAX_KEY_BYTES:
        return True
    return bool(cursor.set_range(prefix)) and bytes(cursor.key()[: len(prefix)]) == prefix


def _write_where(entry: Entry, w: StoredWrite) -> str:
    """Where a pending write is, for an error naming it."""
    return (
        f"pending write {w.task_id!r}/{w.idx} ({w.channel!r}) of thread {entry.thread_id!r} "
        f"checkpoint {entry.checkpoint_id}"
    )


_CHANNEL_AT = len(CHANNEL)
_LIST = LIST_KIND.encode() + b"\x00"
_MSGPACK = b"msgpack\x00"
_MSGPACK_AT = len(_MSGPACK)
_EMPTY = b"empty\x00"
#: A part's msgpack bin16 and bin8 headers and the type tag after them (Loader._from_views).
_BIN16 = struct.Struct(">BH8s").unpack_from
_BIN8 = struct.Struct(">BB8s").unpack_from
_BIN16_AT = 3 + _MSGPACK_AT
_BIN8_AT = 2 + _MSGPACK_AT
#: A layout-2 head's framing (lg_head): layout byte, uint32 big-endian checkpoint length.
_HEAD_LEN = struct.Struct(">BI")
_HEAD_AT = _HEAD_LEN.size
#: The longest key field (lg_index.field): a longer id takes write_prefix, which refuses it.
_MAX_FIELD = 0xFFFF
