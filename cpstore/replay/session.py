"""Enforcement during a replay: the token cursor, pinned reads and the ledger guard.

The decision table (:mod:`cpstore.decision.validate`) judges a replay afterwards;
this module stops a replay at the moment it would go wrong (seed 002's
decision boundary):

* :class:`ReplayCursor` resolves each nondeterminism token from the recorded
  log. In ``STRICT`` mode (the default) a kind mismatch, an exhausted log or
  any fall-through to a live source raises at that token, with its seq,
  expected and observed. ``BEST_EFFORT`` is an explicit opt-in for debugging:
  it may call a live source, and every such token is tagged ``live`` so the
  decision ends in QUARANTINE and can never certify a rollback.
* :class:`PinnedObservations` serves each external read from the recording
  by (step, source); a missing one raises :class:`RecordingGapError`, it is
  never re-fetched (seed 000, condition 3).
* :class:`LedgerGuard` checks each side effect against the sealed ledger and
  raises *before* the effect escapes when it is not there at that position.
* :class:`ReplaySession` ties the three together and builds the replay
  :class:`Run` that :func:`validate` takes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import Any, Protocol, TypeVar

import msgpack

from cpstore.errors import (
    IntegrityError,
    InvalidInputError,
    LedgerGuardError,
    LedgerSealedError,
    RecordFormatError,
    RecordingGapError,
    ReplayDivergenceError,
)
from cpstore.native.binding import digest, digest_batch
from cpstore.native.canonical import _ext_hook
from cpstore.native.records import RECORD_SIZE, KindTable, Provenance, RecordType, pack_token
from cpstore.native.records import value_digest as _value_digest
from cpstore.replay.source import CheckpointSource
from cpstore.run.model import Effect, Observation, PackedTokens, ReplayMode, Run

__all__ = [
    "LedgerGuard",
    "PayloadSource",
    "PinnedObservations",
    "ReplayCursor",
    "ReplaySession",
]

T = TypeVar("T")

_SIZE = RECORD_SIZE[RecordType.TOKEN]
_HEAD = struct.Struct("<QIB")
_RECORDED = int(Provenance.RECORDED)
_OFFSET = struct.Struct("<Q")
_ALWAYS = (True,)


def _never_closed() -> Exception:  # pragma: no cover - _ALWAYS is never empty
    return InvalidInputError("an in-memory cursor has no reader to close")


class PayloadSource(Protocol):
    """What :class:`PinnedObservations` reads from: a checkpoint view of the store."""

    def observations(self) -> Sequence[tuple[int, str, str, float | None]]:
        """(step, source, payload digest, pinned_at) of every recorded read."""

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        """The ``occurrence``-th recorded payload; :class:`RecordingGapError` when none."""


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
        if self._strict:
            raise ReplayDivergenceError(
                f"{what} (STRICT: no live fall-through)", where=where, expected=expected, got=got
            )
        if live is None:
            raise ReplayDivergenceError(
                f"{what}, and no live source was given", where=where, expected=expected, got=got
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
        """The tokens this replay resolved, packed (``live`` ones tagged)."""
        return PackedTokens(
            bytes(self._out), values=list(self._out_values), kind_names=dict(self._kinds.names)
        )


class PinnedObservations:
    """Serves a replay's external reads from the recording (never re-fetches)."""

    def __init__(self, source: PayloadSource) -> None:
        self._source = source
        self._index: dict[tuple[int, str], list[tuple[str, float | None]]] = {}
        for step, src, dig, pinned in source.observations():
            self._index.setdefault((step, src), []).append((dig, pinned))
        self._used: dict[tuple[int, str], int] = {}
        self._read: list[Observation] = []

    def read(self, step: int, source: str) -> bytes:
        """The recorded payload of ``source`` at ``step``; RecordingGapError if none."""
        key = (step, source)
        entries = self._index.get(key)
        used = self._used.get(key, 0)
        if not entries or used >= len(entries):
            raise RecordingGapError(
                "the replay needs an observation the recording does not hold; "
                "it is never re-fetched",
                where=f"step {step}, source {source!r}",
                expected="a recorded observation",
                got="none" if not entries else f"only {len(entries)} recorded",
            )
        payload = self._source.payload(step, source, occurrence=used)
        dig, pinned = entries[used]
        self._used[key] = used + 1
        self._read.append(Observation(step, source, dig, pinned))
        return payload

    @property
    def observations(self) -> tuple[Observation, ...]:
        """What the replay read, in order: its observation stream."""
        return tuple(self._read)


