"""Bulk appends for replay engines: tokens, observations and effects a batch at a time.

:class:`BulkAppends` is a mixin of :class:`cpstore.store.recorder.Recorder`.
A batch is checked whole before anything is appended (a bad item appends
nothing and names its index), then appended as columns: one canonical values
blob (msgspec encodes a list of scalars in one call), one native batch
digest, and the 32-byte TOKEN records written through strided views
(:mod:`cpstore.native.columns`). The records are the ones :meth:`Recorder.token`
writes one at a time, byte for byte.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import partial, wraps
from typing import Any, TypeVar, cast

from cpstore.errors import (
    CanonicalEncodingError,
    CpstoreError,
    InvalidInputError,
)
from cpstore.native.args import little_endian_offsets, non_empty_text
from cpstore.native.binding import (
    NUMBER_TYPES,
    canonical_check,
    digest,
    digest_batch,
    encode_numbers,
    pack_tokens,
    scan_tokens,
)
from cpstore.native.canonical import encode_value
from cpstore.native.columns import encode_values, first_unencodable
from cpstore.native.fast_canonical import encode_fast
from cpstore.native.records import (
    PROVENANCE_CODES,
    STEP_LIMIT,
    KindTable,
    number_value,
    step_value,
)
from cpstore.run.model import PackedTokens
from cpstore.run.values import EncodedValues
from cpstore.store.model import MAX_OBJECT_SIZE, as_payload

__all__ = ["BulkAppends", "as_float"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_TOKEN_SIZE = 32
_STANDARD_MAX = 4  # codes 1..4 are rng, clock, tool, env; others are hashed (high bit)


def _provenance(provenance: str) -> int:
    prov = PROVENANCE_CODES.get(provenance) if isinstance(provenance, str) else None
    if prov is None:
        raise InvalidInputError(
            "unknown provenance", expected=list(PROVENANCE_CODES), got=provenance
        )
    return int(prov)


_NUMERIC = frozenset("bBhHiIlLqQfd?")


def _scalar_list(values: Any) -> list[Any]:
    """The values as a list: arrays and memoryviews in one C call."""
    if isinstance(values, array):
        return values.tolist()
    if isinstance(values, memoryview):
        if values.format not in _NUMERIC:
            raise InvalidInputError(
                "a memoryview of values must hold ints, floats or bools",
                where="values",
                got=values.format,
            )
        return values.tolist()
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Iterable):
        raise InvalidInputError(
            "values must be a sequence, an array, a memoryview or an iterable",
            got=type(values).__name__,
        )
    return list(values)


def _numbers(values: Any) -> array[Any] | None:
    """``values`` as an ``array('q'|'Q'|'d')`` when it is one (or a memoryview of one)."""
    if isinstance(values, array) and values.typecode in NUMBER_TYPES:
        return values
    if isinstance(values, memoryview) and values.format in NUMBER_TYPES and values.ndim == 1:
        out = array(values.format)
        out.frombytes(values.tobytes())
        return out
    return None


def _kind_codes(records: memoryview) -> array[int]:
    """The kind code of each TOKEN record (bytes 8..11, little-endian)."""
    codes = array("I")
    if sys.byteorder == "little":
        codes.frombytes(records.cast("I")[2::8].tobytes())
    else:
        codes.extend(c for (c,) in struct.iter_unpack("<8xI20x", records))
    return codes


def _kinds_kept_only_on_success(method: F) -> F:
    """A refused batch learns no kind: the token log's kinds map names only kinds of
    recorded tokens (else a refused call would change the next checkpoint's bytes)."""

    @wraps(method)
    def run(self: BulkAppends, *args: Any, **kwargs: Any) -> Any:
        mark = self._kinds.mark()
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self._kinds.undo(mark)
            raise

    return cast("F", run)


class BulkAppends:
    """Batch appends of a recorder (mixed into :class:`Recorder`)."""

    _run_id: str
    _branch: str
    _tokens: bytearray
    _values: bytearray
    _offsets: array[int]
    _kinds: KindTable
    _dirty: set[str]
    _observations: list[list[Any]]
    _effects: list[list[Any]]
    _pending: dict[bytes, bytes]
    _confirmed: set[bytes]
    _logged: set[bytes]
    _unlogged: list[bytes]
    _sealed: bool
    _graph: list[dict[str, Any]]
    _harness: list[dict[str, Any]]
    _logs: dict[str, bytes | None]
    _token_refs: dict[str, bytes] | None

    _kind: Callable[[str], int]
    _stash: Callable[[bytes], bytes]

    # -- the logs' objects, stashed for a checkpoint only when they changed

    def _log(self, name: str) -> bytes | None:
        """The object digest of log ``name`` (None when empty), encoded when it changed."""
        if name not in self._dirty:
            return self._logs.get(name)
        logs: dict[str, list[Any]] = {
            "observations": self._observations,
            "call_graph": self._graph,
            "effects": self._effects,
            "harness": self._harness,
        }
        value = logs[name]
        key = self._stash(encode_fast(value)) if value else None
        self._logs[name] = key
        self._dirty.discard(name)
        return key

    def _token_log(self) -> dict[str, bytes] | None:
        """The token log's object digests (records, values, offsets); its
        canonical bytes are ``_logs["tokens"]``, encoded only when it changed."""
        if "tokens" in self._dirty:
            if self._tokens:
                refs = {
                    "records": self._stash(bytes(self._tokens)),
                    "values": self._stash(bytes(self._values)),
                    "offsets": self._stash(little_endian_offsets(self._offsets)),
                }
                self._logs["tokens"] = encode_value(
                    {
                        **refs,
                        "count": len(self._tokens) // _TOKEN_SIZE,
                        "kinds": dict(sorted(self._kinds.names.items())),
                    }
                )
                self._token_refs = refs
            else:
                self._logs["tokens"] = None
                self._token_refs = None
            self._dirty.discard("tokens")
        return self._token_refs

    def _append_columns(
        self,
        codes: array[int],
        provs: bytes,
        blob: bytes | bytearray | memoryview,
        offs: array[int],
    ) -> int:
        n = len(offs) - 1
        first = len(self._tokens) // _TOKEN_SIZE
        if n == 0:
            return first
        digests = digest_batch(blob, offs)
        self._extend(pack_tokens(codes, provs, digests, first_seq=first), blob, offs)
        return first

    def _extend(
        self, records: bytearray, blob: bytes | bytearray | memoryview, offs: array[int]
    ) -> None:
        """Append checked records, their values and offsets (``offs`` fresh, from 0)."""
        # An empty log adopts the new buffers instead of copying them: at
        # 10 M tokens that is 320 MB of records and 80 MB of offsets not copied.
        if self._tokens:
            self._tokens += records
        else:
            self._tokens = records
        base = len(self._values)
        self._values += blob
        if base:
            self._offsets.extend(map(base.__add__, offs[1:]))
        else:
            self._offsets = offs
        self._dirty.add("tokens")

    def _encode(self, values: list[Any]) -> tuple[bytes | memoryview, array[int]]:
        try:
            return encode_values(values)
        except CanonicalEncodingError:
            found = first_unencodable(values)  # named as token() would
            if found is None:
                raise
            raise InvalidInputError(
                "token value cannot be canonically encoded",
                where=f"values[{found[0]}]",
                got=found[1].what,
            ) from None

    @_kinds_kept_only_on_success
    def tokens_from(
        self, kind: str | Sequence[str], values: Any, *, provenance: str = "recorded"
    ) -> int:
        """Record one token per value; returns the first one's seq.

        ``kind`` is one kind for every value or a sequence of kinds, one per
        value. ``values`` is a sequence, an ``array`` or a ``memoryview`` of
        numbers (read in one call), or any iterable. Nothing is recorded if
        any value or kind is refused.
        """
        prov = _provenance(provenance)
        numbers = _numbers(values)
        blob: bytes | bytearray | memoryview
        if numbers is not None:
            # int64 / uint64 / float64 columns: encoded natively, no object per value.
            blob, offs = encode_numbers(numbers)
            n = len(numbers)
        else:
            vals = _scalar_list(values)
            n = len(vals)
        if isinstance(kind, str):
            codes = array("I", [self._kind(kind)])  # one kind: broadcast natively
        else:
            kinds = list(kind)
            if len(kinds) != n:
                raise InvalidInputError(
                    "kinds must have one entry per value", expected=n, got=len(kinds)
                )
            table = {k: self._kind(k) for k in set(kinds)}
            codes = array("I", map(table.__getitem__, kinds))
        if numbers is None:
            blob, offs = self._encode(vals)
        return self._append_columns(codes, bytes([prov]), blob, offs)

    @_kinds_kept_only_on_success
    def tokens(self, items: Iterable[tuple[str, Any]], *, provenance: str = "recorded") -> None:
        """Record many (kind, value) tokens at once; nothing is recorded if one is refused."""
        prov = _provenance(provenance)
        batch = items if isinstance(items, list) else list(items)
        if not batch:
            return
        # Shape checked in C (type and len of every item); the slow loop only names the culprit.
        if set(map(type, batch)) != {tuple} or set(map(len, batch)) != {2}:
            for i, item in enumerate(batch):
                if not isinstance(item, tuple) or len(item) != 2:
                    raise InvalidInputError(
                        "each token must be a (kind, value) tuple", where=f"items[{i}]", got=item
                    )
        kinds, values = zip(*batch, strict=True)
        table = {k: self._kind(k) for k in set(kinds)}
        codes = array("I", map(table.__getitem__, kinds))
        blob, offs = self._encode(list(values))
        self._append_columns(codes, bytes([prov]), blob, offs)

    @_kinds_kept_only_on_success
    def tokens_packed(self, tokens: PackedTokens) -> int:
        """Append packed TOKEN records with their values; returns the first one's seq.

        The records must number on from :attr:`token_count`, use standard or
        named hashed kinds and valid provenance, and carry the digest of the
        value given for each (all checked natively before anything is
        appended). The recorder keeps its own copy.
        """
        if not isinstance(tokens, PackedTokens):
            raise InvalidInputError("tokens must be PackedTokens", got=type(tokens).__name__)
        values = tokens.values
        if values is None:
            raise InvalidInputError("tokens need their values to be recorded", where="values")
        records = tokens.view()
        n = len(tokens)
        first = len(self._tokens) // _TOKEN_SIZE
        scan = scan_tokens(records)  # kind 0, unknown provenance, reserved bytes
        if scan.first_malformed is not None:
            raise InvalidInputError(
                "malformed token record", where=f"tokens[{scan.first_malformed}]"
            )
        codes = _kind_codes(records)
        for code in set(codes):
            if code <= _STANDARD_MAX:
                continue
            name = tokens.kind_names.get(code)
            if name is None or code < 0x80000000:
                raise InvalidInputError(
                    "token kind code is neither standard nor a named hashed code",
                    where="tokens.kind_names",
                    got=f"0x{code:08x}",
                )
            if self._kind(name) != code:
                raise InvalidInputError(
                    "kind name does not hash to its code",
                    where="tokens.kind_names",
                    expected=f"0x{code:08x}",
                    got=name,
                )
        if isinstance(values, EncodedValues):
            blob: bytes | memoryview = values.blob
            offs = array("Q")  # a fresh copy: the recorder keeps its own
            offs.frombytes(memoryview(values.offsets).cast("B"))
            _one_value_each(blob, offs)
        else:
            blob, offs = self._encode(list(values))
        provs = records[12::_TOKEN_SIZE].tobytes() if n else b""
        digests = digest_batch(blob, offs)
        expected = pack_tokens(codes, provs, digests, first_seq=first)
        if expected != records:
            bad = next(
                i
                for i in range(n)
                if expected[32 * i : 32 * i + 32] != records[32 * i : 32 * i + 32]
            )
            raise InvalidInputError(
                "token record does not match its value (digest), seq or layout",
                where=f"tokens[{bad}]",
            )
        self._extend(expected, blob, offs)
        return first

    def observe_many(self, items: Iterable[tuple[int, str, bytes, float | None]]) -> None:
        """Record many (step, source, payload, pinned_at) reads, as :meth:`observe` each.

        All or nothing: every item is checked first (a refused one raises the
        error :meth:`observe` raises, its ``where`` naming ``items[i]``) and
        only then are they all appended; on any failure the recorder is
        exactly as before the call.
        """
        batch = items if isinstance(items, list) else list(items)
        rows: list[list[Any]] = []
        payloads: list[bytes] = []
        for i, given in enumerate(batch):
            # A NamedTuple record is taken as a plain tuple, as the loop of single calls took it.
            item = tuple(given) if type(given) is not tuple and isinstance(given, tuple) else given
            if type(item) is not tuple or len(item) != 4:
                raise InvalidInputError(
                    "each observation must be (step, source, payload, pinned_at)",
                    where=f"items[{i}]",
                    got=item,
                )
            step, source, payload, pinned_at = item
            if not (
                type(step) is int
                and 0 <= step < STEP_LIMIT
                and type(source) is str
                and source.isascii()
                and source.strip()
                and type(payload) is bytes
                and len(payload) <= MAX_OBJECT_SIZE
                and (pinned_at is None or (type(pinned_at) is float and math.isfinite(pinned_at)))
            ):  # anything off the fast path: observe()'s own checks, the index named
                where = f"run {self._run_id} branch {self._branch} observation"
                step, source, payload, pinned_at = _at(i, partial(_checked_read, where=where), item)
            elif pinned_at is not None:
                pinned_at += 0.0  # -0.0 is stored as 0.0, as observe() does
            rows.append([step, source, None, pinned_at])
            payloads.append(payload)
        if rows:
            self._append_payload_rows(self._observations, rows, 2, payloads, "observations")

    def effect_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """Append many (target, payload) side effects as :meth:`effect` does; the first seq.

        All or nothing: every item is checked first (a refused one raises the
        error :meth:`effect` raises, its ``where`` naming ``items[i]``) and
        only then are they all appended; on any failure the recorder is
        exactly as before the call. An empty batch appends nothing and returns -1.
        """
        batch = items if isinstance(items, list) else list(items)
        first = len(self._effects)
        rows: list[list[Any]] = []
        payloads: list[bytes] = []
        for i, given in enumerate(batch):
            # A NamedTuple record is taken as a plain tuple, as the loop of single calls took it.
            item = tuple(given) if type(given) is not tuple and isinstance(given, tuple) else given
            if type(item) is not tuple or len(item) != 2:
                raise InvalidInputError(
                    "each effect must be (target, payload)", where=f"items[{i}]", got=item
                )
            target, payload = item
            if not (
                type(target) is str
                and target.isascii()
                and target.strip()
                and type(payload) is bytes
                and len(payload) <= MAX_OBJECT_SIZE
            ):
                target, payload = _at(i, _checked_effect, item)
            rows.append([first + i, target, None])
            payloads.append(payload)
        if not rows:
            return -1
        self._append_payload_rows(self._effects, rows, 2, payloads, "effects")
        self._sealed = False
        return first

    def _append_payload_rows(
        self, log: list[list[Any]], rows: list[list[Any]], at: int, payloads: list[bytes], name: str
    ) -> None:
        """Stash each payload and append the rows (their column ``at`` set to its key).

        Nothing here can refuse an item (all were checked), and an interruption
        (``KeyboardInterrupt``) is rolled back: the log, the pending objects and
        the unlogged keys are as they were.
        """
        keys: list[bytes] = [digest(p) for p in payloads]
        confirmed, logged, pending = self._confirmed, self._logged, self._pending
        fresh: dict[bytes, bytes] = {
            k: p for k, p in zip(keys, payloads, strict=True)
            if k not in confirmed and k not in logged and k not in pending
        }  # fmt: skip
        for row, key in zip(rows, keys, strict=True):
            row[at] = key
        n_log, n_unlogged, was_dirty = len(log), len(self._unlogged), name in self._dirty
        try:
            pending.update(fresh)
            self._unlogged.extend(keys)
            log.extend(rows)
            self._dirty.add(name)
        except BaseException:
            del log[n_log:]
            del self._unlogged[n_unlogged:]
            for key in fresh:
                pending.pop(key, None)
            if not was_dirty:
                self._dirty.discard(name)
            raise


def _one_value_each(blob: bytes | memoryview, offs: array[int]) -> None:
    """Each ``blob[offs[i]:offs[i+1]]`` is exactly one value in canonical form, or
    InvalidInputError naming the first that is not.

    The digests alone do not say so: ``b"\\x01\\x02"`` and ``b""`` hash like any bytes, and
    a replay cursor, which decodes a block in one stream, then served 1 and 2 for two
    tokens whose records name other bytes (audit31); a map with a repeated key or a
    long-form int was stored as given and served as msgpack reads it (last key wins).
    One native call checks them all against the canonical encoder's rules
    (``cp_canonical_check``; its spec is the encoder's own round trip).
    """
    if len(offs) <= 1:
        return
    bad = canonical_check(blob, offs)
    if bad is not None:
        i, at, why = bad
        raise InvalidInputError(
            f"token value is not one value in canonical form: {why}",
            where=f"tokens[{i}]",
            expected="the canonical encoding (docs/format.md)",
            got=f"byte {at - offs[i]} of the value (byte {at} of the values blob)",
        )


def _checked_read(
    item: tuple[Any, Any, Any, Any], *, where: str
) -> tuple[int, str, bytes, float | None]:
    """One observation checked exactly as :meth:`Recorder.observe` checks it (``where``:
    its refusal's, run and branch)."""
    step, source, payload, pinned_at = item
    value = step_value(step)
    if value is None:
        raise InvalidInputError(
            "step must be an int in [0, 2**63)",
            where=where,
            expected="an int (not a bool) in [0, 2**63)",  # Recorder.observe's refusal
            got=step,
        )
    step = value
    non_empty_text(source, "source")
    data = as_payload(payload, "observation payload")
    return step, source, data, None if pinned_at is None else checked_pin(pinned_at)


def checked_pin(pinned_at: object) -> float:
    """A pin time (not None) as the float stored: finite, -0.0 folded, or InvalidInputError.

    Read by its value (``number_value``), as a ``Run`` reads one (review83: a float
    subclass's own ``__float__`` was asked, so a NaN saying 2.0 was pinned at 2.0, and
    ``Mock(spec=float)``, an instance to ``isinstance``, raised a bare TypeError)."""
    kind = type(pinned_at)
    value = number_value(pinned_at)
    if kind is bool or not issubclass(kind, (int, float)) or not math.isfinite(as_float(value)):
        raise InvalidInputError("pinned_at must be a finite number or None", got=pinned_at)
    return float(value) + 0.0


def as_float(value: float) -> float:
    """``float(value)``; an int beyond the float range is infinite (refused), not OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _checked_effect(item: tuple[Any, Any]) -> tuple[str, bytes]:
    """One effect checked exactly as :meth:`Recorder.effect` checks it."""
    target, payload = item
    non_empty_text(target, "effect target")
    return target, as_payload(payload, "effect payload")


def _at(i: int, check: Callable[[Any], T], item: Any) -> T:
    """``check(item)``; its error re-raised as the same error, ``where`` naming ``items[i]``."""
    try:
        return check(item)
    except CpstoreError as exc:
        where = f"items[{i}]" if exc.where is None else f"items[{i}].{exc.where}"
        raise type(exc)(exc.what, where=where, expected=exc.expected, got=exc.got) from None
