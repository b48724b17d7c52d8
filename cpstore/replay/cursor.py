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
from array import array
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any

import msgpack

from cpstore.errors import (
    IntegrityError,
    InvalidInputError,
    RecordFormatError,
    ReplayDivergenceError,
)
from cpstore.native.binding import canonical_check, digest_batch
from cpstore.native.canonical import _ext_hook
from cpstore.native.records import (
    RECORD_SIZE,
    KindTable,
    Provenance,
    RecordType,
    pack_refused,
    pack_token,
)
from cpstore.native.records import value_digest as _value_digest
from cpstore.replay.source import CheckpointSource
from cpstore.run.model import PackedTokens, ReplayMode

__all__ = ["ReplayCursor"]


_SIZE = RECORD_SIZE[RecordType.TOKEN]
_HEAD = struct.Struct("<QIB")
_RECORDED = int(Provenance.RECORDED)
_OFFSET = struct.Struct("<Q")
_ALWAYS = (True,)


def _never_closed() -> Exception:  # pragma: no cover - _ALWAYS is never empty
    return InvalidInputError("an in-memory cursor has no reader to close")


class _CheckpointValues(Sequence[Any]):
    """Token values read lazily from an open checkpoint view, verified in blocks.

    One native ``digest_batch`` call checks a block of value encodings against
    the digests in the token records, so the per-token cost stays far below a
    native call per value (the cursor's 1 us budget). The views point into the
    LMDB map: a block is loaded only while the reader's lease is held.
    """

    _BLOCK = 4096

    def __init__(self, cp: CheckpointSource, records: memoryview, count: int) -> None:
        values, offsets = cp.token_value_views()
        self._lease: Sized = cp.lease
        self._closed_error: Callable[[], Exception] = cp.closed_error
        self._values = memoryview(values).cast("B")
        self._offsets = memoryview(offsets).cast("B")
        self._records = records
        self._count = count
        self._where = str(cp.id)
        self._first = 0
        self._decoded: list[Any] = []

    def __len__(self) -> int:
        return self._count

    def _load_block(self, block: int) -> None:
        if not self._lease:
            raise self._closed_error()
        first = block * self._BLOCK
        last = min(self._count, first + self._BLOCK)
        digests = digest_batch(
            self._values, self._offsets[8 * first : 8 * (last + 1)], byteorder="little"
        )
        recs = bytes(self._records[32 * first : 32 * last])
        # Column by column (byte k of every digest against byte 16+k of every
        # record): 16 C-level slice compares per block instead of one Python
        # compare per token; a mismatch is then located token by token.
        if any(digests[k::16] != recs[16 + k :: 32] for k in range(16)):
            for j in range(last - first):
                if digests[16 * j : 16 * j + 16] != recs[32 * j + 16 : 32 * j + 32]:
                    raise IntegrityError(
                        "token value does not match its record",
                        where=f"token {first + j} of {self._where}",
                    )
        start = _OFFSET.unpack_from(self._offsets, 8 * first)[0]
        end = _OFFSET.unpack_from(self._offsets, 8 * last)[0]
        # Each value must be exactly one msgpack item where its offsets say, in
        # canonical form: the stream decode below pairs items with tokens by count
        # alone, and a log whose offsets cut elsewhere (which Recorder.tokens_packed
        # took before audit31) served one token's value for another; a non-canonical
        # value (a repeated map key, a long-form int: taken before audit31's canonical
        # check) would be served as msgpack reads it. One native call per block.
        offs = array("Q")
        offs.frombytes(self._offsets[8 * first : 8 * (last + 1)])
        if sys.byteorder == "big":
            offs.byteswap()
        bad = canonical_check(self._values, offs)
        if bad is not None:
            raise IntegrityError(
                f"token value is not one msgpack value in canonical form at its offsets: {bad[2]}",
                where=f"token {first + bad[0]} of {self._where}",
            )
        # Every encoding matched the digest computed from its canonical bytes at
        # record time, so one streaming msgpack decode of the block is enough.
        unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=False, ext_hook=_ext_hook, max_buffer_size=end - start + 1
        )
        unpacker.feed(self._values[start:end])
        self._decoded = list(unpacker)
        self._first = first

    def __getitem__(self, index: Any) -> Any:
        if type(index) is int:
            j = index - self._first
            if 0 <= j < len(self._decoded):  # the cursor's path: the current block
                return self._decoded[j]
            if not 0 <= index < self._count:
                raise IndexError(index)
            self._load_block(index // self._BLOCK)
            return self._decoded[index - self._first]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        raise TypeError(f"token value index must be an int, not {type(index).__name__}")


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
        self._values: Sequence[Any] = recorded.values
        self._kinds = KindTable(recorded.kind_names)
        self._count = len(recorded)
        self._mode = mode
        self._strict = mode is ReplayMode.STRICT
        self._idx = 0
        self._out = bytearray()
        self._out_values: list[Any] = []
        # In-memory tokens are the caller's own memory: always readable.
        self._lease: Sized = _ALWAYS
        self._closed_error: Callable[[], Exception] = _never_closed

    @classmethod
    def from_checkpoint(
        cls, cp: CheckpointSource, *, mode: ReplayMode = ReplayMode.STRICT
    ) -> ReplayCursor:
        """A zero-copy cursor over an open checkpoint view, usable inside that ``with``."""
        # Zero-copy: the views are private to the cursor, which checks the
        # reader's lease before each read (a copy of a 10 M token log is 320 MB).
        view = memoryview(cp.token_records()).cast("B")
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
            # Two names, one 31-bit code (the cursor could not tell them apart),
            # or a name with no UTF-8 form (no expected name: exc.what says so).
            raise InvalidInputError(
                exc.what
                if exc.expected is None
                else "token kind hashes to the code of another kind",
                where=f"seq={self._idx}",
                expected=exc.expected,
                got=kind,
            ) from None

    def resolve(self, kind: str, *, live: Callable[[], Any] | None = None) -> Any:
        """The recorded value of the next token, which must be of ``kind``.

        ``live`` is consulted only in BEST_EFFORT mode, when the log cannot
        answer; in STRICT mode that situation raises instead.
        """
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
        self._out += self._view[i * _SIZE : (i + 1) * _SIZE]
        value = self._values[i]
        self._out_values.append(value)
        self._idx = i + 1
        return value

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
            self._out += pack_refused(self._idx, code)
            self._out_values.append(None)
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
        it refused, at its position with the kind asked for and the value None: a P that
        is never equal to the recording there."""
        return PackedTokens(
            bytes(self._out), values=list(self._out_values), kind_names=dict(self._kinds.names)
        )
