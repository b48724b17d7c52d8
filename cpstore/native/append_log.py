"""AppendLog: a state part that only grows, so a checkpoint costs what was appended.

A runtime that keeps a message history as a plain list hands the recorder the
whole list at every checkpoint; the recorder cannot know which elements
changed (any element may have been mutated in place, and remembering lists by
identity would hand out stale bytes), so it encodes and cuts the whole list
again: O(history) per checkpoint. An :class:`AppendLog` says, by its type,
that nothing but appends happen:

- :meth:`AppendLog.append` encodes the element **when it is appended**
  (snapshot semantics): mutating the object afterwards changes nothing
  stored, and reads hand out fresh decoded copies, never the object given;
- its canonical encoding is byte-identical to ``encode_value(list(log))``,
  so a part stored from an AppendLog has the same digest, the same chunk
  tree and the same manifest as the plain list: ids, readers and the format
  are unchanged, and reading the checkpoint returns a plain ``list``;
- the recorder continues the chunk tree where its previous checkpoint of the
  same log left it (:mod:`cpstore.store.append_state`), so a checkpoint hashes,
  cuts and stores the appended elements, not the history.
"""

from __future__ import annotations

import os
import threading
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from cpstore.errors import CanonicalEncodingError, InvalidInputError
from cpstore.native.canonical import array_header, decode_value
from cpstore.native.fast_canonical import encode_element
from cpstore.native.kept import kept_contextmanager

__all__ = ["AppendLog", "array_header", "log_view"]


class AppendLog(Sequence[Any]):
    """An append-only list of canonical values, each encoded when it is appended.

    Use it as a state part (``rec.checkpoint(step, {"messages": log})``) for
    histories that only grow. Elements are any value :func:`encode_value`
    accepts; indexing and iterating decode fresh copies (tuples read back as
    lists, as after any checkpoint). There is no way to change or remove an
    element: start a new log for that.
    """

    __slots__ = ("__weakref__", "_body", "_ends", "_lock")

    def __init__(self, items: Iterable[Any] = ()) -> None:
        if hasattr(self, "_ends"):  # a second __init__ would replace the bytes a store continues
            raise InvalidInputError(
                "an AppendLog only grows: start a new log instead of re-initialising one",
                where="AppendLog.__init__",
                got=repr(self),
            )
        # The bytes and the end offsets change together under the lock: an
        # append from another thread never lands between them, so a
        # checkpoint (log_view), a copy or a pickle sees whole elements only,
        # and an append during a checkpoint waits for it instead of failing.
        self._lock = threading.Lock()
        self._body = bytearray()
        self._ends = array("Q")
        _LIVE[id(self)] = self
        self.extend(items)

    def append(self, item: Any) -> None:
        """Encode ``item`` now and add it; refuses what :func:`encode_value` refuses."""
        try:
            enc = encode_element(item)
        except CanonicalEncodingError as exc:  # "$[0]...": name the index it would have had
            where = exc.where or "$[0]"
            raise CanonicalEncodingError(
                exc.what,
                where=f"$[{len(self._ends)}]" + where[len("$[0]") :],
                expected=exc.expected,
                got=exc.got,
            ) from None
        with self._lock:
            self._body += enc
            self._ends.append(len(self._body))

    def extend(self, items: Iterable[Any]) -> None:
        """:meth:`append` each item in turn (those before a refused one stay appended)."""
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return len(self._ends)

    def _element(self, i: int) -> bytes:
        start = self._ends[i - 1] if i else 0
        return bytes(self._body[start : self._ends[i]])

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [decode_value(self._element(i)) for i in range(*index.indices(len(self)))]
        n = len(self._ends)
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("AppendLog index out of range")
        return decode_value(self._element(i))

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self._ends)):
            yield decode_value(self._element(i))

    def to_list(self) -> list[Any]:
        """The elements as a new plain list (what a checkpoint of this log reads back)."""
        value: list[Any] = decode_value(self.encoding())
        return value

    def encoding(self) -> bytes:
        """``encode_value(self.to_list())``, without re-encoding anything."""
        with self._lock:
            return array_header(len(self._ends)) + self._body

    def __copy__(self) -> AppendLog:
        """An independent log with the same elements (never one sharing this log's buffer)."""
        new = AppendLog()
        with self._lock:
            new._body += self._body
            new._ends.extend(self._ends)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> AppendLog:
        return self.__copy__()

    def __reduce__(self) -> tuple[Any, ...]:
        with self._lock:
            return (_restore, (bytes(self._body), self._ends.tobytes()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AppendLog):
            return self._ends == other._ends and self._body == other._body
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AppendLog({len(self._ends)} elements, {len(self._body)} bytes)"


#: Every log of this process, for :func:`_after_fork` (by id: a log is unhashable).
_LIVE: weakref.WeakValueDictionary[int, AppendLog] = weakref.WeakValueDictionary()


def _after_fork() -> None:
    """In a forked child, where the thread that held a log's lock does not exist.

    Each log gets a new lock and a new buffer holding its bytes up to its
    last whole element: a checkpoint that was reading it (an exported view
    that is never released) or an append half made (bytes grown, end not
    kept) in another thread of the parent would otherwise deadlock or fail
    every append in the child.
    """
    for log in list(_LIVE.values()):
        ends = log._ends
        log._body = bytearray(log._body[: ends[-1] if ends else 0])
        log._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _restore(body: bytes, ends: bytes) -> AppendLog:
    """Unpickle: the elements are decoded and appended again (checked, never trusted)."""
    log = AppendLog()
    offsets = array("Q")
    offsets.frombytes(ends)
    start = 0
    for end in offsets:
        log.append(decode_value(body[start:end]))
        start = end
    return log


@kept_contextmanager
def log_view(log: AppendLog) -> Iterator[tuple[bytes, memoryview, array[int]]]:
    """(array header, read-only view of the encoded elements, element end offsets) now.

    For the store (:mod:`cpstore.store.append_state`): the log cannot grow
    while the view is held (it holds the log's lock: an append from another
    thread waits), and the view is released on leaving; the offsets only lengthen.
    """
    with log._lock, memoryview(log._body) as whole, whole.toreadonly() as body:
        yield array_header(len(log._ends)), body, log._ends
