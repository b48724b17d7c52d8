"""Data shapes of the store and the byte layouts of its keys and manifests.

Everything here is pure: argument checks, key and checkpoint-value codecs
and the frozen result types (the manifest codec is :mod:`cpstore.store.manifest`).
Nothing in this module touches LMDB.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from cpstore.errors import (
    CanonicalEncodingError,
    CpstoreError,
    IntegrityError,
    InvalidInputError,
    ReentrantWriteError,
)
from cpstore.native.args import as_bytes_view, check_text
from cpstore.native.binding import digest, digest_small
from cpstore.native.fast_canonical import encode_fast
from cpstore.native.records import DIGEST_SIZE, Digest

__all__ = [
    "BARE_REF_LAYOUTS",
    "CHUNK_SIZE",
    "EXTENSION_META_PREFIXES",
    "HEAP_LAYOUT",
    "MANIFEST_VERSION",
    "MAX_KEY_BYTES",
    "MAX_NAME_BYTES",
    "MAX_OBJECT_SIZE",
    "PG_STORE_VERSION",
    "READABLE_VERSIONS",
    "STORE_VERSION",
    "AuditRecord",
    "CheckpointWrite",
    "Problem",
    "VerifyReport",
    "as_payload",
    "check_created",
    "check_name",
    "commit_stored",
    "created_at_of",
    "hex_id",
    "parse_id",
    "ref_key",
    "ref_where",
    "split_checkpoint_value",
    "split_ref_key",
]

# -- store layout versions: every version number the code checks is here -----
#: Version of the store layout (named databases and key layouts, docs/store.md).
#: 3 (issue 16): chunked values are chunk trees over content-defined, framed
#: (compressed) chunks. 4: chunk-tree roots are root v2 (level 1's tail inline,
#: the upper levels' tails in one upper-spine object; docs/format.md). 5 (issue 12):
#: objects and checkpoint records appended to the ``heap`` table under sequential
#: keys, found through the ``oloc``/``cloc`` indexes (LMDB; cpstore/store/content.py).
#: 6 (issue 12): checkpoint records written as compact ``r`` heap entries (zstd
#: with a fixed dictionary, cpstore/store/record_codec.py); layout-5 ``c`` entries
#: stay readable (a lazy upgrade: nothing is rewritten).
STORE_VERSION = 6
#: Layouts a store may have on open: older ones are upgraded in place on a
#: writable open and read as they are on a read-only one (docs/store.md,
#: "Store layout versions").
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
#: The first layout with the heap tables (objects and checkpoint records appended).
HEAP_LAYOUT = 5
#: The layout a PostgreSQL store is brought to: 5 and 6 changed only LMDB's heap, so a
#: PostgreSQL store stays at 5 and a layout-5 release keeps sharing it (one a layout-6
#: release opened writable earlier may say 6: both hold the same data).
PG_STORE_VERSION = 5
#: Layouts whose ref values are bare ids: their upgrade rewrites the refs table.
BARE_REF_LAYOUTS = (1,)
# -----------------------------------------------------------------------------
#: Version of the manifest encoding (docs/store.md, "Manifest format version 1").
MANIFEST_VERSION = 1
#: Chunk size of layout-2 chunk indexes (read, no longer written: layout 3
#: stores chunk trees, cpstore/store/chunk_tree.py).
CHUNK_SIZE = 64 * 1024
#: Largest single object accepted (1 GiB); larger values are refused, never cut.
MAX_OBJECT_SIZE = 1 << 30
#: Longest run id or branch name, in UTF-8 bytes (LMDB keys are at most 511).
MAX_NAME_BYTES = 200
#: Longest key of any table, in bytes: LMDB's maximum key size. A key built from
#: names a caller chose (a ref: run NUL branch, at most 401 bytes by MAX_NAME_BYTES;
#: a LangGraph index key: cpstore/store/lg_index.py; an ``extra_meta`` key) is refused
#: over it with InvalidInputError before anything is written, on both backends alike,
#: so every store can be moved to the other backend (docs/store.md, "Key sizes").
MAX_KEY_BYTES = 511

_CREATED = struct.Struct("<d")
#: Bytes of the created_at check that follows it in a ``checkpoints`` value.
_CHECK_SIZE = 8
#: created_at + its check: the manifest starts here in a ``checkpoints`` value.
_HEADER_SIZE = _CREATED.size + _CHECK_SIZE


def check_name(value: object, what: str) -> str:
    """A run id or branch name, or :class:`InvalidInputError` naming ``what``."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str", got=type(value).__name__)
    raw = check_text(value, what).encode("utf-8")
    if not raw or len(raw) > MAX_NAME_BYTES or "\x00" in value:
        raise InvalidInputError(
            f"{what} must be 1 to {MAX_NAME_BYTES} UTF-8 bytes without NUL",
            got=value,
        )
    return value


