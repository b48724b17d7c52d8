"""Where an object's bytes and a checkpoint's record live: the one module that knows.

Store layout 5 (LMDB) appends both to one table, ``heap``, under sequential
8-byte big-endian keys written with ``MDB_APPEND`` (its pages fill ~100 %,
where random 16-byte digest keys left pages half full: issue 12). Each heap
entry is self-describing::

    kind (1 byte: b"o" object, b"c" checkpoint record) | key length (1) | key
    | (records only: hint count (4) | hints (4 each)) | bytes

and two small index tables map a key to the 8-byte location of its entry:
``oloc`` (object key -> seq) and ``cloc`` (checkpoint id -> seq). A location
is trusted only after the entry it names is seen to carry that kind and key
(a compare, not a hash), on every read, ``verify=False`` included; an entry
no index names is garbage that verify reports.

A checkpoint record's entry has a *hint block* between its key and the
record: a 4-byte big-endian count, then that many 4-byte big-endian heap seqs,
those of the state parts in the manifest's order (0: none known), written by
the commit that wrote the record (its txn already looks up every object the
checkpoint names). They are outside the record, so ids do not change. A
verified whole-state read tries each hint first and hashes what it finds; a
hint that names anything else (a reused seq, damage) only sends that read to
the index. Nothing ever returns a hinted entry unchecked: ``verify=False``
reads go through the index and its kind-and-key compare.

Seqs may be reused: the next one is the last heap key + 1 in the write txn
(the txn's own previous append, or a cursor on the heap's last key), so after
gc deletes the tail a later put takes the same seq again. The only locations
kept across txns are the hints, trusted only once what they name hashes to the
part's digest; anything else that keeps one must keep the kind-and-key compare.

Older layouts keep their entries where they were: the ``objects`` and
``checkpoints`` tables (the *legacy* tables), read as a fallback when the
index has no entry (a get on an empty table is one page lookup: no root) and
deleted from by gc. Layout-5 writers write only the heap. A backend without a
``heap`` table in its ``dbs`` (PostgreSQL, whose every get is a round trip or
a prefetch; an LMDB store opened read-only at an older layout) uses the direct
tables only: heap placement is the LMDB engine's (docs/store.md).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from operator import itemgetter
from typing import Any

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest_small
from cpstore.store.backend import Txn
from cpstore.store.heap_layout import (
    HEADS,
    KIND_OBJECT,
    KIND_RECORD,
    SEQ_SIZE,
    ZERO4,
    entry_header,
    next_seq,
    record_entry,
)
from cpstore.store.record_codec import KIND_COMPACT, inflate_record, why_not

__all__ = [
    "HEAP_TABLES",
    "KIND_COMPACT",
    "KIND_OBJECT",
    "KIND_RECORD",
    "Content",
    "HeapTail",
    "appended_hint",
    "entry_header",
    "objects_of",
    "records_of",
    "tail_committed",
    "uses_heap",
]

#: The layout-5 tables (LMDB only): the heap and its two indexes.
HEAP_TABLES = ("heap", "oloc", "cloc")
#: Heap entry kinds.
#: Where a part's bytes start in its heap entry (kind, key length 16, the digest).
_PART_AT = 18
_KIND_NAMES = {KIND_OBJECT: ("objects", "oloc"), KIND_RECORD: ("checkpoints", "cloc")}
#: The head of a compact record entry under a 16-byte key (kind ``r``, key length 16).
_COMPACT_16 = bytes((KIND_COMPACT, 16))
#: kind -> (the heads its entries are compared with first, the other kind's or None):
#: a record's entry is compact (``r``, layout 6) or as it is (``c``, layout 5 on).
_COMPARED = {
    KIND_OBJECT: (HEADS[KIND_OBJECT], None),
    KIND_RECORD: (HEADS[KIND_COMPACT], HEADS[KIND_RECORD]),
}


def uses_heap(dbs: Mapping[str, Any]) -> bool:
    """True when ``dbs`` has the layout-5 heap tables (LMDB at layout 5)."""
    return "heap" in dbs


class Content:
    """One kind of content (objects or checkpoint records) on a backend's tables.

    Stateless apart from the table handles: build it once per operation (or
    per read view) from the backend's ``dbs`` with :func:`objects_of` or
    :func:`records_of`; every method takes the txn it works in.
    """

    __slots__ = ("alt", "heads", "heap", "index", "kind", "legacy", "legacy_name")

    def __init__(self, dbs: Mapping[str, Any], kind: int) -> None:
        legacy_name, index_name = _KIND_NAMES[kind]
        self.kind = kind
        self.heads, self.alt = _COMPARED[kind]
        self.legacy_name = legacy_name
        self.legacy = dbs[legacy_name]
        self.heap = dbs.get("heap")
        self.index = dbs.get(index_name) if self.heap is not None else None

    # -- reads -------------------------------------------------------------------

    def _located(self, txn: Txn[memoryview], key: bytes) -> tuple[Any, memoryview] | None:
        """(seq, heap entry) of ``key`` once the entry is seen to carry its kind and key;
        None when the index has no row (or there is no heap). IntegrityError when the
        row names a location whose entry is missing or carries another kind or key."""
        index = self.index
        if index is None:
            return None
        seq: Any = txn.get(key, None, index)
        if seq is None:
            return None
        entry = txn.get(seq, None, self.heap)
        n = len(key) + 2
        if entry is None or (entry[:n] != self.heads[n - 2] + key and not self._alt(entry, key)):
            raise self._bad_location(key, seq, entry)
        return seq, entry

    def _carries(self, entry: Any, key: bytes) -> bool:
        """True when heap ``entry`` carries this content's kind (a record: either) and ``key``."""
        return entry[: len(key) + 2] == self.heads[len(key)] + key or self._alt(entry, key)

    def _alt(self, entry: memoryview, key: bytes) -> bool:
        """True when ``entry`` carries ``key`` under this content's other entry kind
        (a record's ``c`` entry: ``heads`` are the compact ``r`` ones)."""
        alt = self.alt
        return alt is not None and entry[: len(key) + 2] == alt[len(key)] + key

    def get(self, txn: Txn[memoryview], key: bytes) -> memoryview | None:
        """The stored bytes under ``key`` (a view in LMDB), or None.

        IntegrityError when the index names a location whose entry is missing
        or carries another kind or key: never someone else's bytes.
        """
        found = self._located(txn, key)
        if found is None:
            return txn.get(key, None, self.legacy)
        seq, entry = found
        n = len(key) + 2
        if self.kind == KIND_RECORD:
            return self._record(key, seq, entry, n)[1]
        return entry[n:]

    def hinted(self, txn: Txn[memoryview], cid: bytes) -> tuple[memoryview | None, bytes]:
        """(checkpoint record, location hints) of ``cid``; hints are b"" outside the heap.

        The hints are 4-byte big-endian heap seqs of the state parts, in the
        manifest's order, 0 where none was known (module docstring): a reader
        may try one, and must check what it finds by hashing it.
        """
        index = self.index
        if index is not None and self.kind == KIND_RECORD:
            # The common case (a compact entry at its indexed location, its frame
            # inflating to its declared size) on one owned copy of the entry: the
            # same compare, hint block and inflate as below, without the views.
            # Anything else (a layout-5 entry, a missing, damaged or wrong entry)
            # takes the general path below, which raises naming it.
            seq: Any = txn.get(cid, None, index)
            entry: Any = None if seq is None else txn.get(seq, None, self.heap)
            if entry is not None and len(cid) == 16:
                e = bytes(entry)
                if e[2:18] == cid and e[:2] == _COMPACT_16:
                    start = 22 + 4 * int.from_bytes(e[18:22], "big")
                    if len(e) >= start:
                        inflated = inflate_record(e[start:])
                        if inflated is not None:
                            return memoryview(inflated), e[22:start]
        found = self._located(txn, cid)
        if found is None:
            return txn.get(cid, None, self.legacy), b""
        seq, entry = found
        hints, record = self._record(cid, seq, entry, len(cid) + 2)
        return record, bytes(hints)

    def _record(
        self, key: bytes, seq: Any, entry: memoryview, n: int
    ) -> tuple[memoryview, memoryview]:
        """(hint block, record bytes) of a record entry whose header matched: a compact
        (``r``) entry's record is inflated from its frame, checked as record_codec says."""
        count = int.from_bytes(entry[n : n + 4], "big")
        start = n + 4 + 4 * count
        if len(entry) < start:
            raise IntegrityError(
                "a checkpoint record's heap entry is cut short in its location hints",
                where=f"cloc/{bytes(key).hex()} -> heap/{int.from_bytes(bytes(seq), 'big')}",
                expected=f">= {start} bytes",
                got=len(entry),
            )
        if entry[0] != KIND_COMPACT:
            return entry[n + 4 : start], entry[start:]
        record = inflate_record(entry[start:])
        if record is None:
            what, expected, got = why_not(entry[start:])
            raise IntegrityError(
                f"a compact checkpoint record's heap entry is damaged: {what}",
                where=f"cloc/{bytes(key).hex()} -> heap/{int.from_bytes(bytes(seq), 'big')}",
                expected=expected,
                got=got,
            )
        return entry[n + 4 : start], memoryview(record)

    def _entry(self, txn: Txn[memoryview], key: bytes, seq: Any) -> memoryview:
        entry = txn.get(bytes(seq), None, self.heap)
        n = len(key) + 2
        if (
            len(seq) != SEQ_SIZE
            or entry is None
            or (entry[:n] != self.heads[n - 2] + key and not self._alt(entry, key))
        ):
            raise self._bad_location(key, seq, entry)
        if self.kind == KIND_RECORD:
            return self._record(key, seq, entry, n)[1]
        return entry[n:]

    def locations(
        self,
        txn: Txn[memoryview],
        keys: Iterable[bytes],
        found: set[bytes] | None = None,
        known: dict[bytes, bytes] | None = None,
    ) -> bytes:
        """The hint block of ``keys`` (objects): count, then each heap seq (4 bytes BE;
        0 for one in a legacy table, missing, or past 2**32 - 1). ``found`` gets every
        key whose location checks (what :meth:`stored` says True of through the heap):
        the commit's must-exist reads of those keys are answered here.

        ``known`` (with ``found``): key -> hint of the keys whose location checked
        earlier in this same write txn (commit.TxnChecked); they are answered from it,
        the others read, and every key that checks is added to it."""
        if known is not None and found is not None:
            return self._known_locations(txn, keys, found, known)
        index, heap, heads = self.index, self.heap, self.heads
        get = txn.get
        if index is not None and found is not None and keys:
            # The common case (every key a 16-byte digest, indexed at an 8-byte
            # seq below 2**32, its entry carrying its kind and key) in a few C
            # calls: the same reads and the same compare, made on concatenations
            # of pieces all checked to have one length (equal as a whole iff each
            # piece is). Anything else takes the per-key loop below.
            keys = keys if isinstance(keys, (list, tuple)) else list(keys)
            # map() calls the txn's get per key with no Python frame per key (a list
            # comprehension's function and bytecode cost more than the get's own call).
            rows: list[Any] = list(map(get, keys, repeat(None), repeat(index)))
            try:  # len(None) raises: a key with no row takes the loop below
                rows_ok = _ONLY_8.issuperset(map(len, rows))
            except TypeError:
                rows_ok = False
            if rows_ok and _ONLY_16.issuperset(map(len, keys)):
                n = len(keys)
                seqs_of, hints_of = _plans(n)
                entries: list[Any] = list(map(get, rows, repeat(None), repeat(heap)))
                head = heads[16]
                if all(entries) and b"".join(map(_HEAD_16, entries)) == head + head.join(keys):
                    try:  # a seq past 2**32 - 1 does not pack: the loop below writes 0
                        block = hints_of(n, *seqs_of(b"".join(rows)))
                    except struct.error:
                        pass
                    else:
                        found.update(keys)
                        return block
        out = bytearray()
        n = 0
        for key in keys:
            n += 1
            seq: Any = None if index is None else get(key, None, index)
            if seq is None:
                out += ZERO4
                continue
            if found is not None:  # stored()'s compare: the entry carries kind and key
                entry = get(seq, None, heap)
                k = len(key)
                if entry is not None and entry[: k + 2] == heads[k] + key:
                    found.add(key)
            raw = bytes(seq)
            out += raw[4:] if len(raw) == SEQ_SIZE and raw[:4] == ZERO4 else ZERO4
        return n.to_bytes(4, "big") + bytes(out)

    def _known_locations(
        self,
        txn: Txn[memoryview],
        keys: Iterable[bytes],
        found: set[bytes],
        known: dict[bytes, bytes],
    ) -> bytes:
        keys = keys if isinstance(keys, (list, tuple)) else list(keys)
        hit = [known.get(key) for key in keys]
        if all(hit):  # a hint is 4 bytes, never empty
            found.update(keys)
            return len(keys).to_bytes(4, "big") + b"".join(hit)  # type: ignore[arg-type]
        missing = [key for key, h in zip(keys, hit, strict=True) if h is None]
        new: set[bytes] = set()
        block = self.locations(txn, missing, new)
        found.update(new)
        at = 4
        for i, was in enumerate(hit):
            if was is None:
                hit[i] = read = block[at : at + 4]
                at += 4
                if keys[i] in new:
                    known[keys[i]] = read
            else:
                found.add(keys[i])
        return len(keys).to_bytes(4, "big") + b"".join(hit)  # type: ignore[arg-type]

    def _index_name(self) -> str:
        return _KIND_NAMES[self.kind][1]

    def _bad_location(self, key: bytes, seq: Any, entry: Any) -> IntegrityError:
        if len(seq) != SEQ_SIZE:
            return IntegrityError(
                "a location index entry is not an 8-byte location",
                where=f"{self._index_name()}/{bytes(key).hex()}",
                expected=SEQ_SIZE,
                got=len(seq),
            )
        at = int.from_bytes(bytes(seq), "big")
        if entry is None:
            what, got = "the location index names a heap entry that is not stored", "missing"
        else:
            what = "the heap entry at this location is not the one the index names"
            head = bytes(entry[: len(key) + 2])
            got = head.hex() if len(head) < len(key) + 2 else f"{head[:2].hex()} {head[2:].hex()}"
        return IntegrityError(
            what,
            where=f"{self._index_name()}/{bytes(key).hex()} -> heap/{at}",
            expected=" or ".join(h[len(key)].hex() for h in (self.heads, self.alt) if h)
            + " "
            + bytes(key).hex(),
            got=got,
        )

    def part(self, txn: Txn[memoryview], key: bytes, hints: bytes, i: int) -> Any:
        """The stored bytes of state part ``key``, hash-checked; None when it is missing or
        fails its hash (the caller's slower path then names what is wrong).

        ``hints``: the record's hint block (or b""), ``i``: the part's place in it.
        The hinted heap entry is tried first and kept only once its bytes hash to
        ``key`` (a reused seq or damage only costs the index lookup).
        """
        if hints:
            view = txn.get(ZERO4 + hints[4 * i : 4 * i + 4], None, self.heap)
            if view is not None:
                view = view[_PART_AT:]  # an object entry: kind, 16, the digest, bytes
                if digest_small(view) == key:
                    return view
        view = self.get(txn, key)
        return view if view is not None and digest_small(view) == key else None

    def exists(self, txn: Any, key: bytes) -> bool:
        """True when ``key`` has an entry (its location is not checked: :meth:`get` does)."""
        index = self.index
        if index is not None and txn.get(key, None, index) is not None:
            return True
        return txn.get(key, None, self.legacy) is not None

    def stored(self, txn: Txn[memoryview], key: bytes) -> bool:
        """True when ``key`` has an entry a read can reach: its location is checked
        (IntegrityError naming a damaged one), so a commit that must find an
        object never acknowledges a checkpoint whose object no read can serve."""
        if self._located(txn, key) is not None:
            return True
        return txn.get(key, None, self.legacy) is not None

    def count(self, txn: Any) -> int:
        """How many keys have an entry."""
        n = int(txn.stat(self.legacy)["entries"])
        if self.index is not None:
            n += int(txn.stat(self.index)["entries"])
        return n

    def keys(self, txn: Any, start: bytes = b"") -> Iterator[bytes]:
        """Every key from ``start`` on, in key order (copied bytes)."""
        return heapq.merge(*(_keys_of(txn, db, start) for db in self._key_tables()))

    def items(self, txn: Any) -> Iterator[tuple[bytes, Any]]:
        """(key, stored bytes or None when its location is damaged), legacy table first.

        The bytes are views valid until the txn's next write (bytes in a write txn); a
        damaged location yields None (:meth:`get` raises naming it).
        """
        with txn.cursor(db=self.legacy) as cur:
            for key, value in cur:  # iteration: what every backend's cursor has
                yield bytes(key), value
        if self.index is None:
            return
        with txn.cursor(db=self.index) as cur:
            for key, seq in cur:
                k = bytes(key)
                try:
                    yield k, self._entry(txn, k, seq)
                except IntegrityError:
                    yield k, None

    def _key_tables(self) -> list[Any]:
        return [self.legacy] if self.index is None else [self.legacy, self.index]

    # -- writes --------------------------------------------------------------------

    def add(self, txn: Any, key: bytes, data: bytes | memoryview, hints: bytes = b"") -> bool:
        """Store ``data`` under ``key`` unless the key has an entry; True if written.

        Write-once: an existing entry is never overwritten (the caller
        compares it: :func:`~cpstore.store.objects.put_object`). A checkpoint
        record's heap entry carries ``hints`` (:meth:`locations`; none: b"").
        """
        index = self.index
        if index is None:
            return bool(txn.put(key, data, overwrite=False, db=self.legacy))
        heap = self.heap
        try:
            tail = _TAILS[heap]  # a subscript: below .get's method call
        except KeyError:
            tail = _tail_of(heap)
        last = tail.last
        if last is not None and last[0] is txn:
            at = last[1] + 1  # this txn appended before: no cursor
        elif (
            last is not None
            and (done := tail.committed) is not None
            and done[0] is last[0]  # nothing appended to this heap since that commit
            and done[1] + 1 == txn.id()  # no commit of any writer since it (HeapTail)
            and last[1] < _LAST_SEQ
        ):
            at = last[1] + 1  # this txn's first append: after that commit's last
        else:
            at = int.from_bytes(next_seq(txn, heap), "big")
        seq = at.to_bytes(SEQ_SIZE, "big")
        # The index row first, write-once: one call both asks and claims the key. The
        # heap's puts are py-lmdb's alone (no other engine has a heap): its positional
        # arguments (dupdata, overwrite, append, db), ~1k instructions below keywords.
        if not txn.put(key, seq, True, False, False, index):
            return False
        if txn.get(key, None, self.legacy) is not None:  # stored before the upgrade
            txn.delete(key, db=index)
            return False
        if self.kind == KIND_RECORD:
            entry = record_entry(key, hints, data)
        else:
            entry = self.heads[len(key)] + key + data
        if not txn.put(seq, entry, True, True, True, self.heap):  # append
            # MDB_APPEND refuses (py-lmdb: returns False) a key not above the last
            # one: only damage puts one there (next_seq checks its length), or a
            # stale HeapTail. The index row claimed above must not name an entry
            # that was not written, so nothing of this txn lands.
            raise IntegrityError(
                "the heap refused an appended entry: its last key is not a location",
                where=f"heap/{int.from_bytes(seq, 'big')}",
                expected="a key above every heap key",
            )
        tail.last = (txn, at)
        return True

    def delete(self, txn: Any, key: bytes) -> bool:
        """Delete ``key``'s entry; True if there was one.

        A location whose heap entry carries another key loses only its index
        row: the entry it names belongs to that other key and stays.
        """
        index = self.index
        if index is not None:
            seq: Any = txn.get(key, None, index)
            if seq is not None:
                loc = bytes(seq)
                entry = txn.get(loc, None, self.heap)
                mine = entry is not None and self._carries(entry, key)
                txn.delete(key, db=index)
                if mine:
                    txn.delete(loc, db=self.heap)
                return True
        return bool(txn.delete(key, db=self.legacy))


