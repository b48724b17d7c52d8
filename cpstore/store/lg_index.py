"""The LangGraph index: LangGraph checkpoint ids and pending writes, in the ``meta`` table.

:mod:`cpstore.langgraph` stores every LangGraph checkpoint as a cpstore
checkpoint (a run per thread, a branch per namespace and fork). LangGraph
addresses checkpoints by ``(thread_id, checkpoint_ns, checkpoint_id)`` and
keeps pending writes beside them; both live here, under the ``lg/`` prefix of
``meta`` (layout in docs/store.md, "The LangGraph index"). An index entry is
written in the same txn as its checkpoint (``Recorder.checkpoint(extra_meta=)``).

Every value carries a check (the first 8 bytes of XXH3-128 of key and body),
verified on every read: a damaged or moved entry is an :class:`IntegrityError`
naming the key, never another checkpoint's state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import msgpack

from cpstore.errors import CanonicalEncodingError, CpstoreError, IntegrityError, InvalidInputError
from cpstore.native.binding import digest, digest_small
from cpstore.store.backend import Txn
from cpstore.store.content import records_of
from cpstore.store.manifest import decode_trusted
from cpstore.store.model import MAX_KEY_BYTES, MAX_NAME_BYTES, Problem

__all__ = [
    "CHECKPOINT_PREFIX",
    "HASHED_RUN",
    "HASH_SCHEME",
    "MAX_CHECKPOINT_NAMES",
    "MAX_WRITE_NAMES",
    "WRITE_PREFIX",
    "check_index",
    "checked",
    "checked_entry_key",
    "checkpoint_key",
    "field",
    "field_free",
    "get",
    "over_limit",
    "pack",
    "scan",
    "split_checkpoint_key",
    "thread_ns",
    "thread_runs",
    "unpack",
    "write_key",
    "write_prefix",
]

#: ``lg/c/`` thread ns checkpoint_id -> a checkpoint entry (canonical map, below).
CHECKPOINT_PREFIX = b"lg/c/"
#: ``lg/w/`` thread ns checkpoint_id task_id idx -> one pending write.
WRITE_PREFIX = b"lg/w/"

_CHECK = 8
_MAX_FIELD = 0xFFFF
_IDX_BIAS = 1 << 63
#: Fixed bytes of an entry key: the prefix and two 2-byte field lengths.
_ENTRY_FIXED = len(CHECKPOINT_PREFIX) + 4
#: Fixed bytes of a checkpoint's pending-writes prefix (three field lengths).
_WRITES_FIXED = len(WRITE_PREFIX) + 6
#: Fixed bytes of a pending write's key (four field lengths and the 8-byte index).
_WRITE_FIXED = _WRITES_FIXED + 2 + 8
#: Most UTF-8 bytes ``thread_id``, ``checkpoint_ns`` and ``checkpoint_id`` may hold
#: together (500): the entry key (9 bytes more) and the prefix of the checkpoint's
#: pending writes (11 more) then fit in a store key (``MAX_KEY_BYTES``, 511).
MAX_CHECKPOINT_NAMES = MAX_KEY_BYTES - _WRITES_FIXED
#: Most UTF-8 bytes those three and a pending write's ``task_id`` may hold together
#: (490): its key is 21 bytes more.
MAX_WRITE_NAMES = MAX_KEY_BYTES - _WRITE_FIXED


#: The tag of the saver's hashed names (scheme 2): ``<prefix>b2:<BLAKE2b-256 hex>``.
HASH_SCHEME = "b2:"
#: The prefix of every hashed run name: scheme 2 ``lg:#b2:<64 hex>``, and scheme 1
#: ``lg:#<32 hex>`` (XXH3-128, written by releases before scheme 2; still read, continued,
#: deleted and pruned, docs/langgraph.md "Hashed names").
HASHED_RUN = "lg:#"


def _is_name(name: str) -> bool:
    """Whether ``name`` can be a run name as the saver names runs (``_codec.run_for``)."""
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(raw) <= MAX_NAME_BYTES and b"\x00" not in raw


def thread_runs(thread_id: str) -> frozenset[str]:
    """Every run a saver release recorded LangGraph thread ``thread_id`` on: ``lg:<thread>``
    for a plain id; for a hashed one (too long, holding NUL, or starting with ``#``) its
    scheme-2 run, its scheme-1 run (``lg:#<XXH3-128 hex>``) and, when ``lg:<thread>`` fits
    a name, that (a release before the ``#`` rule). An index entry of the thread naming
    any other run was not written by a saver: ``verify()`` reports it, and the saver's
    root puts, ``delete_thread`` and ``prune`` refuse to follow it (audit28: a root put
    followed it onto another thread's run, and ``delete_thread`` then swept that run)."""
    name = "lg:" + thread_id
    fits = _is_name(name)
    if fits and not thread_id.startswith("#"):
        return frozenset((name,))
    raw = thread_id.encode("utf-8", "surrogatepass")
    runs = {
        HASHED_RUN + HASH_SCHEME + hashlib.blake2b(raw, digest_size=32).hexdigest(),
        HASHED_RUN + digest(raw).hex(),
    }
    if fits:
        runs.add(name)
    return frozenset(runs)


def _fits(key: bytes, fixed: int, limit: int, names: str) -> bytes:
    """``key`` when its names (its bytes but the ``fixed`` ones) are within ``limit``;
    else InvalidInputError, before anything is read or written with it. Both backends
    build their keys here, so both refuse alike (docs/store.md, "Key sizes")."""
    if len(key) - fixed > limit:
        raise InvalidInputError(
            f"LangGraph {names} are too long for a store key",
            expected=f"<= {limit} UTF-8 bytes together (keys are at most {MAX_KEY_BYTES} bytes)",
            got=len(key) - fixed,
        )
    return key


def field(text: str, what: str) -> bytes:
    """``text`` as a length-prefixed key field (2 bytes big-endian, then UTF-8)."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} must be a str", got=type(text).__name__)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} has no UTF-8 form", got=repr(text)) from None
    if len(raw) > _MAX_FIELD:
        raise InvalidInputError(
            f"{what} is too long", expected=f"<= {_MAX_FIELD} UTF-8 bytes", got=len(raw)
        )
    return len(raw).to_bytes(2, "big") + raw


def checkpoint_key(
    thread_id: str,
    ns: str | None = None,
    checkpoint_id: str | None = None,
    *,
    sized: bool = True,
) -> bytes:
    """The entry key, or the prefix of a thread's (or a namespace's) entries.

    InvalidInputError when the names hold more than :data:`MAX_CHECKPOINT_NAMES` UTF-8
    bytes together (a prefix too), unless ``sized`` is False: a read or a delete of what
    an older release stored (PostgreSQL took longer names; LMDB entry keys up to 511
    bytes) builds its key unsized and looks it up with :func:`scan` or :func:`get`."""
    key = CHECKPOINT_PREFIX + field(thread_id, "thread_id")
    if ns is None:
        return _fits(key, _ENTRY_FIXED - 2, MAX_CHECKPOINT_NAMES, _NAMES) if sized else key
    key += field(ns, "checkpoint_ns")
    if checkpoint_id is not None:
        key += field_free(checkpoint_id, "checkpoint_id")
    return _fits(key, _ENTRY_FIXED, MAX_CHECKPOINT_NAMES, _NAMES) if sized else key


def field_free(text: str, what: str) -> bytes:
    """``text`` in UTF-8, the last field of a key (no length): InvalidInputError when it
    is not a str or has no UTF-8 form (a lone surrogate), never UnicodeEncodeError."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} must be a str", got=type(text).__name__)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} has no UTF-8 form", got=repr(text)) from None


_NAMES = "thread_id, checkpoint_ns and checkpoint_id"
_WRITE_NAMES = "thread_id, checkpoint_ns, checkpoint_id and task_id"


def over_limit(*names: str, limit: int = MAX_CHECKPOINT_NAMES) -> bool:
    """True when ``names`` hold more than ``limit`` UTF-8 bytes together: no key of
    them is stored, so a read naming them finds nothing (a name without a UTF-8 form
    is False: the key builder names that error)."""
    try:
        return sum(len(n.encode("utf-8")) for n in names) > limit
    except UnicodeEncodeError:
        return False


def checked_entry_key(key: bytes) -> bytes:
    """An entry key built by a caller (``_read.entry_key``), sized as :func:`checkpoint_key`
    sizes it."""
    return _fits(key, _ENTRY_FIXED, MAX_CHECKPOINT_NAMES, _NAMES)


def split_checkpoint_key(key: bytes) -> tuple[str, str, str]:
    """``(thread_id, checkpoint_ns, checkpoint_id)`` of an entry key."""
    try:
        at = len(CHECKPOINT_PREFIX)
        end = at + 2 + int.from_bytes(key[at : at + 2], "big")
        ns_end = end + 2 + int.from_bytes(key[end : end + 2], "big")
        if len(key) < ns_end:
            raise ValueError("short field")
        return (
            key[at + 2 : end].decode("utf-8"),
            key[end + 2 : ns_end].decode("utf-8"),
            key[ns_end:].decode("utf-8"),
        )
    except (ValueError, UnicodeDecodeError):
        raise IntegrityError("damaged LangGraph index key", where=f"meta/{key!r}") from None


def thread_ns(thread_id: str, ns: str) -> bytes:
    """The thread and namespace fields every key of a namespace's records holds."""
    return field(thread_id, "thread_id") + field(ns, "checkpoint_ns")


def write_key(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str | None = None,
    idx: int = 0,
    *,
    sized: bool = True,
) -> bytes:
    """A pending write's key, or (``task_id`` None) the prefix of a checkpoint's writes
    (``sized``: as :func:`checkpoint_key`)."""
    key = write_prefix(thread_ns(thread_id, ns), checkpoint_id, sized=sized)
    if task_id is None:
        return key
    key += field(task_id, "task_id") + (idx + _IDX_BIAS).to_bytes(8, "big")
    return _fits(key, _WRITE_FIXED, MAX_WRITE_NAMES, _WRITE_NAMES) if sized else key


def write_prefix(names: bytes, checkpoint_id: str, *, sized: bool = True) -> bytes:
    """The prefix of a checkpoint's pending writes; ``names`` is :func:`thread_ns`
    (InvalidInputError past :data:`MAX_CHECKPOINT_NAMES`, as :func:`checkpoint_key`)."""
    key = WRITE_PREFIX + names + field(checkpoint_id, "checkpoint_id")
    return _fits(key, _WRITES_FIXED, MAX_CHECKPOINT_NAMES, _NAMES) if sized else key


def get(txn: Txn[memoryview], db: Any, key: bytes) -> bytes | None:
    """The value stored under ``key``, or None; a key longer than an LMDB key may be
    (stored on PostgreSQL by an older release) is looked up by :func:`scan`, so the
    same call finds it there and finds nothing on LMDB, which cannot hold it."""
    if len(key) <= MAX_KEY_BYTES:
        found = txn.get(key, None, db)  # positional: py-lmdb parses a keyword ~1k slower
        return None if found is None else bytes(found)
    for k, value in scan(txn, db, key):
        if k == key:
            return value
        break
    return None


def pack(key: bytes, body: Any) -> bytes:
    """The stored value of ``body`` under ``key``: msgpack bytes, then the check.

    Plain msgpack of the body as built (the callers build it in one field
    order), not the canonical encoding: the check certifies the bytes, and
    nothing is addressed by their digest. A str without a UTF-8 form (a pending
    write's channel or task_path holding a lone surrogate) is InvalidInputError.
    """
    try:
        data: bytes = msgpack.packb(body, use_bin_type=True)
    except UnicodeEncodeError as exc:  # a lone surrogate in a name (channel, task_path)
        raise InvalidInputError(
            "a LangGraph index record holds a str without a UTF-8 form",
            where=f"meta/{key[:64]!r}",
            got=repr(exc.object[exc.start : exc.end]),
        ) from None
    return data + digest(key + data)[:_CHECK]


def checked(key: bytes, value: bytes | memoryview) -> bytes | None:
    """The msgpack bytes of the body stored under ``key`` once its check passed, else None."""
    raw = bytes(value)
    data = raw[:-_CHECK]
    # digest_small: digest()'s bytes at any size, without its wrapper call
    if len(raw) <= _CHECK or digest_small(key + data)[:_CHECK] != raw[-_CHECK:]:
        return None
    return data


def unpack(key: bytes, value: bytes | memoryview) -> Any:
    """The body stored under ``key``, its check verified."""
    data = checked(key, value)
    if data is None:
        raw = bytes(value)
        raise IntegrityError(
            "LangGraph index entry fails its check", where=f"meta/{key!r}", got=raw[:32].hex()
        )
    try:  # written by encode_value and certified by the check: no re-encode
        return decode_trusted(data)
    except CanonicalEncodingError:  # pragma: no cover - the check passed
        raise IntegrityError(
            "LangGraph index entry is not canonical", where=f"meta/{key!r}"
        ) from None


def scan(
    txn: Txn[memoryview],
    db: Any,
    prefix: bytes,
    *,
    reverse: bool = False,
    below: bytes | None = None,
) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of every record under ``prefix``, in key order (or reversed).

    ``below`` (reversed only): start below this key instead of at the end.
    A prefix longer than an LMDB key may be seeks at its first ``MAX_KEY_BYTES`` bytes
    and skips the keys there that do not start with it: on PostgreSQL (where an older
    release stored longer keys) it finds them; on LMDB, which cannot hold them, nothing.
    """
    seek = prefix if len(prefix) <= MAX_KEY_BYTES else prefix[:MAX_KEY_BYTES]
    long = seek is not prefix
    cursor = txn.cursor(db=db)
    if not reverse:
        if not cursor.set_range(seek):
            return
        for raw, value in cursor:
            key = bytes(raw)
            if not key.startswith(seek):
                return
            if long and not key.startswith(prefix):
                continue
            yield key, bytes(value)
        return
    upper = _after(seek) if below is None else below
    positioned = cursor.set_range(upper) if upper is not None else False
    if positioned:
        if not cursor.prev():
            return
    elif not cursor.last():
        return
    while True:
        key = bytes(cursor.key())
        if not key.startswith(seek):
            return
        if not long or key.startswith(prefix):
            yield key, bytes(cursor.value())
        if not cursor.prev():
            return


def _after(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: none)."""
    raw = bytearray(prefix)
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return None


def _oversized(prefix: bytes, key: bytes) -> Problem | None:
    """An index key a put may no longer write (an older release's, on PostgreSQL): a
    store holding it cannot move to LMDB, and ``prune`` refuses its thread."""
    if prefix == CHECKPOINT_PREFIX:
        fixed, limit, names = _ENTRY_FIXED, MAX_CHECKPOINT_NAMES, _NAMES
    else:
        fixed, limit, names = _WRITE_FIXED, MAX_WRITE_NAMES, _WRITE_NAMES
    if len(key) - fixed <= limit:
        return None
    return Problem(
        f"LangGraph {names} are too long for a store key (written by an older release; "
        "LMDB cannot hold it: copy_thread to a shorter thread_id, then delete_thread)",
        f"meta/{key[:64]!r}...",
        expected=f"<= {limit} UTF-8 bytes together",
        got=len(key) - fixed,
    )


def check_index(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    problems: list[Problem],
    parents: Mapping[bytes, str | None] | None = None,
) -> int:
    """Verify every LangGraph index record; returns how many there are (``verify()``).

    Each record's check, each entry's shape, that the checkpoint an entry
    names is stored or was pruned by retention (a tombstone), and, given
    ``parents`` (checkpoint -> its cpstore parent, hex), each entry's lineage
    (:func:`_check_lineage`).
    """
    count = 0
    # (thread, ns, checkpoint id, cpstore checkpoint, LangGraph parent, where) per entry
    entries: list[tuple[str, str, str, bytes, Any, str]] = []
    for prefix in (CHECKPOINT_PREFIX, WRITE_PREFIX):
        for key, value in scan(txn, dbs["meta"], prefix):
            count += 1
            where = f"meta/{key!r}"
            oversized = _oversized(prefix, key)
            if oversized is not None:
                problems.append(oversized)
            try:
                body = unpack(key, value)
                if prefix != CHECKPOINT_PREFIX:
                    continue
                thread, ns, checkpoint_id = split_checkpoint_key(key)
                cid = body["cp"] if isinstance(body, dict) else None
                if not isinstance(cid, bytes) or len(cid) != 16:
                    problems.append(Problem("LangGraph index entry has the wrong shape", where))
                    continue
                entries.append((thread, ns, checkpoint_id, cid, body.get("parent"), where))
                run = body.get("run")
                if isinstance(run, str) and run not in thread_runs(thread):
                    problems.append(
                        Problem(
                            "LangGraph index entry names a run that is not its thread's",
                            where,
                            expected=f"one of {sorted(thread_runs(thread))}",
                            got=run,
                        )
                    )
            except CpstoreError as exc:
                problems.append(Problem(exc.what, where, got=exc.got))
                continue
            stored = records_of(dbs).exists(txn, cid)
            if not stored and txn.get(cid, db=dbs["tombstones"]) is None:
                problems.append(
                    Problem(
                        "LangGraph index names a checkpoint that is not stored",
                        where,
                        expected=cid.hex(),
                    )
                )
    if parents is not None:
        _check_lineage(entries, parents, problems)
    return count


def _check_lineage(
    entries: list[tuple[str, str, str, bytes, Any, str]],
    parents: Mapping[bytes, str | None],
    problems: list[Problem],
) -> None:
    """An entry whose cpstore checkpoint extends a checkpoint that another index entry
    names is that entry's LangGraph child: the parent's entry is the entry's own
    LangGraph parent (same thread and namespace). The saver records a put from its
    parent's checkpoint, or as a root; a put recorded as the child of a checkpoint it
    never saw (the continue race fixed in flaky5) passed every other check.

    Only what is provable is judged: a cpstore parent that no entry names (its entry
    moved to a kept copy by ``keep_latest``, was deleted by ``delete_for_runs``, or the
    checkpoint is not the saver's) and a root are left alone, so a reclaim that moves
    entries one txn at a time never shows a false problem between its txns.
    """
    owners: dict[bytes, set[tuple[str, str, str]]] = {}
    for thread, ns, checkpoint_id, cid, _, _ in entries:
        owners.setdefault(cid, set()).add((thread, ns, checkpoint_id))
    for thread, ns, _, cid, lg_parent, where in entries:
        parent = parents.get(cid)
        if parent is None:
            continue  # a root, or the checkpoint is not stored (reported above)
        named = owners.get(bytes.fromhex(parent))
        if named is None or (thread, ns, lg_parent) in named:
            continue
        problems.append(
            Problem(
                "LangGraph checkpoint extends a checkpoint that is not its LangGraph parent's",
                where,
                expected=f"the checkpoint of {lg_parent!r}" if lg_parent else "a root",
                got=f"{parent} (the checkpoint of {sorted(c for _, _, c in named)})",
            )
        )