def as_payload(value: object, what: str) -> bytes:
    """Bytes of a payload argument, or :class:`InvalidInputError` (size, type)."""
    data = bytes(as_bytes_view(value, what))
    if len(data) > MAX_OBJECT_SIZE:
        raise InvalidInputError(
            f"{what} is larger than the largest object",
            expected=f"<= {MAX_OBJECT_SIZE} bytes",
            got=f"{len(data)} bytes",
        )
    return data


#: ``bytes.fromhex`` typed as giving a Digest once, here, not by a ``Digest()`` call per
#: id parsed (perf99: a NewType call, ~0.7k instructions of every ``Store.read``).
_digest_of_hex = cast(Callable[[str], Digest], bytes.fromhex)


def parse_id(value: object, what: str = "checkpoint id") -> Digest:
    """Raw digest of a 32-character hex id, or :class:`InvalidInputError`."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a 32-character hex str", got=type(value).__name__)
    if len(value) != 2 * DIGEST_SIZE:
        raise InvalidInputError(f"{what} must be a 32-character hex str", expected=32, got=value)
    try:
        return _digest_of_hex(value)
    except ValueError:
        raise InvalidInputError(f"{what} is not hex", got=value) from None


def hex_id(raw: bytes | None) -> str | None:
    """Lowercase hex of a raw digest (None stays None)."""
    return None if raw is None else bytes(raw).hex()


def ref_key(run_id: str, branch: str) -> bytes:
    """Key of a ref: ``run_id`` UTF-8, NUL, ``branch`` UTF-8."""
    last = _LAST_REF_KEY[0]
    if last[0] is run_id and last[1] is branch:  # the very str objects: the same bytes
        return last[2]
    key = run_id.encode("utf-8", "surrogatepass") + b"\0" + branch.encode("utf-8", "surrogatepass")
    if type(run_id) is str and type(branch) is str:  # never a subclass's (its encode may vary)
        _LAST_REF_KEY[0] = (run_id, branch, key)
    return key


#: (run_id, branch, ref key) of the last :func:`ref_key` of two plain strs: a commit asks
#: for its recorder's key every put (~2.6k instructions to encode). One slot, replaced whole.
_LAST_REF_KEY: list[tuple[object, object, bytes]] = [(object(), object(), b"")]


def split_ref_key(key: bytes | memoryview) -> tuple[str, str]:
    """(run_id, branch) of a ref key."""
    raw = bytes(key)
    run, _, branch = raw.partition(b"\0")
    try:
        return run.decode("utf-8", "surrogatepass"), branch.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # only damage writes a key no name encodes to
        raise IntegrityError("a ref key is not UTF-8", where="refs", got=raw) from None


def ref_where(key: bytes | memoryview) -> str:
    """Where a ref row is, for an error or a problem: ``refs/RUN/BRANCH``, or ``refs/<hex>``
    for a key no name encodes to (only damage writes one: review101)."""
    try:
        run, branch = split_ref_key(key)
    except IntegrityError:
        return f"refs/{bytes(key).hex()}"
    return f"refs/{run}/{branch}"


def _created_check(cid: bytes, created: bytes | memoryview) -> bytes:
    """The 8-byte check of a ``checkpoints`` header: XXH3-128(id || created_at)[:8]."""
    return digest_small(bytes(cid) + bytes(created))[:_CHECK_SIZE]  # digest()'s bytes


def pack_checkpoint_value(created_at: float, manifest: bytes, cid: bytes | None = None) -> bytes:
    """Value of a ``checkpoints`` entry: created_at (float64 LE), its check, the manifest.

    ``cid`` is the digest of ``manifest`` (computed when not given).
    """
    created = _CREATED.pack(created_at)
    key = digest(manifest) if cid is None else cid
    if type(key) is bytes:  # _created_check's bytes, without copying what is bytes already
        return created + digest_small(key + created)[:_CHECK_SIZE] + manifest
    return created + _created_check(key, created) + manifest


def split_checkpoint_value(value: bytes | memoryview, cid: bytes) -> tuple[bytes, memoryview]:
    """(16-byte header, manifest view) of a ``checkpoints`` entry; nothing is checked.

    IntegrityError when the entry is shorter than its header. The header is
    copied, so it outlives the txn; check it with :func:`created_at_of`.
    """
    if len(value) < _HEADER_SIZE:
        unpack_checkpoint_value(value, cid)  # raises, naming the checkpoint
    view = memoryview(value)
    return bytes(view[:_HEADER_SIZE]), view[_HEADER_SIZE:]


def created_at_of(header: bytes, cid: bytes | None) -> float:
    """created_at of a ``checkpoints`` header, its check verified when ``cid`` is given."""
    return unpack_checkpoint_value(header, cid)[0]


def check_created(header: bytes, cid: bytes) -> None:
    """:func:`created_at_of`'s check of a ``checkpoints`` header, its value not built.

    The common case (a 16-byte header of bytes whose check matches) is one digest
    and one compare; anything else goes through :func:`unpack_checkpoint_value`,
    which raises the same IntegrityError naming the checkpoint as ``created_at_of``.
    A reader that verifies the header without using created_at (the LangGraph
    saver's reads) pays ~1/4 of ``created_at_of``'s cost.
    """
    if (
        type(header) is bytes
        and type(cid) is bytes
        and len(header) == _HEADER_SIZE
        and digest_small(cid + header[: _CREATED.size])[:_CHECK_SIZE] == header[_CREATED.size :]
    ):
        return
    unpack_checkpoint_value(header, cid)


def unpack_checkpoint_value(
    value: bytes | memoryview, cid: bytes | None = None
) -> tuple[float, memoryview]:
    """(created_at, manifest bytes view) of a ``checkpoints`` entry.

    With ``cid`` the header check is verified (IntegrityError naming the
    checkpoint); every verified read passes it. Without it nothing in the
    header is checked (the manifest is checked against the id separately).
    """
    view = memoryview(value)
    if len(view) < _HEADER_SIZE:
        raise IntegrityError(
            "checkpoint entry is shorter than its header",
            where=None if cid is None else f"checkpoints/{bytes(cid).hex()}",
            expected=f">= {_HEADER_SIZE} bytes",
            got=len(view),
        )
    if cid is not None:
        head = bytes(view[:_HEADER_SIZE])
        want = _created_check(cid, head[: _CREATED.size])
        if head[_CREATED.size :] != want:
            raise IntegrityError(
                "checkpoint created_at does not match its check",
                where=f"checkpoints/{bytes(cid).hex()}.created_at",
                expected=want.hex(),
                got=head[_CREATED.size :].hex(),
            )
    return _CREATED.unpack_from(view)[0], view[_HEADER_SIZE:]


#: ``meta`` key prefixes a checkpoint commit may write beside the checkpoint
#: (``Recorder.checkpoint(extra_meta=)``): ``lg/`` is the LangGraph index
#: (cpstore/store/lg_index.py). Anything else in ``meta`` is the store's own.
EXTENSION_META_PREFIXES: tuple[bytes, ...] = (b"lg/",)


@dataclass
class CheckpointWrite:
    """Everything one checkpoint commits in one txn (built by the recorder)."""

    cid: Digest
    value: bytes
    run_id: str
    branch: str
    expected_ref: bytes | None
    parent: bytes | None
    objects: dict[bytes, bytes] = field(default_factory=dict)
    must_exist: list[bytes] = field(default_factory=list)
    sealed_ledger: bytes | None = None
    #: ``meta`` records written (value) or deleted (None) in the same txn; keys
    #: are under an extension prefix (``EXTENSION_META_PREFIXES``, docs/store.md).
    extra_meta: tuple[tuple[bytes, bytes | None], ...] = ()
    #: ``meta`` records (same prefixes) that must hold exactly these bytes when the txn
    #: applies the write, else ConflictError and nothing written: a record it replaces
    #: is still the one read (a LangGraph prune moving a kept entry: a delete wins).
    meta_expected: tuple[tuple[bytes, bytes], ...] = ()
    #: The state parts' object keys in the manifest's order: the commit stores
    #: their heap locations beside the record as read hints (content.py).
    hint_keys: tuple[bytes, ...] = ()
    #: Set once the batch holding it is known to have committed (batched mode), or the
    #: commit a signal handler's exception interrupted is read back stored (any mode). A
    #: ``checkpoint()`` call may then still raise (its flush tells this thread of
    #: earlier checkpoints another thread's failed commit dropped; the handler's
    #: exception); the recorder follows the stored checkpoint all the same.
    committed: bool = False
    #: Shared with the recorder that built it: the error of a batch commit that dropped
    #: it, not stored, or its outcome unknown (the batch's own failure, or an interrupt or
    #: a handler's exception the read-back could not settle; never one whose batch was
    #: queued again: ``BatchOwners.settled``, inflight102), or of its being taken off the
    #: queue for extending a dropped one (``BatchOwners._cut``). The recorder then refuses
    #: to extend it (hunt100: each later checkpoint of that recorder failed the batch
    #: holding it, other recorders' checkpoints with it), unless, the outcome unknown, the
    #: branch's stored head is it (review101).
    dropped: list[BaseException] = field(default_factory=list)


def commit_stored(
    commit: Callable[[CheckpointWrite], None], op: CheckpointWrite
) -> BaseException | None:
    """``commit(op)``; its exception when ``op`` is stored all the same, else None (raises
    it when ``op`` is not stored, or not known to be).

    Batched mode: a ``checkpoint()`` that fills the batch flushes, and that flush
    then tells this thread of earlier checkpoints another thread's failed commit
    dropped. Its own checkpoint is stored, so the recorder must follow it (else its
    next checkpoint conflicts with its own head) and the caller must be told: the
    error gets a note naming the stored id (tests/test_batched_stored_then_raised.py).
    Any mode: a signal handler's exception (or an interrupt) landing once the commit
    was stored is raised the same way, the recorder following the stored checkpoint
    (tests/test_sync_handler_exception.py).
    """
    try:
        commit(op)
    except BaseException as exc:
        if not op.committed:
            raise
        exc.add_note(
            f"cpstore: this call's checkpoint {bytes(op.cid).hex()} IS stored; "
            + (
                "the error is about others (checkpoints this thread queued before it), or "
                "came after its commit"
                if isinstance(exc, CpstoreError) and not isinstance(exc, ReentrantWriteError)
                else "this exception (a signal handler's, or an interrupt) came after its commit"
            )
        )
        return exc
    return None


def check_metadata(value: object, what: str) -> dict[str, Any]:
    """A metadata/detail mapping with str keys that has a canonical encoding."""
    return checked_metadata(value, what)[0]


def checked_metadata(value: object, what: str) -> tuple[dict[str, Any], bytes]:
    """:func:`check_metadata` and the canonical bytes it checked (one encoding)."""
    if value is None:
        return {}, b"\x80"
    if type(value) is not dict and not isinstance(value, Mapping):  # a dict: no ABC check
        raise InvalidInputError(f"{what} must be a mapping", got=type(value).__name__)
    out = dict(value)
    for key in out:
        if not isinstance(key, str):
            raise InvalidInputError(f"{what} keys must be str", got=key)
    try:
        encoded = encode_fast(out)  # encode_value's bytes and errors, without its walk
    except CanonicalEncodingError as exc:  # its path starts at "$": name the argument
        raise CanonicalEncodingError(
            exc.what, where=what + (exc.where or "$")[1:], expected=exc.expected, got=exc.got
        ) from None
    return out, encoded


def check_tags(tags: object) -> tuple[str, ...]:
    """Provenance tags as a tuple of non-empty str."""
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise InvalidInputError("tags must be a sequence of str", got=type(tags).__name__)
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise InvalidInputError("each tag must be a non-empty str", got=tag)
        check_text(tag, "tags")
    return tuple(tags)


@dataclass(frozen=True)
class AuditRecord:
    """One record of the hash-chained, append-only audit log."""

    index: int
    """Position in the log, from 0."""
    digest: str
    """Hex digest of the record's canonical bytes (its identity)."""
    prev: str | None
    """Digest of the previous record; None for the first."""
    kind: str
    """What the record is about (e.g. ``"decision"``, ``"signoff"``)."""
    body: dict[str, Any]
    """The record's content (canonical values)."""
    time: float
    """Wall-clock time of the append (seconds since the epoch)."""


@dataclass(frozen=True)
class Problem:
    """One thing :meth:`Store.verify` found wrong."""

    what: str
    """What is wrong."""
    where: str
    """Which database, key or field."""
    expected: Any = None
    """What should have been there (hex for digests)."""
    got: Any = None
    """What was there."""
    position: int | None = None
    """Index in the log, chunk list or part map it names, when it has one."""


@dataclass(frozen=True)
class VerifyReport:
    """Result of :meth:`Store.verify`: every problem, and what was checked."""

    ok: bool
    """True when no problem was found."""
    problems: tuple[Problem, ...]
    """Everything found wrong, in walk order."""
    counts: dict[str, int]
    """How many objects, checkpoints, refs, ledgers and audit records were checked."""


def extension_records(
    records: Sequence[tuple[bytes, bytes | None]],
) -> tuple[tuple[bytes, bytes | None], ...]:
    """``extra_meta``'s records as bytes; InvalidInputError for a key outside the
    extension prefixes (``EXTENSION_META_PREFIXES``) or over ``MAX_KEY_BYTES``."""
    out = tuple(  # bytes taken as they are: bytes() of bytes is the same object, by a type call
        (k if type(k) is bytes else bytes(k), v if v is None or type(v) is bytes else bytes(v))
        for k, v in records
    )
    for key, _ in out:
        if not key.startswith(EXTENSION_META_PREFIXES):
            raise InvalidInputError(
                "extra meta keys must be under an extension prefix",
                expected=[p.decode() for p in EXTENSION_META_PREFIXES],
                got=key[:16],
            )
        if len(key) > MAX_KEY_BYTES:
            raise InvalidInputError(
                "an extra meta key is longer than a store key may be",
                expected=f"<= {MAX_KEY_BYTES} bytes",
                got=len(key),
            )
    return out


def expected_records(
    records: Sequence[tuple[bytes, bytes]], durability: str
) -> tuple[tuple[bytes, bytes], ...]:
    """``meta_expected``'s records as bytes, their keys checked as :func:`extension_records`
    checks them (a record must hold bytes: None is refused). Refused on a batched handle:
    its flush checks the condition in one txn with every thread's queued checkpoints, so
    one failed condition would drop them all, after the caller was handed an id."""
    if durability == "batched":
        raise InvalidInputError(
            "a conditional commit (meta_expected) is settled by the call: a batched "
            "flush checks it later and drops every queued checkpoint when it fails",
            expected=["sync", "none"],
            got=durability,
        )
    out = extension_records(records)
    for key, value in out:
        if value is None:
            raise InvalidInputError(
                "an expected meta record holds bytes", where=f"meta/{key!r}", expected="bytes"
            )
    return tuple((k, v) for k, v in out if v is not None)