def appended_hint(txn: Any, heap: Any) -> bytes | None:
    """The location hint (4 bytes; zero past 2**32 - 1) of the heap entry ``txn`` appended
    last to ``heap`` (the :meth:`Content.add` that returned True), or None when it
    appended none."""
    tail = _TAILS.get(heap)
    last = None if tail is None else tail.last
    if last is None or last[0] is not txn:
        return None
    at = last[1]
    return at.to_bytes(4, "big") if at < _HINT_LIMIT else ZERO4


def _keys_of(txn: Any, db: Any, start: bytes) -> Iterator[bytes]:
    with txn.cursor(db=db) as cur:
        if not cur.set_range(start):
            return
        for key, _ in cur:  # from the position on
            yield bytes(key)


class HeapTail:
    """What this process knows of one heap table handle's last key (one LMDB environment
    handle: its write txns are one at a time), read and replaced whole (tuples).

    ``last``: (the write txn that appended to this heap last, the seq it appended last):
    that txn's next append takes the next seq without a cursor. ``committed``: (a txn
    that was ``last``'s, its LMDB id), set by :func:`tail_committed` once it committed
    as a checkpoint commit (its heap writes were these appends alone). A write txn's
    first append (``last`` names another txn) follows ``last``'s seq without a cursor
    only while ``committed`` names ``last``'s txn (no append to this heap since) and the
    txn's id is that id + 1: LMDB gives a write txn the last committed id + 1, so no
    commit of any writer (process, handle, copy) came in between (docs/store.md, put90).
    Holding the txn objects keeps their identities from being reused.
    """

    __slots__ = ("committed", "last")

    def __init__(self) -> None:
        self.last: tuple[Any, int] | None = None
        self.committed: tuple[Any, int] | None = None


