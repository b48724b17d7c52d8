"""The exception hierarchy: one root, narrow subclasses that carry data.

Every exception cpstore raises on purpose derives from :class:`CpstoreError`,
which is never raised itself. Subclasses that describe bad input also derive
from the matching builtin (``ValueError``, ``KeyError``) so callers that
already catch those keep working. Each carries ``what``, ``where``,
``expected`` and ``got`` and prints them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuditChainError",
    "CanonicalEncodingError",
    "CommitLostError",
    "ConflictError",
    "CpstoreError",
    "DocumentError",
    "ForkError",
    "FormatVersionError",
    "GateError",
    "IntegrityError",
    "InvalidInputError",
    "LedgerGuardError",
    "LedgerSealedError",
    "NativeError",
    "NotDescendantError",
    "NotFoundError",
    "OutcomeUnknownError",
    "PutBackMismatchError",
    "ReadHeldDuringResizeError",
    "RecordFormatError",
    "RecordingGapError",
    "ReentrantOpenError",
    "ReentrantWriteError",
    "ReplayDivergenceError",
    "SameStoreError",
    "ServerVersionError",
    "SeveralHoldersError",
    "SignOffError",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreError",
    "StoreFatalError",
    "StoreFullError",
    "StoreReadOnlyError",
    "StoreTimeoutError",
    "UnsealedEffectsError",
    "ValidationFailedError",
]


def _show(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = raw.hex()
        return text if len(text) <= 80 else f"{text[:64]}... ({len(raw)} bytes)"
    try:
        text = repr(value)
    except Exception:  # nested past the interpreter's limit, or a __repr__ of its own raising
        return f"<{type(value).__name__}>"  # (left83: a RecursionError out of load_document)
    return text if len(text) <= 200 else text[:197] + "..."


class CpstoreError(Exception):
    """Root of every error cpstore raises; never raised directly."""

    what: str
    where: str | None
    expected: Any
    got: Any

    def __init__(
        self,
        what: str,
        *,
        where: str | None = None,
        expected: Any = None,
        got: Any = None,
    ) -> None:
        self.what = what
        self.where = where
        self.expected = expected
        self.got = got
        super().__init__(self._message())

    def _message(self) -> str:
        parts = [self.what]
        if self.where is not None:
            parts.append(f"at {self.where}")
        if self.expected is not None:
            parts.append(f"expected {_show(self.expected)}")
        if self.got is not None:
            parts.append(f"got {_show(self.got)}")
        return "; ".join(parts)

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor: rebuild through a helper so errors survive
        # pickling across processes (multiprocessing workers, crash tests).
        # Fields a subclass adds (ValidationFailedError.decision) go as the state.
        extra = {k: v for k, v in self.__dict__.items() if k not in _FIELDS}
        return (_rebuild, (type(self), self.what, self.where, self.expected, self.got), extra)


_FIELDS = frozenset(("what", "where", "expected", "got"))


def _rebuild(
    cls: type[CpstoreError], what: str, where: str | None, expected: Any, got: Any
) -> CpstoreError:
    return cls(what, where=where, expected=expected, got=got)


class InvalidInputError(CpstoreError, ValueError):
    """An argument has the wrong type, size, shape or value."""


class RecordFormatError(InvalidInputError):
    """A packed record buffer is malformed (wrong size, type or content)."""


class CanonicalEncodingError(InvalidInputError):
    """A value cannot be put in (or read from) the canonical encoding."""


class DocumentError(InvalidInputError):
    """A run document is missing a field or has one of the wrong type."""


class FormatVersionError(InvalidInputError):
    """Data of a format version this cpstore does not know; never misread."""


class SameStoreError(InvalidInputError):
    """A push, pull or ``transfer()`` whose source and destination are one store, however
    spelled (two URLs of one database schema, two paths of one LMDB data file): refused
    before anything was written. ``source`` and ``dest`` are the two names (passwords
    redacted)."""

    source: str | None
    dest: str | None

    def __init__(
        self,
        what: str = "the source and the receiving store are the same store",
        *,
        where: str | None = None,
        expected: Any = None,
        got: Any = None,
        source: str | None = None,
        dest: str | None = None,
    ) -> None:
        self.source = source
        self.dest = dest
        super().__init__(what, where=where, expected=expected, got=got)


class SeveralHoldersError(InvalidInputError):
    """``release_retained`` of a checkpoint several audit records hold, naming none of
    them: nothing was released; ``expected`` lists the holders' audit digests (name one
    as ``holder``)."""


class NotFoundError(CpstoreError, KeyError):
    """A digest, checkpoint, run, branch or payload is not in the store."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return self._message()


class IntegrityError(CpstoreError):
    """Stored bytes do not match their digest, or a reference does not resolve."""


class PutBackMismatchError(IntegrityError):
    """A ``repair_ref`` put-back that is not the ref that vanished: the refs table is one
    ref short of ``meta/refs_digest``, whose XOR difference is that ref's full hash, and
    the ref put back (name and head) does not give it. Nothing was written. ``expected``:
    the vanished ref's ``{"run", "branch", "head"}`` (each None when no stored checkpoint
    and branch name of a run give the hash); ``got``: the put-back's. Put that ref back,
    or pass ``force=True`` to accept this one (the vanished history is kept retained).
    Also raised for a repair of an intact ref (moved or deleted) while such a ref is
    missing: it would re-derive the digest without the vanished ref (``got``: the
    repaired ref and its new head, None for a delete). With two refs short, when two
    stored checkpoints and branch names give the difference, a put-back that is neither:
    ``expected`` names one, and the other under ``"or"``."""


