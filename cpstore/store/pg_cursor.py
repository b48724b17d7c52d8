"""LMDB's cursor calls on a PostgreSQL table (:class:`PgCursor`): rows read a page at a
time through the txn that made the cursor (pg_txn.py's ``page``, ``page_before``,
``last_row`` and ``scan``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from cpstore.store.pg_table import PgTable

__all__ = ["PagedTxn", "PgCursor"]


class PagedTxn(Protocol):
    """What a cursor reads through: :class:`~cpstore.store.pg_txn.PgTxn`."""

    def page(self, table: PgTable, start: bytes, *, inclusive: bool, size: int) -> list[Any]: ...

    def page_before(self, table: PgTable, end: bytes, *, size: int) -> list[Any]: ...

    def last_row(self, table: PgTable) -> Any: ...

    def scan(self, table: PgTable) -> Iterator[tuple[bytes, memoryview]]: ...


class PgCursor:
    """LMDB's cursor calls on a table: ``first``, ``last``, ``set_range``, ``next``, ``prev``,
    iteration."""

    _FIRST_PAGE = 8
    _MAX_PAGE = 1024

    def __init__(self, txn: PagedTxn, table: PgTable) -> None:
        self._txn, self._table = txn, table
        self._rows: list[Any] = []
        self._i = -1
        self._size = self._FIRST_PAGE
        self._full = False  # the page was full: more rows may follow it
        self._positioned = False

    def __enter__(self) -> PgCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._rows = []

    def _load(self, start: bytes, *, inclusive: bool) -> bool:
        rows = self._txn.page(self._table, start, inclusive=inclusive, size=self._size)
        self._full = len(rows) == self._size
        self._size = min(self._size * 4, self._MAX_PAGE)
        self._rows, self._i = rows, 0
        self._positioned = bool(rows)
        return bool(rows)

    def first(self) -> bool:
        """Position on the first row; False when the table is empty."""
        self._size = self._FIRST_PAGE
        return self._load(b"", inclusive=True)

    def set_range(self, key: bytes) -> bool:
        """Position on the first row whose key is >= ``key``; False when none is."""
        self._size = self._FIRST_PAGE
        return self._load(bytes(key), inclusive=True)

    def last(self) -> bool:
        """Position on the last row; False when the table is empty."""
        row = self._txn.last_row(self._table)
        self._rows, self._i, self._full = ([row], 0, True) if row is not None else ([], -1, False)
        self._positioned = row is not None
        return self._positioned

    def next(self) -> bool:
        """Move to the next row; False past the last one."""
        if not self._positioned:
            return self.first()
        self._i += 1
        if self._i < len(self._rows):
            return True
        if not self._full:
            self._positioned = False
            return False
        return self._load(bytes(self._rows[-1][0]), inclusive=False)

    def prev(self) -> bool:
        """Move to the previous row (from unpositioned: the last, as py-lmdb); False
        before the first one, which leaves the cursor unpositioned."""
        if not self._positioned:
            return self.last()
        if self._i > 0:
            self._i -= 1
            return True
        rows = self._txn.page_before(self._table, bytes(self._rows[0][0]), size=self._size)
        self._size = min(self._size * 4, self._MAX_PAGE)
        # The rows after this page are known to exist: next() loads them again.
        self._rows, self._i, self._full = rows, len(rows) - 1, True
        self._positioned = bool(rows)
        return self._positioned

    def key(self) -> bytes:
        """The key at the position (b"" when unpositioned, as py-lmdb)."""
        return bytes(self._rows[self._i][0]) if self._positioned else b""

    def value(self) -> memoryview:
        """The value at the position."""
        return memoryview(bytes(self._rows[self._i][1]) if self._positioned else b"")

    def __iter__(self) -> Iterator[tuple[bytes, memoryview]]:
        if not self._positioned:
            yield from self._txn.scan(self._table)
            return
        while self._positioned:
            yield self.key(), self.value()
            self.next()
