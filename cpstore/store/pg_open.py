"""Opening a PostgreSQL store: the URL, the schema and its tables, the format record.

A store is one schema (``cpstore`` unless the URL says ``?schema=NAME``) of
one database: a table per named table of the store (``DB_NAMES``), each
``(k bytea PRIMARY KEY, v bytea NOT NULL)``, holding the same bytes under the
same keys as the LMDB store (docs/store.md, "PostgreSQL"). Opening checks
and creates under the store's writer lock, in one transaction (PostgreSQL's
DDL is transactional): processes creating one store together make it once. A writable
open also installs the refs count the server keeps (:mod:`pg_count`) in that transaction.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg
from psycopg.conninfo import conninfo_to_dict

from cpstore.errors import (
    InvalidInputError,
    NotFoundError,
    ServerVersionError,
    StoreConnectionError,
    StoreError,
)
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.lmdb_env import DB_NAMES
from cpstore.store.lmdb_open import FORMAT_KEY, PG_FORMAT, check_format, refuse
from cpstore.store.location import redact
from cpstore.store.pg_count import counts_kept, install_counts
from cpstore.store.pg_errors import translate

__all__ = [
    "DEFAULT_SCHEMA",
    "MIN_SERVER_VERSION",
    "STORE_ID_KEY",
    "TESTED_SERVER_VERSION",
    "StoreUrl",
    "check_server_version",
    "lock_key",
    "parse_url",
    "prepare_schema",
    "write_identity",
]

#: The schema a URL without ``?schema=`` names.
DEFAULT_SCHEMA = "cpstore"
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: URL query parameters cpstore takes for itself (libpq would refuse them).
_OURS = ("schema", "pool_max")
#: The ``meta`` key of a store's id: 16 random bytes, written once by the first writable
#: open (under the writer lock), never changed; a write nested on one thread is known by it
#: whatever the URL's spelling (:func:`write_identity`).
STORE_ID_KEY = b"store_id"
#: The oldest server a store opens on, as ``server_version_num`` (14.0): the code uses
#: nothing newer (advisory locks, ``unnest``, data-modifying CTEs, ``ON CONFLICT``).
MIN_SERVER_VERSION = 140000
#: The major version the test suite runs on (docs/scale.md, "What was not tested").
TESTED_SERVER_VERSION = 15


def show_version(num: int) -> str:
    """``server_version_num`` as people write it: 150018 is "15.18", 90624 "9.6.24"."""
    if num >= 100000:
        return f"{num // 10000}.{num % 10000}"
    return f"{num // 10000}.{num // 100 % 100}.{num % 100}"


def check_server_version(found: int, where: str | None, required: int | None = None) -> None:
    """ServerVersionError when ``found`` (``server_version_num``) is below ``required``
    (default :data:`MIN_SERVER_VERSION`); 0 (libpq's "unknown") is refused too."""
    need = MIN_SERVER_VERSION if required is None else required
    if found < need:
        raise ServerVersionError(
            f"PostgreSQL {show_version(found)} is older than cpstore supports "
            f"(PostgreSQL {show_version(need)} or newer; tested on "
            f"{TESTED_SERVER_VERSION}); nothing was opened",
            where=where,
            expected=f"server_version_num >= {need}",
            got=found,
            found=found,
            required=need,
        )


@dataclass(frozen=True)
class StoreUrl:
    """A parsed store URL: what libpq gets, the schema, the pool size, the shown form."""

    conninfo: str
    schema: str
    pool_max: int
    shown: str


def parse_url(url: str) -> StoreUrl:
    """Split cpstore's own parameters (``schema``, ``pool_max``) off a PostgreSQL URL."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise InvalidInputError(
            "not a usable PostgreSQL URL", where=redact(url), got=str(exc)
        ) from None
    ours = {k: v for k, v in query if k in _OURS}
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _IDENT.fullmatch(schema):
        raise InvalidInputError(
            "the schema name must be a lower-case SQL identifier",
            where=redact(url),
            expected="[a-z_][a-z0-9_]{0,62}",
            got=schema,
        )
    raw_max = ours.get("pool_max", "8")
    # ASCII digits, few of them (review83: int() of a superscript str.isdigit() takes, or
    # of more than 4,300 digits, was a bare ValueError; other scripts' digits were read).
    digits = raw_max.lstrip("0")
    if not (raw_max.isascii() and raw_max.isdigit() and len(digits) <= 4) or not (
        1 <= int(digits or "0") <= 1000
    ):
        raise InvalidInputError(
            "pool_max must be an int from 1 to 1000", where=redact(url), got=raw_max
        )
    rest = urlencode([(k, v) for k, v in query if k not in _OURS], quote_via=quote)
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    shown = redact(url)
    try:  # libpq's own parse, so a URL it refuses is bad input, not a failed server
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise InvalidInputError(
            "not a usable PostgreSQL URL", where=shown, got=_unquoted(str(exc), parts.password)
        ) from None
    return StoreUrl(conninfo, schema, int(digits), shown)


def _unquoted(message: str, password: str | None) -> str:
    """``message`` (libpq's, which quotes the token it could not parse) without the URL's
    password: a password with a bad percent-escape reached the error whole (audit61)."""
    if password:
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            message = message.replace(form, "***")
    return message


def lock_key(schema: str) -> int:
    """The advisory lock key every writer of ``schema``'s store takes (a signed 64-bit int)."""
    return int.from_bytes(digest(b"cpstore writer\0" + schema.encode())[:8], "little", signed=True)


def _existing_tables(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
    ).fetchall()
    return {str(r[0]) for r in rows}


def prepare_schema(
    conn: psycopg.Connection[Any], url: StoreUrl, *, readonly: bool, create: bool
) -> tuple[int, bool]:
    """Check (and make, or add missing tables to) the store's schema; its layout version,
    and whether the server keeps the refs table's row count (:mod:`pg_count`: installed
    here by a writable open, in the same transaction under the writer lock).

    A server older than :data:`MIN_SERVER_VERSION` is :class:`ServerVersionError` first.
    A new store is made only when ``create`` and not ``readonly`` and none of
    its tables exist; a schema holding some of them but no format record is
    refused as not a cpstore store.
    """
    where = url.shown
    if conn.closed or conn.broken:  # libpq then reports version 0: never "0.0.0 is too old"
        raise StoreConnectionError(
            "the connection to the server was lost while the store was opened", where=where
        )
    # The version the server sent when the connection started: no round trip.
    check_server_version(conn.info.server_version, where)
    try:
        with conn.transaction():
            # READ COMMITTED whatever the server's default_transaction_isolation: under
            # REPEATABLE READ the lock's statement took the snapshot before its wait, and
            # the kept count's install counted the refs as they stood before the writer
            # it waited for committed (review73).
            conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if not readonly:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(url.schema),))
            tables = _existing_tables(conn, url.schema)
            if "meta" not in tables:
                if tables & set(DB_NAMES):
                    raise refuse("a schema with store tables but no format record", where)
                if readonly or not create:
                    raise NotFoundError(
                        "no store in this database schema", where=where, expected=url.schema
                    )
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{url.schema}"')
            missing = [name for name in DB_NAMES if name not in tables]
            if missing and readonly and "meta" in tables:
                raise StoreError(
                    "the store lacks a table; open it writable once to add it",
                    where=where,
                    expected=missing,
                )
            for name in missing:
                conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{url.schema}"."{name}" '
                    "(k bytea PRIMARY KEY, v bytea NOT NULL)"
                )
            meta = f'"{url.schema}"."meta"'
            if "meta" not in tables:
                conn.execute(
                    f"INSERT INTO {meta} (k, v) VALUES (%s, %s)",
                    (FORMAT_KEY, encode_value(PG_FORMAT)),
                )
            row = conn.execute(f"SELECT v FROM {meta} WHERE k = %s", (FORMAT_KEY,)).fetchone()
            version = check_format(None if row is None else bytes(row[0]), where)
            if readonly:
                return version, counts_kept(conn, url.schema)
            _make_store_id(conn, meta)
            return version, install_counts(conn, url.schema)
    except psycopg.Error as exc:
        raise translate(exc, where, conn) from None