class NativeError(CpstoreError):
    """The native core returned a status the wrapper did not expect."""


class StoreError(CpstoreError):
    """The store cannot do what was asked (environment, version, state)."""


class StoreClosedError(StoreError):
    """The store was used after ``close()``, or while another thread of the process
    closes it ("the store is closing"); open it again to go on."""

    def __init__(
        self,
        what: str = "the store is closed",
        *,
        where: str | None = None,
        expected: Any = "an open store",
        got: Any = "used after close()",
    ) -> None:
        super().__init__(what, where=where, expected=expected, got=got)


class ServerVersionError(StoreError):
    """A PostgreSQL server older than cpstore supports: nothing was opened. ``found`` and
    ``required`` are ``server_version_num`` values (e.g. 130011 and 140000)."""

    found: int | None
    required: int | None

    def __init__(
        self,
        what: str,
        *,
        where: str | None = None,
        expected: Any = None,
        got: Any = None,
        found: int | None = None,
        required: int | None = None,
    ) -> None:
        self.found = found
        self.required = required
        super().__init__(what, where=where, expected=expected, got=got)


class ReentrantWriteError(StoreError):
    """A checkpoint or flush was asked of a store on a thread already inside one of the
    store's writes: a signal handler (or a finalizer) running inside it. Refused, since
    that write would wait for the very write it interrupted; nothing of it was written."""


class ReentrantOpenError(StoreError):
    """A store was opened (or compacted, or the registry asked whether it is open here) on
    a thread already inside an open or close of a store: a signal handler or a finaliser
    (``__del__``, a weakref callback run by a collection) running inside it, its thread
    holding the process's registry of environments mid-update. Refused at once, since it
    would wait for its own thread; nothing was opened or reserved. (A close there is not
    refused: it drops its handle, lmdb_registry.release_env.)"""


class ReadHeldDuringResizeError(StoreError):
    """The LMDB map must change size (a write fills it, or another process grew it) while
    this thread holds an open read txn of the store; end the read and try again."""


class StoreFullError(StoreError):
    """The disk or the map size limit is full; nothing was written."""


class StoreReadOnlyError(StoreError):
    """A write was asked of a store opened read-only or on a read-only disk."""


class StoreConnectionError(StoreError, ConnectionError):
    """The connection to a store server failed or was lost; the next operation reconnects."""


class CommitLostError(StoreConnectionError):
    """The connection to a store server was lost while a commit was on the wire: the
    transaction committed whole or not at all, and the store could not be read back to
    tell which; read the ref again before retrying.

    ``stored`` is False when the store was read back and showed the commit wrote nothing
    (the message says "not stored"); None when the outcome is open."""

    #: False: read back, the commit wrote nothing; None: it may or may not have.
    stored: bool | None

    def __init__(
        self,
        what: str,
        *,
        where: str | None = None,
        expected: Any = None,
        got: Any = None,
        stored: bool | None = None,
    ) -> None:
        self.stored = stored
        super().__init__(what, where=where, expected=expected, got=got)


class StoreTimeoutError(StoreError, TimeoutError):
    """A store server cancelled a statement that ran past its timeout; nothing was written."""


class ForkError(StoreError):
    """A store environment was used in a process other than the one that opened it."""


class StoreFatalError(StoreError):
    """This process's environment of the store refuses every txn after a fatal error
    (LMDB's ``MDB_PANIC``: a commit failed writing its meta page); close every handle of
    the store in this process and open it again. The file itself is not called corrupt."""


class OutcomeUnknownError(StoreError):
    """A write whose commit reported an error and may or may not have taken effect
    (LMDB can fail a commit that did); read the branch head or the record to know."""


class ConflictError(StoreError):
    """A compare-and-set on a ref lost: the ref moved since it was read."""


class NotDescendantError(ConflictError):
    """A ref move to a checkpoint that does not descend from the head; use ``reset_ref``."""


class UnsealedEffectsError(StoreError):
    """A recorder was closed holding side effects no checkpoint sealed (``got`` is how many)."""


class LedgerSealedError(StoreError):
    """A write to a sealed side-effect ledger; sealed ledgers never change."""


class ReplayDivergenceError(CpstoreError):
    """A replay cursor met a token it must not resolve (seed 002)."""


class RecordingGapError(ReplayDivergenceError, NotFoundError):
    """A replay needs a recorded observation that is not there; never re-fetch."""


class LedgerGuardError(ReplayDivergenceError):
    """A replay tried an effect that is not in the sealed ledger; stopped before it escaped."""


class GateError(CpstoreError):
    """A resume, rollback or release the decision does not allow."""


class SignOffError(GateError):
    """A sign-off that cannot be given (non-releasable, forged, replayed)."""


class AuditChainError(IntegrityError):
    """The hash-chained audit log is broken at a record."""


class ValidationFailedError(ReplayDivergenceError):
    """A validation did not end in ACCEPT and the caller asked for an exception.

    Raised only on request (``validate(..., raise_on_failure=True)`` or
    ``Decision.raise_for_verdict()``); ``decision`` holds the decision.
    """

    decision: Any = None
