"""Refuse, before a byte is written, a document whose token values are not its records'.

A :class:`Run` is validated by its packed TOKEN records alone; ``tokens.values``
only make findings readable and are taken unchecked (``PackedTokens(records,
values=...)``, a ``.cprun`` file's values section). A JSON or msgpack document
has no records: it holds the values, and a reader packs its records from them.
Written as they were, values that are not the records' gave a document that said
another run: a ``.cprun`` replay that was a REJECT converted (``cpstore convert``,
``dump_document``, ``write_document``) into a JSON or msgpack replay that was an
ACCEPT (review76). The writers now check every value against its record's digest
first, as the replay cursor does before it serves one (audit59).
"""

from __future__ import annotations

from cpstore.errors import CanonicalEncodingError, IntegrityError, InvalidInputError
from cpstore.native.args import as_offsets
from cpstore.native.binding import canonical_check, digest_batch
from cpstore.native.columns import encode_values, first_unencodable
from cpstore.run.model import PackedTokens
from cpstore.run.values import EncodedValues

__all__ = ["check_values_match"]

_CHUNK = 1 << 15
_MISMATCH = "token value does not match its record (its digest is another value's)"


def _compare(digests: bytes, records: memoryview, first: int, last: int) -> None:
    recs = bytes(records[32 * first : 32 * last])
    # Byte k of every digest against byte 16+k of every record: 16 slice
    # compares per chunk; a mismatch is then located token by token.
    if all(digests[k::16] == recs[16 + k :: 32] for k in range(16)):
        return
    for j in range(last - first):
        if digests[16 * j : 16 * j + 16] != recs[32 * j + 16 : 32 * j + 32]:
            raise IntegrityError(
                _MISMATCH,
                where=f"tokens[{first + j}].value",
                expected=recs[32 * j + 16 : 32 * j + 32].hex(),
                got=digests[16 * j : 16 * j + 16].hex(),
            )


def check_values_match(tokens: PackedTokens) -> None:
    """Raise :class:`IntegrityError` at the first token whose value's canonical
    encoding does not hash to its record's value digest (nothing when
    ``tokens.values`` is None: the writers refuse that themselves)."""
    values = tokens.values
    if values is None:
        return
    records = tokens.view()
    if isinstance(values, EncodedValues):
        # Each value must be one canonical value where its offsets say: the
        # writers decode it, and a non-canonical one would be re-encoded as
        # other bytes (another digest) by the reader of the document.
        offsets = as_offsets(values.offsets)
        bad = canonical_check(values.blob, offsets)
        if bad is not None:
            raise IntegrityError(
                f"token value is not one value in canonical form at its offsets: {bad[2]}",
                where=f"tokens[{bad[0]}].value",
            )
        _compare(digest_batch(values.blob, offsets), records, 0, len(values))
        return
    for first in range(0, len(tokens), _CHUNK):
        last = min(len(tokens), first + _CHUNK)
        chunk = list(values[first:last])
        try:
            blob, offs = encode_values(chunk)
        except CanonicalEncodingError:
            found = first_unencodable(chunk)
            index, exc = found if found is not None else (0, None)
            raise InvalidInputError(
                "token value cannot be canonically encoded",
                where=f"tokens[{first + index}].value",
                got=None if exc is None else exc.what,
            ) from None
        _compare(digest_batch(blob, offs), records, first, last)
