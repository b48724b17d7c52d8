"""Objects on a txn: write-once puts, verified gets, and chunked values.

Engine-neutral: everything here goes through the :class:`~cpstore.store.backend.Txn`
protocol, so every backend stores objects the same way.
"""

from __future__ import annotations

from cpstore.errors import IntegrityError, NotFoundError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.native.records import DIGEST_SIZE, Digest
from cpstore.store.backend import Txn
from cpstore.store.chunk_tree import load_tree
from cpstore.store.codec import check_frame, is_frame_key
from cpstore.store.content import Content
from cpstore.store.model import CHUNK_SIZE, parse_id

__all__ = ["as_digest", "chunk_index", "get_object", "load_chunked", "named_object", "put_object"]


def put_object(
    txn: Txn[memoryview], objects: Content, key: bytes, data: bytes | memoryview
) -> bool:
    """Write-once put of ``data`` under its digest ``key``; True if it was new.

    An existing identical object is a no-op; different bytes under the key
    mean the stored copy is corrupt, which is an :class:`IntegrityError`. A
    frame (17-byte key) may be stored compressed differently by another zstd
    build: there the chunk bytes are compared, not the stored ones.
    """
    if objects.add(txn, key, data):
        return True
    existing = objects.get(txn, key)
    if existing is not None and len(existing) == len(data) and existing == data:
        return False
    where = f"objects/{key.hex()}"
    if existing is not None and is_frame_key(key):
        check_frame(key, existing, where)  # raises when the stored frame is damaged
        return False
    got = None if existing is None else digest(existing).hex()
    raise IntegrityError(
        "different bytes are stored under this digest",
        where=where,
        expected=key.hex(),
        got=got,
    )


def get_object(
    txn: Txn[memoryview], objects: Content, key: bytes, *, verify: bool, where: str
) -> memoryview:
    """Zero-copy view of an object as stored, hash-checked unless ``verify`` is False.

    A frame (a chunk under its 17-byte key) is checked by its content.
    """
    view = objects.get(txn, key)
    if view is None:
        raise NotFoundError("object not in the store", where=where, got=bytes(key).hex())
    if verify and is_frame_key(key):
        check_frame(bytes(key), view, where)  # a frame: inflated (bounded) and hashed
    elif verify:
        got = digest(view)
        if got != key:
            raise IntegrityError(
                "object bytes do not match their digest",
                where=where,
                expected=bytes(key).hex(),
                got=got.hex(),
            )
    return view


def named_object(
    txn: Txn[memoryview], objects: Content, key: bytes, *, verify: bool, where: str
) -> memoryview:
    """:func:`get_object` of an object a stored checkpoint's (hash-checked) manifest names:
    missing, it is damage (:class:`IntegrityError`), not absence. No sweep removes an
    object a stored checkpoint names, so a lookup that misses met a flipped key or a lost
    row (cli99: ``inspect`` said "object not in the store", exit 4)."""
    try:
        return get_object(txn, objects, key, verify=verify, where=where)
    except NotFoundError as exc:
        raise IntegrityError(
            "an object this checkpoint names is not in the store (damaged or lost)",
            where=exc.where,
            expected="stored",
            got=exc.got,
        ) from None


def chunk_index(data: bytes) -> tuple[list[bytes], bytes]:
    """Fixed-size chunks of ``data`` and the canonical bytes of their index (layout 2).

    cpstore writes chunk trees now (:mod:`cpstore.store.chunk_tree`); this
    writer stays so tests can build what layout-2 stores hold.
    """
    chunks = [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]
    index = encode_value([len(data), [digest(c) for c in chunks]])
    return chunks, index


def load_chunked(
    txn: Txn[memoryview],
    objects: Content,
    index_key: bytes,
    whole: bytes,
    *,
    verify: bool,
    where: str,
) -> bytes:
    """Reassemble a chunked value from its chunk tree (or layout-2 index); checks the whole."""
    return load_tree(txn, objects, index_key, whole, verify=verify, where=where)


def as_digest(value: object, what: str = "digest") -> Digest:
    """A raw digest from raw bytes (16) or a 32-character hex str."""
    if isinstance(value, (bytes, bytearray)) and len(value) == DIGEST_SIZE:
        return Digest(bytes(value))
    return parse_id(value, what)
