"""Whether two open stores are one: by what they are, never by how they are spelled.

A transfer (push, pull) between two spellings of one store copied nothing and said
it succeeded: the command line compared the two locations as strings (a URL's
parameters in another order, ``localhost`` for ``127.0.0.1``, an added
``application_name``), and :func:`~cpstore.store.transfer.transfer` did not look.

* LMDB: one store is one data file. This process opens one environment per data
  file (``lmdb_registry``: a relative path, a trailing slash, a symlink or a bind
  mount find it), so two handles are one store when they share it, or when their
  data files are one file (device and inode, :func:`lmdb_file_of`).
* PostgreSQL: one store is one schema of one database of one server. The schema
  is in the URL; the database and the server are asked of the servers themselves,
  in a read transaction of each side: the source takes a transaction-level
  advisory lock on a random key (no row is written, it ends with the txn), the
  destination tries the same key. Advisory locks are per database of a server,
  so the try fails exactly when both sides are the same database of the same
  server, however its address is written. The store ids (``meta/store_id``) are
  read in the same transactions: two different ids are two stores without asking
  more; equal ids alone do not make one store (a ``pg_dump`` restored into another
  database, or a base backup started as another server, keeps the id).
* Different engines are different stores.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from cpstore.errors import InvalidInputError, SameStoreError
from cpstore.store.backend import Backend, Txn

__all__ = ["STORE_ID_KEY", "check_distinct", "lmdb_file_of", "same_store", "same_store_error"]

#: The ``meta`` key of a PostgreSQL store's id (pg_open.STORE_ID_KEY; repeated here so
#: this module does not import psycopg).
STORE_ID_KEY = b"store_id"


def lmdb_file_of(folder: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of ``folder``'s data.mdb; None without one."""
    try:
        st = os.stat(os.path.join(folder, "data.mdb"))
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _engine(backend: Backend) -> str:
    if getattr(backend, "env", None) is not None:
        return "lmdb"
    if isinstance(getattr(backend, "schema", None), str):
        return "postgresql"
    return type(backend).__name__


def _lmdb_same(a: Backend, b: Backend) -> bool:
    env_a, env_b = getattr(a, "env", None), getattr(b, "env", None)
    if env_a is env_b:
        return True
    file_a, file_b = getattr(env_a, "file_id", None), getattr(env_b, "file_id", None)
    return file_a is not None and file_a == file_b


def _query(txn: Txn[memoryview], sql: str, params: tuple[Any, ...]) -> list[Any]:
    """Rows of ``sql`` run in the PostgreSQL read ``txn`` (its connection, its snapshot)."""
    run = getattr(txn, "query", None)  # PgTxn.query (this module does not import psycopg)
    if run is None:  # pragma: no cover - every PostgreSQL txn has it
        raise InvalidInputError("not a PostgreSQL transaction", got=type(txn).__name__)
    return list(run(sql, params))


def _store_id(backend: Backend, txn: Txn[memoryview]) -> bytes | None:
    value = txn.get(STORE_ID_KEY, db=backend.db("meta"))
    return None if value is None else bytes(value)


def _pg_same(a: Backend, b: Backend) -> tuple[bool, str | None]:
    """(whether ``a`` and ``b`` are one PostgreSQL store, its store id in hex if any)."""
    if getattr(a, "schema", None) != getattr(b, "schema", None):
        return False, None
    with a.read_txn() as ta, b.read_txn() as tb:
        id_a, id_b = _store_id(a, ta), _store_id(b, tb)
        if id_a is not None and id_b is not None and id_a != id_b:
            return False, None
        for _ in range(3):  # a random key another session holds: draw again
            key = secrets.randbits(63)
            (held,) = _query(ta, "SELECT pg_try_advisory_xact_lock(%s)", (key,))[0]
            if held:
                (free,) = _query(tb, "SELECT pg_try_advisory_xact_lock(%s)", (key,))[0]
                return not free, None if id_a is None else id_a.hex()
    return False, None  # pragma: no cover - three random 63-bit keys all taken


def same_store(a: Backend, b: Backend) -> bool:
    """True when the open stores ``a`` and ``b`` are one store (see the module doc)."""
    return _same(a, b)[0]


def _same(a: Backend, b: Backend) -> tuple[bool, str | None]:
    if a is b:
        return True, None
    engine = _engine(a)
    if engine != _engine(b):
        return False, None
    if engine == "lmdb":
        return _lmdb_same(a, b), None
    if engine == "postgresql":
        return _pg_same(a, b)
    return False, None


def check_distinct(source: Backend, dest: Backend) -> None:
    """:class:`SameStoreError` when ``source`` and ``dest`` are one store; reads only."""
    same, store_id = _same(source, dest)
    if same:
        got = "one data file" if _engine(source) == "lmdb" else "one database schema"
        raise same_store_error(
            source.path, dest.path, got if store_id is None else f"{got}, store {store_id}"
        )


def same_store_error(source: str, dest: str, got: str) -> SameStoreError:
    """The refusal of a transfer from ``source`` to ``dest``, one store (``got``: why)."""
    return SameStoreError(
        "the source and the receiving store are the same store (two spellings of one "
        "location); nothing was copied",
        where=f"{source} -> {dest}",
        expected="two different stores",
        got=got,
        source=source,
        dest=dest,
    )
