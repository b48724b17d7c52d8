"""Which tables an LMDB store's main table names, and what a missing one means: damage or not.

A store is told from another program's LMDB file by its format record (``meta/format``,
:mod:`cpstore.store.lmdb_open`). A flipped byte in the ``meta`` table's name in LMDB's
main table, or in the record, hid the record, and the open said "not a cpstore store",
exit 9: damage told as a foreign file, sending an operator to the wrong tool. The other
tables' names in the main table tell the two apart: a file naming cpstore's tables is a
damaged store (:class:`IntegrityError`, exit 5), one naming none of them another
program's (:class:`FormatVersionError`, as before). Imports no ``lmdb``: it reads
through the transaction the open holds.
"""

from __future__ import annotations

from typing import Any

from cpstore.errors import CpstoreError, FormatVersionError, IntegrityError, StoreError

__all__ = ["STORE_TABLES", "missing_table", "refuse", "store_tables_in", "without_format"]

#: The tables every readable layout has beside ``meta`` (``audit_mac`` and the heap tables
#: joined later: docs/store.md, "Named databases").
STORE_TABLES = ("audit", "audit_index", "checkpoints", "ledgers", "objects", "refs", "tombstones")

#: A file naming at least this many of :data:`STORE_TABLES` is a cpstore store: one
#: name may be damaged with the format record's (or the other program's file may
#: happen to hold one or two such names: never six of these seven).
_STORE_SIGN = len(STORE_TABLES) - 1

#: How many of the main table's keys are looked at: a store's has a dozen, another
#: program's main table may hold any number of keys of its own.
_LOOKED = 64


def refuse(what: str, where: str) -> FormatVersionError:
    """What is at ``where`` is not a cpstore store (exit 9)."""
    return FormatVersionError(
        f"not a cpstore store ({what})", where=where, expected="a cpstore store"
    )


def store_tables_in(txn: Any) -> list[str]:
    """The names of :data:`STORE_TABLES` among the first keys of the main table ``txn`` sees.

    Walked with a cursor, not looked up one by one: a damaged name may break the keys'
    order, which a lookup's search relies on."""
    found: list[str] = []
    cursor = txn.cursor()
    try:
        for looked, key in enumerate(cursor.iternext(keys=True, values=False)):
            if looked >= _LOOKED:
                break
            name = bytes(key).decode("ascii", "replace")
            if name in STORE_TABLES and name not in found:
                found.append(name)
    finally:
        cursor.close()
    return found


def without_format(what: str, path: str, txn: Any, *, no_meta: bool = False) -> CpstoreError:
    """An open found no readable format record (``what`` says how; ``no_meta``: no
    ``meta`` table at all): damage when LMDB's main table names cpstore's tables, else
    not a cpstore store (another program's file). ``txn``: a read or write txn of the
    environment (its main table is read)."""
    present = store_tables_in(txn)
    if len(present) < _STORE_SIGN:
        return refuse(what, path)
    told = "no meta table" if no_meta else what
    return IntegrityError(
        f"the data file is damaged: {told}, though LMDB's main table names the store's "
        "other tables (the meta table's name or its format record was changed); restore "
        "the store from a copy",
        where=path,
        expected="the meta table and its format record",
        got=f"{told}; tables {', '.join(present)}",
    )


#: Tables a sound store of a layout may lack (docs/store.md, "Store layout versions"):
#: ``audit_mac`` joined layout 1 a build after its first, with no version bump (11d4558).
#: Every other table ``open_dbs_readonly`` is asked for is in every readable layout;
#: the heap tables (layout 5 on) are ``open_tables``' ``required``.
_LATER_IN_LAYOUT = {1: frozenset({"audit_mac"})}


def missing_table(name: str, path: str, layout: int | None) -> CpstoreError:
    """A table an open found missing: damage (damage98) unless a build after the
    store's ``layout`` (None: a layout known to have it) added it. Its name in LMDB's main
    table changed (a flipped byte) was "open it writable once to add it", exit 7, and a
    writable open then added the table empty: the store's refs, say, gone from sight."""
    if layout is not None and name in _LATER_IN_LAYOUT.get(layout, ()):
        return StoreError(
            "the store lacks a named database; open it writable once to add it",
            where=path,
            expected=name,
        )
    return IntegrityError(
        "the data file is damaged: a table its store layout has is missing (its name in "
        "LMDB's main table was changed); restore the store from a copy (a writable open "
        "would add the table empty)",
        where=path,
        expected=name,
        got="no such table" + ("" if layout is None else f" in a layout-{layout} store"),
    )
