"""pgcount72's test helpers: the refs count the server keeps, the rows, raw SQL on a store's
schema, and a store put back as a release before pgcount72 made it (no counts table, no
count triggers)."""

from __future__ import annotations

from typing import Any

import psycopg

from cpstore.store.pg_count import COUNTS_TABLE, TRIGGERS
from cpstore.store.pg_open import parse_url

__all__ = ["kept", "kept_and_rows", "rows", "sql", "strip_counts", "triggers"]


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Rows of ``statement`` (``{s}`` stands for the store's quoted schema), autocommitted
    on a connection of its own: behind cpstore's back."""
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cur = conn.execute(statement.replace("{s}", f'"{schema}"'), params)
        return cur.fetchall() if cur.description is not None else []


def kept(url: str) -> int | None:
    """The refs count in the counts table (None: no row)."""
    found = sql(url, "SELECT n FROM {s}.counts WHERE name = 'refs'")
    return None if not found else int(found[0][0])


def rows(url: str) -> int:
    """The refs table's rows, counted."""
    return int(sql(url, "SELECT count(*) FROM {s}.refs")[0][0])


def kept_and_rows(url: str) -> tuple[int | None, int]:
    """Both, in one snapshot."""
    [(n, real)] = sql(
        url,
        "SELECT (SELECT n FROM {s}.counts WHERE name = 'refs'), (SELECT count(*) FROM {s}.refs)",
    )
    return (None if n is None else int(n)), int(real)


def triggers(url: str) -> dict[str, str]:
    """The count triggers on the refs table: name -> ``tgenabled``."""
    got = sql(
        url,
        "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = to_regclass(%s) "
        "AND NOT tgisinternal",
        (f'"{parse_url(url).schema}"."refs"',),
    )
    return {str(name): str(state) for name, state in got}


def strip_counts(url: str) -> None:
    """Put the store back as a release before pgcount72 left it: no triggers, functions or
    counts table."""
    for name in TRIGGERS:
        sql(url, f'DROP TRIGGER IF EXISTS "{name}" ON {{s}}.refs')
        sql(url, f'DROP FUNCTION IF EXISTS {{s}}."{name}"()')
    sql(url, f'DROP TABLE IF EXISTS {{s}}."{COUNTS_TABLE}"')