def _make_store_id(conn: psycopg.Connection[Any], meta: str) -> None:
    """Give the store its id when it has none (new, or made before store ids), under the
    writer lock. A role that may not write the store (or a read-only server) opens it
    writable as before and keeps none: its writes are refused anyway, and the nested-write
    check then knows it by its URL. The insert runs in a savepoint, so its refusal leaves
    the open's transaction usable."""
    if conn.execute(f"SELECT 1 FROM {meta} WHERE k = %s", (STORE_ID_KEY,)).fetchone():
        return
    try:
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {meta} (k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING",
                (STORE_ID_KEY, os.urandom(16)),
            )
    except (pg.InsufficientPrivilege, pg.ReadOnlySqlTransaction):
        pass


def write_identity(conn: psycopg.Connection[Any], url: StoreUrl) -> str:
    """What a write of the store at ``url`` is known by on its thread (pg_writing): its
    store id and database, read without the writer lock (this thread may hold it on another
    connection). Two spellings of one store's URL (another host name for the server, the
    parameters in another order, an added ``application_name``) are one store: a write
    nested through the other spelling waited for ever on the lock its own thread held.
    The URL's conninfo when the store has no id yet (new, or made before store ids) or it
    cannot be read; a connection lost meanwhile is raised (psycopg's error)."""
    try:
        row = conn.execute(
            f'SELECT v, current_database() FROM "{url.schema}"."meta" WHERE k = %s',
            (STORE_ID_KEY,),
        ).fetchone()
    except psycopg.Error:  # no such table (a new store), no right to read it
        if conn.broken:  # the connection was lost, not the id: the open says so (chaos67;
            raise  # the version check next read libpq's 0 and said "PostgreSQL 0.0.0")
        return url.conninfo
    return url.conninfo if row is None else f"store {bytes(row[0]).hex()} in {row[1]}"
