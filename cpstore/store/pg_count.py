"""The refs table's row count, kept by the server (pgcount72): O(1) for refs70's create check.

refs70's check (``refs._refuse_short``) counts the refs table before every ref it
creates; a ``count(*)`` is linear in the refs. A PostgreSQL store keeps the count in a
side table ``"<schema>"."counts"`` (``name text PRIMARY KEY, n bigint NOT NULL``, one
row per counted table: ``refs``), moved by statement triggers on the refs table itself:
``AFTER INSERT`` and ``AFTER DELETE`` with transition tables (the rows a statement
inserted or deleted, counted once per statement; an ``ON CONFLICT DO UPDATE`` that
updates inserts nothing) and ``AFTER TRUNCATE`` (which fires no row trigger: 0). The
server runs them for every writer, cpstore's or not: a raw ``DELETE``, ``TRUNCATE``,
``COPY`` or ``MERGE`` behind cpstore's back moves the count too, so the create check
still sees it. What evades them (triggers disabled, ``session_replication_role =
replica``) leaves a count that drifted from the rows; ``verify()`` compares the two.

:func:`install_counts` runs in the open's transaction under the writer lock
(``pg_open.prepare_schema``): a new store, or one a release before this made (or whose
triggers were disabled, dropped with its table, or whose row was deleted), gets the
table, the trigger functions and the triggers, and its count taken once by a
``count(*)`` while ``CREATE TRIGGER``'s lock keeps every other writer of the refs table
out until the open commits. The functions are ``SECURITY DEFINER`` (their owner's
rights, ``search_path`` pinned): a role that may write refs but was granted nothing on
``counts`` still moves the count. ``EXECUTE`` on them is revoked from PUBLIC: attached by
another role to a table of its own (a temp ``refs`` beside a ``counts`` carrying its own
trigger), a function ran that role's code with the owner's rights. A role that may not
create them (or a read-only server) reads the kept count when nothing is missing; when
something is, it opens as before, counting with ``count(*)``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg

__all__ = [
    "COUNTED",
    "COUNTS_TABLE",
    "COUNTS_VERSION",
    "TRIGGERS",
    "count_sql",
    "counts_kept",
    "counts_ready",
    "counts_table",
    "counts_version",
    "install_counts",
]

#: The side table holding the kept counts (not a named table of the store).
COUNTS_TABLE = "counts"
#: The version of the counts table, its functions and triggers (docs/format.md), written
#: as the table's comment (``cpstore counts 1``): an open finding an older one (or none)
#: installs them again; a newer one it leaves as it is.
COUNTS_VERSION = 1
_MARK = "cpstore counts "
#: The tables whose row count the server keeps.
COUNTED = ("refs",)
#: Trigger (and function) name -> (event, transition table clause, its body's change).
TRIGGERS = {
    "cpstore_count_added": ("INSERT", "REFERENCING NEW TABLE AS changed", "+"),
    "cpstore_count_removed": ("DELETE", "REFERENCING OLD TABLE AS changed", "-"),
    "cpstore_count_emptied": ("TRUNCATE", "", "0"),
}


def _q(schema: str, name: str) -> str:
    return f'"{schema}"."{name}"'


def counts_table(schema: str) -> str:
    """The counts table's qualified name."""
    return _q(schema, COUNTS_TABLE)


def count_sql(schema: str, name: str) -> str:
    """The kept count of table ``name``; its ``count(*)`` when the row is missing (deleted
    behind cpstore's back: exact, linear until the next writable open counts again)."""
    return (
        f"SELECT coalesce((SELECT n FROM {_q(schema, COUNTS_TABLE)} WHERE name = '{name}'), "
        f"(SELECT count(*) FROM {_q(schema, name)}))"
    )


def counts_kept(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the store has a counts table this role may read: a read-only open then reads
    the kept counts (what writers read; ``verify()`` compares them with the rows), the
    triggers enabled or not. A role granted ``SELECT`` on the store's tables before the
    counts table was made may not read it: it counts with ``count(*)``, as before."""
    row = conn.execute(
        "SELECT CASE WHEN to_regclass(%s) IS NULL THEN false "
        "ELSE has_table_privilege(to_regclass(%s), 'SELECT') END",
        (_q(schema, COUNTS_TABLE), _q(schema, COUNTS_TABLE)),
    )
    found = row.fetchone()
    return bool(found and found[0])


def counts_version(comment: str | None) -> int:
    """The version a counts table's comment names; 0 for none (or a comment not ours)."""
    if comment is None or not comment.startswith(_MARK):
        return 0
    digits = comment[len(_MARK) :]
    # ASCII digits only, a few of them (review83: a superscript, which str.isdigit takes
    # and int() refuses, or 5,000 digits made the open raise a bare ValueError).
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 9):
        return 0
    return int(digits)


