"""Token values held as one canonical blob: a value is a Python object only when asked for.

A run loaded from a document, a ``.cprun`` file or a bulk recording keeps its
token values as their canonical encodings (docs/format.md) joined in one
buffer with n+1 offsets, the layout the store keeps them in. Findings ask
for a handful of values; the rest are never decoded.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from typing import Any, overload

from cpstore.errors import InvalidInputError
from cpstore.native.args import as_bytes_view
from cpstore.native.canonical import decode_value, encode_value

__all__ = ["EncodedValues"]

#: Sequences that are one value, never a list of values: a memoryview is bytes, as a
#: bytes or bytearray is (review83: ``EncodedValues([97]) == memoryview(b"a")`` was True).
_BYTES_OR_TEXT = (str, bytes, bytearray, memoryview)


class EncodedValues(Sequence[Any]):
    """A read-only sequence of values stored as canonical encodings.

    ``blob`` holds the encodings back to back; ``offsets`` (n+1 native
    uint64s, an ``array('Q')`` or a buffer of them) says where each starts
    and ends. Neither is copied. Item ``i`` is decoded (and its canonical
    form re-checked) each time it is read.
    """

    def __init__(self, blob: Any, offsets: Any) -> None:
        self._blob = as_bytes_view(blob, "values.blob")
        offs = offsets if isinstance(offsets, array) else memoryview(offsets).cast("B").cast("Q")
        if len(offs) == 0 or offs[0] != 0 or offs[-1] != self._blob.nbytes:
            raise InvalidInputError(
                "value offsets must start at 0 and end at the blob's size",
                where="values.offsets",
                expected=(0, self._blob.nbytes),
                got=(offs[0], offs[-1]) if len(offs) else "no offsets",
            )
        self._offsets = offs

    @property
    def blob(self) -> memoryview:
        """The encodings back to back (no copy)."""
        return self._blob

    @property
    def offsets(self) -> Any:
        """The n+1 offsets (``array('Q')`` or a uint64 view)."""
        return self._offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def encoding(self, index: int) -> bytes:
        """The canonical encoding of value ``index``."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        start, end = self._offsets[index], self._offsets[index + 1]
        if not start <= end <= self._blob.nbytes:
            raise InvalidInputError(
                "value offsets decrease or run past the blob", where=f"values[{index}]"
            )
        return bytes(self._blob[start:end])

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence (not a str or a bytes-like) of values with the same
        canonical encodings in the same order, as it iterates them: the values a
        validation would judge equal. Python's own equality is not used (``1 == True ==
        1.0`` there; three different tokens to a replay check); a value with no canonical
        form is equal to none, and so is one whose own methods raise when read
        (``items()``, ``__index__``, ``__len__`` of a subclass): ``==`` never raises the
        caller's exception (left83)."""
        if isinstance(other, EncodedValues):
            return len(self) == len(other) and all(
                self.encoding(i) == other.encoding(i) for i in range(len(self))
            )
        if isinstance(other, Sequence) and not isinstance(other, _BYTES_OR_TEXT):
            n = len(self)
            try:
                if len(other) != n:
                    return False
                # Its items as it iterates them, n of them exactly (review83: a sequence
                # whose __len__ said more than it iterated was equal to a longer
                # EncodedValues, and one that iterated more raised IndexError out of ==).
                items = list(itertools.islice(other, n + 1))
                if len(items) != n:
                    return False
                return all(self.encoding(i) == encode_value(v) for i, v in enumerate(items))
            except MemoryError:
                raise
            except Exception:  # no canonical form (a set, NaN, a too-deep value), a range
                return False  # past sys.maxsize, a method of the caller's raising (left83)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EncodedValues({len(self)} values, {self._blob.nbytes} bytes)"

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return decode_value(self.encoding(index))