def _tail_of(heap: Any) -> HeapTail:
    tail = _TAILS.get(heap)
    if tail is None:
        if len(_TAILS) >= _MAX_TAILS:
            _TAILS.clear()  # a tail no longer here only costs a cursor: nothing reads it
        tail = _TAILS[heap] = HeapTail()
    return tail


def tail_committed(heap: Any, txn: Any, txn_id: int) -> None:
    """``txn`` (LMDB id ``txn_id``, a checkpoint commit: its only heap writes were
    :meth:`Content.add`'s appends) committed: when it was the last to append to
    ``heap``, the next write txn's first append needs no cursor (:class:`HeapTail`)."""
    tail = _TAILS.get(heap)
    if tail is not None:
        last = tail.last
        if last is not None and last[0] is txn:
            tail.committed = (txn, txn_id)


#: heap table handle (py-lmdb hashes it by identity; kept as the key, its identity is
#: not reused while it is here) -> its HeapTail. Every use looks it up here: a tail
#: dropped by the bound is never written or read again, so one heap never has two.
_TAILS: dict[Any, HeapTail] = {}
_MAX_TAILS = 64
_LAST_SEQ = (1 << 8 * SEQ_SIZE) - 1


_ONLY_8 = frozenset((SEQ_SIZE,))
#: An entry's first 18 bytes: its kind, key length and a 16-byte key.
_HEAD_16 = itemgetter(slice(0, 18))
_ONLY_16 = frozenset((16,))
_HINT_LIMIT = 1 << 32
#: n -> (unpack of n 8-byte BE seqs, pack of a hint block of n): locations' fast path.
_PLANS: dict[int, tuple[Callable[[bytes], tuple[int, ...]], Callable[..., bytes]]] = {}


def _plans(n: int) -> tuple[Callable[[bytes], tuple[int, ...]], Callable[..., bytes]]:
    plan = _PLANS.get(n)
    if plan is None:
        plan = (struct.Struct(f">{n}Q").unpack, struct.Struct(f">{n + 1}I").pack)
        if len(_PLANS) < 256:
            _PLANS[n] = plan
    return plan


def objects_of(dbs: Mapping[str, Any]) -> Content:
    """The objects of the store whose tables are ``dbs``."""
    return Content(dbs, KIND_OBJECT)


def records_of(dbs: Mapping[str, Any]) -> Content:
    """The checkpoint records (``checkpoints`` values) of the store whose tables are ``dbs``."""
    return Content(dbs, KIND_RECORD)
