"""The replay cursor: each nondeterminism token resolved from the recording.

In ``STRICT`` mode (the default) a kind mismatch, an exhausted log or any
fall-through to a live source raises at that token, with its seq, expected
and observed. ``BEST_EFFORT`` is an explicit opt-in for debugging: it may
call a live source, and every such token is tagged ``live`` so the decision
ends in QUARANTINE and can never certify a rollback (seed 002).
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any

import msgpack

from cpstore.errors import (
    CanonicalEncodingError,
    IntegrityError,
    InvalidInputError,
    RecordFormatError,
    ReplayDivergenceError,
)
from cpstore.native.binding import canonical_check, digest_batch
from cpstore.native.canonical import _ext_hook
from cpstore.native.columns import encode_values, first_unencodable
from cpstore.native.records import (
    RECORD_SIZE,
    KindTable,
    Provenance,
    RecordType,
    kind_code,
    pack_refused,
    pack_token,
)
from cpstore.native.records import value_digest as _value_digest
from cpstore.replay.source import CheckpointSource
from cpstore.run.model import PackedTokens, ReplayMode
from cpstore.run.values import EncodedValues

__all__ = ["ReplayCursor"]


_SIZE = RECORD_SIZE[RecordType.TOKEN]
_HEAD = struct.Struct("<QIB")
_RECORDED = int(Provenance.RECORDED)
_ALWAYS = (True,)
#: Values served as the caller's own objects: nothing a replay does changes them.
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None)})


#: The NaN the canonical encoding writes for every NaN (docs/format.md).
_CANONICAL_NAN = struct.unpack(">d", struct.pack(">Q", 0x7FF8000000000000))[0]


def _never_closed() -> Exception:  # pragma: no cover - _ALWAYS is never empty
    return InvalidInputError("an in-memory cursor has no reader to close")


def _check_digests(digests: bytes, records: memoryview, first: int, last: int, where: str) -> None:
    """Raise IntegrityError at the first token of ``first:last`` whose value digest (in
    ``digests``) is not the one its record holds."""
    recs = bytes(records[32 * first : 32 * last])
    if len(digests) != 16 * (last - first):  # one digest per token, never more or fewer
        raise IntegrityError(
            "token values do not number one per record",
            where=f"tokens {first}..{last - 1} of {where}",
            expected=last - first,
            got=len(digests) // 16,
        )
    # Column by column (byte k of every digest against byte 16+k of every
    # record): 16 C-level slice compares per block instead of one Python
    # compare per token; a mismatch is then located token by token.
    if any(digests[k::16] != recs[16 + k :: 32] for k in range(16)):
        for j in range(last - first):
            if digests[16 * j : 16 * j + 16] != recs[32 * j + 16 : 32 * j + 32]:
                raise IntegrityError(
                    "token value does not match its record", where=f"token {first + j} of {where}"
                )


def _decode_checked(blob: memoryview, offs: array[int], first: int, where: str) -> list[Any]:
    """The values ``blob[offs[i]:offs[i+1]]``, each checked to be one canonical msgpack value."""
    # Each value must be exactly one msgpack item where its offsets say, in
    # canonical form: the stream decode below pairs items with tokens by count
    # alone, and a log whose offsets cut elsewhere (which Recorder.tokens_packed
    # took before audit31) served one token's value for another; a non-canonical
    # value (a repeated map key, a long-form int: taken before audit31's canonical
    # check) would be served as msgpack reads it. One native call per block.
    bad = canonical_check(blob, offs)
    if bad is not None:
        raise IntegrityError(
            f"token value is not one msgpack value in canonical form at its offsets: {bad[2]}",
            where=f"token {first + bad[0]} of {where}",
        )
    # Every encoding matched the digest computed from its canonical bytes at
    # record time, so one streaming msgpack decode of the block is enough.
    start, end = offs[0], offs[-1]
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, ext_hook=_ext_hook, max_buffer_size=end - start + 1
    )
    unpacker.feed(blob[start:end])
    return list(unpacker)


class _BlockValues(Sequence[Any]):
    """Token values served to a cursor, each block of 4096 verified against the records'
    value digests (one native ``digest_batch`` call) before any of it is served."""

    _BLOCK = 4096

    def __init__(self, records: memoryview, count: int, where: str) -> None:
        self._records = records
        self._count = count
        self._where = where
        self._first = 0
        self._decoded: list[Any] = []

    def __len__(self) -> int:
        return self._count

    @property
    def current(self) -> tuple[list[Any], int]:
        """The block last verified and its first index."""
        return self._decoded, self._first

    def _block(self, first: int, last: int) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        if type(index) is int:
            j = index - self._first
            decoded = self._decoded
            if 0 <= j < len(decoded):  # the cursor's path: the current block
                return decoded[j]
            if not 0 <= index < self._count:
                raise IndexError(index)
            first = index // self._BLOCK * self._BLOCK
            decoded = self._block(first, min(self._count, first + self._BLOCK))
            self._decoded, self._first = decoded, first
            return decoded[index - first]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        raise TypeError(f"token value index must be an int, not {type(index).__name__}")


class _CheckpointValues(_BlockValues):
    """Token values read lazily from an open checkpoint view, verified in blocks.

    One native ``digest_batch`` call checks a block of value encodings against
    the digests in the token records, so the per-token cost stays far below a
    native call per value (the cursor's 1 us budget). The views point into the
    LMDB map: a block is loaded only while the reader's lease is held.
    """

    def __init__(self, cp: CheckpointSource, records: memoryview, count: int) -> None:
        super().__init__(records, count, str(cp.id))
        values, offsets = cp.token_value_views(leased=True)  # the lease is checked
        self._lease: Sized = cp.lease
        self._closed_error: Callable[[], Exception] = cp.closed_error
        self._values = memoryview(values).cast("B")
        self._offsets = memoryview(offsets).cast("B")

    def _block(self, first: int, last: int) -> list[Any]:
        if not self._lease:
            raise self._closed_error()
        digests = digest_batch(
            self._values, self._offsets[8 * first : 8 * (last + 1)], byteorder="little"
        )
        _check_digests(digests, self._records, first, last, self._where)
        offs = array("Q")
        offs.frombytes(self._offsets[8 * first : 8 * (last + 1)])
        if sys.byteorder == "big":
            offs.byteswap()
        return _decode_checked(self._values, offs, first, self._where)


class _MemoryValues(_BlockValues):
    """The values of an in-memory recording (``PackedTokens.values``), verified as a
    stored checkpoint's are: a value is served only once its canonical encoding has the
    digest its record holds. ``PackedTokens`` takes values only for readable findings
    and never checks them, and validate compares the records alone, so before audit59 a
    recording whose values were not its records' (a ``.cprun`` file's values section
    edited with its table digest, a hand-built ``PackedTokens``) had the cursor serve
    them while P, a copy of R's records, was an ACCEPT."""

    def __init__(self, values: Sequence[Any], records: memoryview, count: int) -> None:
        super().__init__(records, count, "the recorded tokens")
        self._values = values

    def _block(self, first: int, last: int) -> list[Any]:
        values = self._values
        if isinstance(values, EncodedValues):
            offs = values.offsets[first : last + 1]
            if not isinstance(offs, array):
                offs = array("Q", bytes(offs))
            digests = digest_batch(values.blob, offs)
            _check_digests(digests, self._records, first, last, self._where)
            return _decode_checked(values.blob, offs, first, self._where)
        chunk = list(values[first:last])
        try:
            blob, offs = encode_values(chunk)
        except CanonicalEncodingError:
            found = first_unencodable(chunk)
            if found is None:
                raise
            raise IntegrityError(
                "token value has no canonical encoding (it matches no record)",
                where=f"token {first + found[0]} of {self._where}",
                got=found[1].what,
            ) from None
        _check_digests(digest_batch(blob, offs), self._records, first, last, self._where)
        types = set(map(type, chunk))
        if types <= _IMMUTABLE:
            if float not in types:
                return chunk
            # A float as its encoding holds it, as the store and a loaded file serve it:
            # -0.0 is 0.0, every NaN the canonical one (audit68: -0.0 was served from a
            # mapping and 0.0 from the store: one recording, two values to the replay).
            # Inline (~40 ns a token): a call per float cost twice that.
            nan = _CANONICAL_NAN
            return [(v + 0.0 if v == v else nan) if type(v) is float else v for v in chunk]  # noqa: PLR0124 - v == v is False for NaN
        # A container is served decoded from its verified encoding, a fresh object as a
        # stored cursor serves: one object at two tokens (values=[cfg, cfg]) mutated by
        # the replay after the first was served the mutation as the second (audit59).
        return _decode_checked(memoryview(blob), offs, first, self._where)