def _newer(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the counts table carries a newer version than this release installs."""
    row = conn.execute(
        "SELECT obj_description(to_regclass(%s), 'pg_class')", (_q(schema, COUNTS_TABLE),)
    ).fetchone()
    return row is not None and counts_version(row[0]) > COUNTS_VERSION


def counts_ready(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the counts table (which this role may read: :func:`counts_kept`) carries
    this version or a newer one and every counted table has its triggers, enabled (``O``:
    origin and local sessions; ``A``: always) and its row."""
    row = conn.execute(
        "SELECT obj_description(to_regclass(%s), 'pg_class'), "
        "(SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = ANY(%s::regclass[]) "
        "AND t.tgname = ANY(%s) AND t.tgenabled IN ('O', 'A'))",
        (
            _q(schema, COUNTS_TABLE),
            [_q(schema, name) for name in COUNTED],
            list(TRIGGERS),
        ),
    ).fetchone()
    assert row is not None
    if counts_version(row[0]) < COUNTS_VERSION or row[1] != len(COUNTED) * len(TRIGGERS):
        return False
    kept = conn.execute(
        f"SELECT count(*) FROM {_q(schema, COUNTS_TABLE)} WHERE name = ANY(%s)", (list(COUNTED),)
    ).fetchone()
    return kept is not None and kept[0] == len(COUNTED)


def _function(schema: str, name: str, change: str) -> str:
    """A trigger function. The counts table is found through the schema of the table the
    trigger fired on (``TG_TABLE_SCHEMA``), never a schema name written into the body: a
    store renamed (``ALTER SCHEMA ... RENAME``) or restored from a dump into another schema
    beside its original moved the original's count (or failed every write of its refs)."""
    update = f"UPDATE %I.{COUNTS_TABLE} SET n = "
    if change == "0":
        body = f"EXECUTE format('{update}0 WHERE name = $1', TG_TABLE_SCHEMA) USING TG_TABLE_NAME;"
    else:
        body = (
            "SELECT count(*) INTO d FROM changed; "
            f"IF d <> 0 THEN EXECUTE format('{update}n {change} $1 WHERE name = $2', "
            "TG_TABLE_SCHEMA) USING d, TG_TABLE_NAME; END IF;"
        )
    return (
        f"CREATE OR REPLACE FUNCTION {_q(schema, name)}() RETURNS trigger LANGUAGE plpgsql "
        "SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS "
        f"$cpstore$ DECLARE d bigint; BEGIN {body} RETURN NULL; END $cpstore$"
    )


def install_counts(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Make the counts table, its functions and triggers, and take each count once, unless
    ready (:func:`counts_ready`); whether the counts are kept. Runs inside the open's
    transaction, under the writer lock (concurrent opens install once); in a savepoint,
    so a role that may not create them (or a read-only server) leaves that transaction
    usable and counts with ``count(*)``, as does one that may not read the counts table."""
    if counts_kept(conn, schema) and counts_ready(conn, schema):
        return True
    if counts_kept(conn, schema) and _newer(conn, schema):
        # A newer release's counts, not ready (a trigger disabled, its row deleted): left as
        # it is (docs/format.md), as this release cannot install that version; this handle
        # counts its creates with count(*). docs75: version 1 was installed over it.
        return False
    counts = _q(schema, COUNTS_TABLE)
    try:
        with conn.transaction():
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {counts} (name text PRIMARY KEY, n bigint NOT NULL)"
            )
            conn.execute(f"COMMENT ON TABLE {counts} IS '{_MARK}{COUNTS_VERSION}'")
            for fn, (_, _, change) in TRIGGERS.items():
                conn.execute(_function(schema, fn, change))
                # No one else may attach it to a table of their own: a SECURITY DEFINER
                # trigger on a role's temp table beside its own "counts" (with its own
                # trigger) ran that role's code with the owner's rights. Firing the
                # store's triggers needs no EXECUTE (checked when a trigger is made).
                conn.execute(f"REVOKE ALL ON FUNCTION {_q(schema, fn)}() FROM PUBLIC")
            for name in COUNTED:
                table = _q(schema, name)
                for fn, (event, transition, _) in TRIGGERS.items():
                    # CREATE OR REPLACE (14+): a disabled trigger comes back enabled, under
                    # SHARE ROW EXCLUSIVE (DROP TRIGGER would wait for every reader).
                    conn.execute(
                        f'CREATE OR REPLACE TRIGGER "{fn}" AFTER {event} ON {table} '
                        f"{transition} FOR EACH STATEMENT EXECUTE FUNCTION {_q(schema, fn)}()"
                    )
                # Taken after the triggers hold their lock on the table: no write of it
                # lands between this count and the open's commit.
                conn.execute(
                    f"INSERT INTO {counts} (name, n) SELECT %s, count(*) FROM {table} "
                    "ON CONFLICT (name) DO UPDATE SET n = EXCLUDED.n",
                    (name,),
                )
    except (pg.InsufficientPrivilege, pg.ReadOnlySqlTransaction):
        return False
    return counts_kept(conn, schema)
