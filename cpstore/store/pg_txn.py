"""The Txn protocol on PostgreSQL: one table per named table, bytea keys and values.

A :class:`PgTxn` holds one pooled connection for its life. Its first round
trip carries ``BEGIN`` with the first statement (a pipeline), so a read that
asks nothing costs nothing and a read that asks one thing costs one round
trip. Writers take the store's transaction-scoped advisory lock first: one
writer at a time across every host, as LMDB has one writer per file, and
READ COMMITTED under that lock sees every commit before it. Readers run on
REPEATABLE READ READ ONLY snapshots.

Writes are buffered in the txn (what it wrote is what it reads back) and
sent in one pipeline before a scan, a count, or ``COMMIT``; reads are cached
(under the writer lock nothing else changes the tables; a read snapshot never
changes). :meth:`PgTxn.prefetch` fetches many keys in one round trip.
bytea compares bytewise, so ``ORDER BY k`` is LMDB's key order.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

import psycopg

from cpstore.errors import CpstoreError, InvalidInputError, StoreReadOnlyError
from cpstore.store.pg_cursor import PgCursor
from cpstore.store.pg_errors import interrupt_in, is_broken, translate
from cpstore.store.pg_table import EXISTS, Exists, PgTable, settled

__all__ = ["EXISTS", "PgCursor", "PgTable", "PgTxn", "settled"]

_scan_ids = itertools.count()


Known = dict[bytes, "bytes | Exists | None"]


class PgTxn:
    """One PostgreSQL transaction behind :class:`~cpstore.store.backend.Txn`.

    ``acquire`` hands out a connection and ``release(conn, broken)`` takes it
    back (the pool); ``begin`` is the statement list that opens the txn.
    """

    def __init__(
        self,
        acquire: Callable[[], psycopg.Connection[Any]],
        release: Callable[[psycopg.Connection[Any], bool], None],
        begin: list[tuple[str, tuple[Any, ...]]],
        *,
        write: bool,
        where: str,
    ) -> None:
        self._acquire, self._release = acquire, release
        self._begin = begin
        self.write = write
        self.where = where
        self._conn: psycopg.Connection[Any] | None = None
        self._begun = False
        self._done = False
        #: True while a round trip is on the wire: an interrupt (not a psycopg error, which
        #: psycopg settles) landing in psycopg's pipeline I/O leaves the connection out of
        #: step with the server (seen: libpq idle while the server held BEGIN and the
        #: writer lock, waiting for a Sync never sent), so abort() closes it.
        self._wire = False
        self._known: dict[PgTable, Known] = {}
        self._dirty: dict[PgTable, dict[bytes, bytes | None]] = {}
        #: Server-side cursor streams (:meth:`scan`), closed when the txn ends.
        self._scans: list[Generator[tuple[bytes, memoryview], None, None]] = []

    # -- the connection ----------------------------------------------------------

    def _run(self, statements: list[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        """Run ``statements`` in one round trip (after BEGIN when not begun); their rows.

        A connection that turns out dead on the txn's first round trip
        (a server restart, a terminated backend) is swapped for a fresh one
        once: nothing was read or written on it yet.
        """
        if self._done:
            raise InvalidInputError("the transaction has ended", where=self.where)
        for attempt in (0, 1):
            if self._conn is None:
                try:
                    self._conn = self._acquire()
                except psycopg.Error as exc:
                    raise translate(exc, self.where) from None
            conn = self._conn
            self._wire = True
            try:
                if self._begun and len(statements) == 1:
                    sql, params = statements[0]
                    cur = conn.execute(sql, params, binary=True)
                    rows = [cur.fetchall() if cur.description is not None else []]
                    self._wire = False
                    return rows
                with conn.pipeline():
                    if not self._begun:
                        for stmt, args in self._begin:
                            conn.execute(stmt, args)
                    curs = [conn.execute(sql, params, binary=True) for sql, params in statements]
                self._begun = True
                rows = [c.fetchall() if c.description is not None else [] for c in curs]
                self._wire = False
                return rows
            except psycopg.Error as exc:
                self._wire = False  # psycopg settled the connection before raising
                broken = is_broken(exc, conn)
                if broken and not self._begun and attempt == 0:
                    self._conn = None
                    self._release(conn, True)
                    continue
                if not broken:
                    self._begun = True  # BEGIN may have run: abort() rolls it back
                raise translate(exc, self.where, conn) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _statements(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self._run([(sql, params)])[0]

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Rows of one SQL statement run in this txn (its connection and snapshot).

        For questions to the server that are not about the store's tables (whether two
        handles reach one database: store_identity.py); the store's rows go through the
        table calls, which buffer writes and keep the txn's reads consistent with them.
        """
        return list(self._statements(sql, params))

    def begin_now(self) -> None:
        """Begin the txn now, not at its first read: for a write txn, BEGIN and the
        store's writer lock (the backend's begin statements) are held on return."""
        self._ensure()

    def _ensure(self) -> psycopg.Connection[Any]:
        if not self._begun:
            self._statements("SELECT 1", ())
        assert self._conn is not None
        return self._conn

    # -- reads ---------------------------------------------------------------------

    def _table(self, db: Any) -> PgTable:
        if not isinstance(db, PgTable):
            raise InvalidInputError("a PostgreSQL txn needs a table handle", got=repr(db))
        return db

    def _lookup(self, table: PgTable, key: bytes) -> bytes | Exists | None:
        dirty = self._dirty.get(table)
        if dirty is not None and key in dirty:
            return dirty[key]
        known = self._known.setdefault(table, {})
        if key in known:
            found = known[key]
            if not isinstance(found, Exists):
                return found
        rows = self._statements(table.sql["get"], (key,))
        value = bytes(rows[0][0]) if rows else None
        known[key] = value
        return value

    def _stored(self, table: PgTable, key: bytes) -> bool:
        dirty = self._dirty.get(table)
        if dirty is not None and key in dirty:
            return dirty[key] is not None
        if isinstance(self._known.get(table, {}).get(key), Exists):
            return True
        return self._lookup(table, key) is not None

    def has(self, key: bytes, db: Any = None) -> bool:
        """True when ``key`` is stored (an existence prefetch answers without a fetch)."""
        return self._stored(self._table(db), bytes(key))

    def get(self, key: bytes, default: Any = None, db: Any = None) -> memoryview | None:
        """The value under ``key``, or ``default``."""
        value = self._lookup(self._table(db), bytes(key))
        if value is None:
            return default  # type: ignore[no-any-return]
        assert isinstance(value, bytes)
        return memoryview(value)

    def prefetch(
        self,
        wants: Mapping[PgTable, Iterable[bytes]],
        *,
        exists: Mapping[PgTable, Iterable[bytes]] | None = None,
    ) -> None:
        """Fetch the values of ``wants`` and the existence of ``exists``, in one round trip."""
        todo: list[tuple[PgTable, list[bytes], bool]] = []
        asked: set[tuple[PgTable, bytes]] = set()
        for group, values in ((wants, True), (exists or {}, False)):
            for table, keys in group.items():
                known = self._known.setdefault(table, {})
                missing = [
                    k
                    for k in dict.fromkeys(bytes(k) for k in keys)
                    if k not in known and (table, k) not in asked
                ]
                asked.update((table, k) for k in missing)
                if missing:
                    todo.append((table, missing, values))
        if not todo:
            return
        # One statement for every table (UNION ALL): the server parses and plans once.
        sql = " UNION ALL ".join(
            f"SELECT {i}::int2, k, {'v' if values else 'NULL::bytea'} FROM {t.qualified} "
            "WHERE k = ANY(%b)"
            for i, (t, _, values) in enumerate(todo)
        )
        rows = self._statements(sql, tuple(keys for _, keys, _ in todo))
        for table, keys, _ in todo:
            known = self._known[table]
            for k in keys:
                known.setdefault(k, None)
        for i, k, v in rows:
            table, _, values = todo[i]
            self._known[table][bytes(k)] = bytes(v) if values else EXISTS

    def relation_bytes(self, qualified: list[str]) -> int:
        """``pg_total_relation_size`` summed over tables (indexes and TOAST included)."""
        rows = self._statements(
            "SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0)::bigint "
            "FROM unnest(%s::text[]) AS t",
            (qualified,),
        )
        return int(rows[0][0])

    def stat(self, db: Any) -> dict[str, int]:
        """``{"entries": rows}`` of the table, counting this txn's writes (flushed first):
        the refs table's count is the one the server keeps when the store has it
        (pg_count.py, constant time), any other table's a ``count(*)``. A handle that
        counts the refs with ``count(*)`` while the store keeps a count it may read (it
        could not install the triggers again) also gives that count as ``kept``."""
        table = self._table(db)
        self._flush()
        rows = self._statements(table.sql["count"], ())
        if len(rows[0]) > 1:  # a count(*) and the kept count beside it (pg_table, review73)
            return {"entries": int(rows[0][0]), "kept": int(rows[0][1])}
        return {"entries": int(rows[0][0])}

    def cursor(self, db: Any = None) -> PgCursor:
        """A cursor over the table in key order."""
        return PgCursor(self, self._table(db))

    # -- writes --------------------------------------------------------------------

    def _writable(self) -> None:
        if not self.write:
            raise StoreReadOnlyError("a read transaction cannot write", where=self.where)

    def put(  # noqa: PLR0917 - py-lmdb's own signature (the commit passes them positionally)
        self,
        key: bytes,
        value: bytes | memoryview,
        dupdata: bool = True,
        overwrite: bool = True,
        append: bool = False,
        db: Any = None,
    ) -> bool:
        """Store ``value`` under ``key``; with ``overwrite=False`` False when the key exists."""
        self._writable()
        table, key = self._table(db), bytes(key)
        if not overwrite and self._stored(table, key):
            return False
        self._dirty.setdefault(table, {})[key] = bytes(value)
        return True

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        """Delete ``key``; False when it was not stored."""
        self._writable()
        table, key = self._table(db), bytes(key)
        if not self._stored(table, key):
            return False
        self._dirty.setdefault(table, {})[key] = None
        return True

    def _flush_statements(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Every buffered write as one statement (data-modifying CTEs), or none.

        The keys a table deletes and upserts are disjoint (the buffer holds one
        final value per key), so the CTEs never touch a row twice.
        """
        parts: list[str] = []
        params: list[Any] = []
        for table, dirty in self._dirty.items():
            known = self._known.setdefault(table, {})
            puts = [(k, v) for k, v in dirty.items() if v is not None]
            gone = [k for k, v in dirty.items() if v is None]
            if gone:
                parts.append(table.sql["delete"])
                params.append(gone)
            if puts:
                parts.append(table.sql["upsert"])
                params.extend(([k for k, _ in puts], [v for _, v in puts]))
            known.update(dirty)
        self._dirty = {}
        if not parts:
            return []
        sql = "WITH " + ", ".join(f"w{i} AS ({p})" for i, p in enumerate(parts)) + " SELECT 1"
        return [(sql, tuple(params))]

    def _flush(self) -> None:
        """Send buffered writes (one pipeline) before a statement that must see them."""
        if not self._dirty:
            return
        self._run(self._flush_statements())

    # -- the end ---------------------------------------------------------------------

    def commit(self) -> None:
        """Send buffered writes and COMMIT, in one round trip."""
        if self._done:
            raise InvalidInputError("the transaction has ended", where=self.where)
        statements = self._flush_statements() if self.write else []
        if not self._begun and not statements:
            self._finish(broken=False)
            return
        outer = sys.exception()  # the caller's, never an interrupt here (interrupt_in)
        conn = self._ensure()
        self._wire = True
        try:
            with conn.pipeline():
                for sql, params in statements:
                    conn.execute(sql, params)
                conn.execute("COMMIT")
        except psycopg.Error as exc:
            self._wire = False
            broken = is_broken(exc, conn)
            if not broken:
                self._rollback(conn)
            self._finish(broken=broken)
            raise interrupt_in(exc, outer) or translate(
                exc, self.where, conn, committing=broken
            ) from None
        self._finish(broken=False)

    def abort(self) -> None:
        """Roll back (a no-op on a txn that sent nothing) and give the connection back."""
        if self._done:
            return
        conn = self._conn
        # Interrupted on the wire, or unsettled (an interrupt in psycopg's pipeline I/O,
        # even before BEGIN was known to have run): closed, which ends the session and
        # the writer lock it may hold.
        broken = conn is not None and (
            self._wire or not settled(conn) or (self._begun and not self._rollback(conn))
        )
        self._finish(broken=broken)

    @staticmethod
    def _rollback(conn: psycopg.Connection[Any]) -> bool:
        """ROLLBACK; False (the caller then closes the connection, which ends the session
        and its transaction-scoped writer lock) when it cannot be trusted to run: an
        interrupt that landed in psycopg's pipeline I/O leaves the pipeline on (a ROLLBACK
        is only queued, and the session kept the store's writer lock: every other writer
        waited for ever) or a command in flight."""
        if not settled(conn):
            return False
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            return False
        return True

    def _finish(self, *, broken: bool) -> None:
        self._done = True
        scans, self._scans = self._scans, []
        try:
            for stream in scans:  # closed on this txn's connection, never on a later txn's
                try:
                    stream.close()
                except (CpstoreError, psycopg.Error, ValueError):
                    # ValueError: the stream is running now (another thread, a finalizer
                    # or a signal handler ended the txn from inside its loop): its cursor
                    # stays bound to the connection and its next FETCH or CLOSE would run
                    # inside whichever txn holds it next. A failed CLOSE leaves the session
                    # unknown. Either way the connection is closed, never pooled.
                    broken = True
        except BaseException:
            broken = True  # an interrupt inside a CLOSE: the connection still goes back,
            raise  # closed (kept, it was lost to the pool for good)
        finally:
            self._known.clear()
            self._dirty.clear()
            conn, self._conn = self._conn, None
            if conn is not None:
                self._release(conn, broken or conn.broken)

    def __enter__(self) -> PgTxn:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and self.write:
            self.commit()
        else:
            self.abort()

    # -- what the cursor uses ----------------------------------------------------------

    def page(self, table: PgTable, start: bytes, *, inclusive: bool, size: int) -> list[Any]:
        """Up to ``size`` rows from ``start`` on, in key order (writes flushed first)."""
        self._flush()
        rows = self._statements(table.sql["from" if inclusive else "after"], (start, size))
        return rows

    def page_before(self, table: PgTable, end: bytes, *, size: int) -> list[Any]:
        """Up to ``size`` rows with keys below ``end``, in key order (writes flushed first)."""
        self._flush()
        return self._statements(table.sql["before"], (end, size))[::-1]

    def near(self, db: Any, start: bytes, end: bytes, size: int) -> list[tuple[bytes, bytes]]:
        """In key order, one round trip (writes flushed first): the row just before
        ``start``, up to ``size`` rows in [``start``, ``end``) and the first row at or
        after ``end``. For the check of the refs rows beside an absent ref
        (``ref_neighbours``), which a cursor made in three queries."""
        table = self._table(db)
        self._flush()
        rows = self._statements(table.sql["near"], (start, start, end, size, end))
        return sorted((bytes(k), bytes(v)) for k, v in rows)

    def last_row(self, table: PgTable) -> Any:
        """The row with the largest key, or None."""
        self._flush()
        rows = self._statements(table.sql["last"], ())
        return rows[0] if rows else None

    def scan(self, table: PgTable) -> Iterator[tuple[bytes, memoryview]]:
        """Every row in key order, streamed through a server-side cursor.

        The stream is closed when the txn ends (:meth:`_finish`, while the connection is
        still this txn's): left to the garbage collector, a stream a raise abandoned
        (a damaged ref met mid-scan by ``prune``) sent its ``CLOSE`` on the connection
        after it went back to the pool, inside whichever txn held it then; the cursor was
        gone, so that txn was aborted and its next statement failed with 25P02 (chaos4,
        seed 1003 of the server-crash chaos variant;
        tests/test_pg_scan_cursor.py).
        """
        stream = self._scan(table)
        self._scans.append(stream)
        return _Stream(self, stream)

    def _scan(self, table: PgTable) -> Generator[tuple[bytes, memoryview], None, None]:
        self._flush()
        conn = self._ensure()
        name = f"cpstore_scan_{next(_scan_ids)}"
        try:
            with conn.cursor(name=name, binary=True) as cur:
                cur.itersize = 2000
                cur.execute(table.sql["scan"])
                while True:
                    rows = cur.fetchmany(cur.itersize)
                    if not rows:
                        return
                    for k, v in rows:
                        yield bytes(k), memoryview(bytes(v))
        except psycopg.Error as exc:
            raise translate(exc, self.where, conn) from None


class _Stream:
    """A scan as its caller holds it: past the txn's end (which closed the stream) the next
    row is refused (InvalidInputError), never a silent end of a truncated walk."""

    __slots__ = ("_rows", "_txn")

    def __init__(self, txn: PgTxn, rows: Iterator[tuple[bytes, memoryview]]) -> None:
        self._txn, self._rows = txn, rows

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> tuple[bytes, memoryview]:
        if self._txn._done:
            raise InvalidInputError(
                "the transaction has ended (a scan is read inside its txn)", where=self._txn.where
            )
        return next(self._rows)