class ReplayCursor:
    """Resolves nondeterminism tokens from the recorded log, in order (seed 002).

    ``resolve(kind)`` returns the recorded value of the next token and
    advances. In STRICT mode it never calls a live source. The tokens the
    replay consumed are kept packed; :meth:`replayed` hands them to the
    validator.

    A cursor from :meth:`from_checkpoint` reads the LMDB map directly: once
    the reader's ``with`` block ends, :meth:`resolve` raises
    :class:`InvalidInputError` ("the checkpoint reader is closed") instead of
    reading memory the map may no longer hold. :meth:`replayed` keeps working
    (it holds copies).
    """

    def __init__(self, recorded: PackedTokens, *, mode: ReplayMode = ReplayMode.STRICT) -> None:
        if not isinstance(recorded, PackedTokens):
            raise InvalidInputError("recorded must be PackedTokens", got=type(recorded).__name__)
        if not isinstance(mode, ReplayMode):
            raise InvalidInputError("mode must be a ReplayMode", got=mode)
        if recorded.values is None:
            raise InvalidInputError(
                "a cursor needs the recorded token values", where="recorded.values"
            )
        self._view = recorded.view()
        self._kinds = KindTable(recorded.kind_names)
        self._count = len(recorded)
        values = recorded.values
        self._values: _BlockValues = (
            values
            if isinstance(values, _BlockValues)
            else _MemoryValues(values, self._view, self._count)
        )
        self._lock = threading.RLock()
        # The block of verified values being served, indexed directly (a
        # Sequence.__getitem__ call per token would cost a third of the budget).
        self._block: Sequence[Any] = ()
        self._block_first = 0
        self._mode = mode
        self._strict = mode is ReplayMode.STRICT
        self._idx = 0
        self._out = bytearray()
        self._out_values: list[Any] = []
        # In-memory tokens are the caller's own memory: always readable.
        self._lease: Sized = _ALWAYS
        self._closed_error: Callable[[], Exception] = _never_closed

    def _load(self, i: int) -> Any:
        """Value ``i``, its block verified (and kept at hand for the next resolves)."""
        value = self._values[i]
        self._block, self._block_first = self._values.current
        return value

    @classmethod
    def from_checkpoint(
        cls, cp: CheckpointSource, *, mode: ReplayMode = ReplayMode.STRICT
    ) -> ReplayCursor:
        """A zero-copy cursor over an open checkpoint view, usable inside that ``with``."""
        # Zero-copy: the views are private to the cursor, which checks the
        # reader's lease before each read (a copy of a 10 M token log is 320 MB).
        view = memoryview(cp.token_records(leased=True)).cast("B")
        count = view.nbytes // _SIZE
        log = cp.manifest.raw.get("tokens") if isinstance(cp.manifest.raw, Mapping) else None
        names = dict(log.get("kinds") or {}) if isinstance(log, Mapping) else {}
        values = _CheckpointValues(cp, view, count)
        cursor = cls(PackedTokens(view, values=values, kind_names=names), mode=mode)
        cursor._lease = cp.lease
        cursor._closed_error = cp.closed_error
        return cursor

    @property
    def mode(self) -> ReplayMode:
        """STRICT or BEST_EFFORT."""
        return self._mode

    @property
    def position(self) -> int:
        """Tokens resolved so far (the seq of the next one)."""
        return self._idx

    @property
    def remaining(self) -> int:
        """Recorded tokens not yet resolved."""
        return max(0, self._count - self._idx)

    def _code(self, kind: str) -> int:
        try:
            return self._kinds.code(kind)
        except RecordFormatError as exc:
            if exc.expected is None:  # a name with no UTF-8 form: no kind at all
                raise InvalidInputError(exc.what, where=f"seq={self._idx}", got=kind) from None
            # Another name with the code of a kind the log names: a kind mismatch the codes
            # cannot show, refused and kept in P as any other (audit68: InvalidInputError,
            # nothing kept, so a retry loop that swallowed it left P equal to R, an ACCEPT).
            self._keep_refused(kind_code(kind), kind)
            raise ReplayDivergenceError(
                "token kind differs from the recording: another name with its hashed code",
                where=f"seq={self._idx}",
                expected=exc.expected,
                got=kind,
            ) from None

    def resolve(self, kind: str, *, live: Callable[[], Any] | None = None) -> Any:
        """The recorded value of the next token, which must be of ``kind``.

        ``live`` is consulted only in BEST_EFFORT mode, when the log cannot
        answer; in STRICT mode that situation raises instead.
        """
        # One resolve at a time: two threads sharing the cursor each took token i and
        # were both served it (a re-read); now the second gets token i + 1 (audit59).
        with self._lock:
            if not self._lease:
                raise self._closed_error()
            code = self._code(kind)
            i = self._idx
            if i >= self._count:
                return self._fall_through(
                    code,
                    kind,
                    live,
                    "token stream exhausted: the replay resolved beyond the log",
                    expected="end of the replay",
                    got=kind,
                )
            seq, rcode, prov = _HEAD.unpack_from(self._view, i * _SIZE)
            if prov != _RECORDED:
                raise ReplayDivergenceError(
                    "recorded token does not have recorded provenance; refusing to audit",
                    where=f"seq={seq}",
                    expected="recorded",
                    got={2: "live"}.get(prov, f"invalid#{prov}"),
                )
            if rcode != code:
                return self._fall_through(
                    code,
                    kind,
                    live,
                    "token kind differs from the recording",
                    expected=self._kinds.label(rcode),
                    got=kind,
                )
            # The value first: one that fails its check (IntegrityError) leaves nothing
            # behind. Appended before it, the record stayed without a value, and a replay
            # that swallowed the error could not finish() (a P whose records and values
            # do not pair up).
            j = i - self._block_first
            block = self._block
            value = block[j] if 0 <= j < len(block) else self._load(i)
            self._out += self._view[i * _SIZE : (i + 1) * _SIZE]
            self._out_values.append(value)
            self._idx = i + 1
            return value

    def _keep_refused(self, code: int, kind: str) -> None:
        """Keep a refused request in P at the cursor's position: the kind asked for and the
        value None, or, where that record would be the recording's own (a name sharing the
        recorded token's hashed code, recorded with the value None), the value
        ``{"refused_kind": <the name asked>}``: a refusal never equals the recorded token.
        verdict94: a swallowed refusal of a colliding name at a token recorded as None was
        R's record byte for byte, so a replay that then stopped was an ACCEPT."""
        i = self._idx
        record = pack_refused(i, code)
        value: Any = None
        if i < self._count and record == self._view[i * _SIZE : (i + 1) * _SIZE]:
            value = {"refused_kind": str.__str__(kind)}
            record = pack_token(i, code, Provenance.RECORDED, _value_digest(value))
        self._out += record
        self._out_values.append(value)

    def _fall_through(
        self,
        code: int,
        kind: str,
        live: Callable[[], Any] | None,
        what: str,
        *,
        expected: Any,
        got: Any,
    ) -> Any:
        where = f"seq={self._idx}"
        if self._strict or live is None:
            # The refused request stays in what the replay did (as the ledger guard keeps
            # a refused effect): a retry loop that swallows this error and asks again
            # still yields a P that differs here, never one equal to R (audit31).
            self._keep_refused(code, kind)
            raise ReplayDivergenceError(
                f"{what} (STRICT: no live fall-through)"
                if self._strict
                else f"{what}, and no live source was given",
                where=where,
                expected=expected,
                got=got,
            )
        value = live()
        self._out += pack_token(self._idx, code, Provenance.LIVE, _value_digest(value))
        self._out_values.append(value)
        self._idx += 1
        return value

    def assert_fully_consumed(self) -> None:
        """Raise unless every recorded token was resolved (trailing tokens unverified)."""
        if self._idx < self._count:
            raise ReplayDivergenceError(
                "replay left recorded tokens unresolved; trailing tokens unverified",
                where=f"seq={self._idx}",
                expected=f"{self._count} tokens consumed",
                got=f"{self._idx} consumed",
            )

    def replayed(self) -> PackedTokens:
        """The tokens this replay resolved, packed (``live`` ones tagged), and each request
        it refused, at its position with the kind asked for and the value None (or
        ``{"refused_kind": <name>}`` where None would make it the recorded token's own
        record): a P that is never equal to the recording there."""
        with self._lock:  # records and values of the same resolves
            return PackedTokens(
                bytes(self._out), values=list(self._out_values), kind_names=dict(self._kinds.names)
            )