class LedgerGuard:
    """Checks every effect a replay attempts against the sealed ledger, first."""

    def __init__(
        self, ledger: Iterable[Effect], *, sealed: bool, allow_unsealed: bool = False
    ) -> None:
        self._ledger = tuple(ledger)
        for i, e in enumerate(self._ledger):
            if not isinstance(e, Effect):
                raise InvalidInputError(
                    "ledger entries must be Effect", where=f"ledger[{i}]", got=type(e).__name__
                )
        if not sealed and not allow_unsealed:
            raise LedgerGuardError(
                "the side-effect ledger is not sealed; a replay against it proves nothing",
                expected="a sealed ledger",
                got="unsealed",
            )
        self._sealed = sealed
        self._attempted: list[Effect] = []

    @classmethod
    def from_checkpoint(cls, cp: CheckpointSource, *, allow_unsealed: bool = False) -> LedgerGuard:
        """A guard over an open checkpoint's ledger."""
        return cls(
            (Effect(s, t, d) for s, t, d in cp.effects()),
            sealed=bool(cp.manifest.ledger_sealed),
            allow_unsealed=allow_unsealed,
        )

    @property
    def sealed(self) -> bool:
        """Whether the ledger was sealed."""
        return self._sealed

    def check(self, target: str, payload: bytes) -> Effect:
        """Admit the next effect or raise :class:`LedgerGuardError` before it escapes."""
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise InvalidInputError("payload must be bytes", got=type(payload).__name__)
        return self.check_digest(target, bytes(digest(payload)).hex())

    def check_digest(self, target: str, payload_digest: str) -> Effect:
        """As :meth:`check`, for a payload already digested (hex)."""
        if not isinstance(target, str) or not isinstance(payload_digest, str):
            raise InvalidInputError(
                "target and payload_digest must be str",
                got=(type(target).__name__, type(payload_digest).__name__),
            )
        i = len(self._attempted)
        expected = self._ledger[i] if i < len(self._ledger) else None
        seq = (
            expected.seq
            if expected is not None
            else (self._ledger[-1].seq + 1 + i - len(self._ledger) if self._ledger else i)
        )
        attempt = Effect(seq, target, payload_digest)
        self._attempted.append(attempt)
        if expected is None or expected != attempt:
            raise LedgerGuardError(
                "effect is not in the sealed ledger at this position; stopped before it escaped",
                where=f"effect seq={seq}",
                expected="end of the ledger"
                if expected is None
                else [expected.target, expected.payload_digest],
                got=[target, payload_digest],
            )
        return attempt

    def perform(self, target: str, payload: bytes, action: Callable[[], T]) -> T:
        """Check the effect, then (only if admitted) run ``action`` and return its result."""
        self.check(target, payload)
        return action()

    def append(self, target: str, payload: bytes) -> None:
        """Writing to the ledger during a replay: always refused."""
        raise LedgerSealedError(
            "a replay never writes the side-effect ledger"
            if not self._sealed
            else "the side-effect ledger is sealed; it never changes",
            where=f"effect on {target!r}",
        )

    @property
    def attempted(self) -> tuple[Effect, ...]:
        """Every effect the replay attempted, including a refused one."""
        return tuple(self._attempted)


class ReplaySession:
    """One replay of a stored checkpoint: cursor, pinned reads, guard, and the result.

    Use it inside ``with store.read(checkpoint_id) as cp:``; :meth:`finish`
    builds the replay :class:`Run` (P) for :func:`validate`.
    """

    def __init__(
        self,
        cp: CheckpointSource,
        *,
        mode: ReplayMode = ReplayMode.STRICT,
        allow_unsealed: bool = False,
    ) -> None:
        self._cp = cp
        self.cursor = ReplayCursor.from_checkpoint(cp, mode=mode)
        """The token cursor."""
        self.observations = PinnedObservations(cp)
        """The pinned-observation reader."""
        self.guard = LedgerGuard.from_checkpoint(cp, allow_unsealed=allow_unsealed)
        """The ledger guard."""
        self._decisions: list[dict[str, Any]] = []
        self._harness: list[Any] = []

    def decision(self, step: int, node: Any, **extra: Any) -> None:
        """Record a decision node the replay took."""
        self._decisions.append({"step": step, "node": node, **extra})

    def harness_access(self, access: Any) -> None:
        """Record an access the replay harness itself made (seed 004)."""
        self._harness.append(access)

    def finish(self, state_digest: str, *, transcript_digest: str | None = None) -> Run:
        """The replay as a :class:`Run`, ready for :func:`validate`."""
        man = self._cp.manifest
        return Run(
            man.run_id,
            man.step,
            state_digest,
            tokens=self.cursor.replayed(),
            observations=self.observations.observations,
            call_graph=tuple(self._decisions),
            transcript_digest=transcript_digest,
            effects=self.guard.attempted,
            harness_accesses=tuple(self._harness),
            mode=self.cursor.mode,
        )
