"""The refs rows beside an absent ref, checked (refkey100): a damaged key may be this ref.

A ref row whose key took a flipped bit (``refs/run/main`` stored as ``refs/run/maio``)
fails its own 8-byte check (``refs.py``), but the row is not gone: the table's count is
kept, so ``refs._refuse_short`` does not see it, and the true key reads as absent. A
create of that key from nothing then started its run anew (a recorder's new root), and
``Store.ref`` answered None, as if the run had never been recorded.

Keys are ``run UTF-8 NUL branch UTF-8``, in byte order. A flip at byte ``i`` of a key
leaves the damaged key sharing the first ``i`` bytes with the true one, so every row
sorting between the two shares them too. :func:`neighbour_damage` checks, for an absent
``key``: every row of its run (keys starting ``run NUL``, up to :data:`RUN_ROWS` of
them), the row just before the run's rows and the row just after them; when the run holds
more rows than that, the rows just before and just after ``key`` itself instead of the
rest of its rows (the rows just before and just after the run's still checked: a big run
skipped the one after before review102). What this
catches: a flip in the branch part (the damaged row stays among its run's rows) while the
run holds at most :data:`RUN_ROWS` refs, else one with no other ref of the run between it
and ``key``; a flip in the NUL or a late byte of the run id when no other run's ref sorts
between the damaged row and the run's rows. What it cannot: a flip in an early byte of the
run id moves the row among other runs' refs (``thread-7`` stored as ``thread-3`` sorts by
``thread-3``'s refs), and a flip that makes the key match another valid name whose own
rows lie between. Those stay for ``verify()``, retention and push/pull (the full walk:
``ref_table.check_refs``). It improves detection; it does not make it complete (docs/store.md,
"Refs, branches, listing").

Cost: one hash per row checked, and on LMDB a cursor positioned twice (two B-tree
descents), on PostgreSQL one query (``PgTxn.near``; a run with more refs than
:data:`RUN_ROWS` falls back to the cursor, three queries more, and one cursor positioning
more on both engines for the row just past the run's), paid when a ref is created
from nothing or read as absent, never on a move or a present ref's read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cpstore.errors import IntegrityError
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.model import ref_where

__all__ = [
    "NEIGHBOUR",
    "RUN_ROWS",
    "flipped_from",
    "neighbour_damage",
    "refuse_damaged_neighbours",
]

#: The words every refusal of :func:`neighbour_damage` begins with (the damaged row named
#: right after the absent key: a log that keeps a message's first 300 characters keeps both).
NEIGHBOUR = "a damaged ref key may be this ref"

#: The rows of the absent ref's run checked in full; past this, the rows beside the key.
#: Each costs a hash (about 2.7 µs a row on LMDB, Python's part): 8 bound a create or a
#: miss in a run of many refs (a LangGraph thread's namespaces and forks) near 30 µs.
RUN_ROWS = 8

#: A row's own check: raises IntegrityError when it fails (``refs.unpack_ref``).
RowCheck = Callable[[bytes, Any], object]


def _walk(cur: Any, key: bytes, look: Callable[[], None]) -> None:
    """Check (``look``: the cursor's row) the rows described in the module docstring."""
    prefix = key[: key.index(0) + 1]  # run UTF-8 NUL
    if not cur.set_range(prefix):
        if cur.last():  # every row sorts before the run's: the last one is beside it
            look()
        return
    checked = 0
    while True:
        look()
        if not bytes(cur.key()).startswith(prefix):
            break  # the row just after the run's rows, checked
        checked += 1
        if not cur.next():
            break
        if checked == RUN_ROWS and bytes(cur.key()).startswith(prefix):
            # A run with more refs: its rows beside the key instead of all of them.
            if cur.set_range(key):
                look()
                if cur.prev():
                    look()
            elif cur.last():
                look()
            # And the row just past the run's rows, as in a smaller run (review102: a big
            # run's NUL or last run byte flipped sorted the ref there, unchecked).
            if cur.set_range(prefix[:-1] + b"\x01"):
                look()
            break
    if cur.set_range(prefix) and cur.prev():
        look()  # the row just before the run's rows


def neighbour_damage(
    txn: Any, refs_db: Any, key: bytes, check: RowCheck, *, layout: int = 2
) -> IntegrityError | None:
    """The damage beside absent ref ``key`` in the caller's txn, or None: the first row near
    it (module docstring) that fails ``check``, as an IntegrityError naming that row and
    saying a damaged ref key may be ``key``. ``layout`` 1 (a read-only handle on a store
    not yet upgraded): a bare id has no check to fail and is passed over."""
    key = bytes(key)
    if 0 not in key:
        return None  # not a ref key (ref_key always writes the NUL)

    seen: list[tuple[bytes, bytes]] = []  # the row that failed its check: key, value

    def checked(k: bytes, value: Any) -> None:
        if layout == 1 and len(value) == DIGEST_SIZE:
            return
        try:
            check(k, value)
        except IntegrityError:
            seen.append((k, bytes(value)))  # only on a failure: nothing more per row checked
            raise

    def look() -> None:
        checked(bytes(cur.key()), cur.value())

    near = getattr(txn, "near", None)  # PostgreSQL: the rows in one query (PgTxn.near)
    try:
        if near is not None:
            prefix = key[: key.index(0) + 1]
            rows = near(refs_db, prefix, prefix[:-1] + b"\x01", RUN_ROWS + 1)
            if sum(k.startswith(prefix) for k, _ in rows) <= RUN_ROWS:
                for k, v in rows:  # the row before the run's, its rows, the row after
                    checked(k, v)
                return None
        with txn.cursor(db=refs_db) as cur:
            _walk(cur, key, look)
    except IntegrityError as exc:
        try:  # its value checked under this key: it is this ref, its key damaged (review101)
            check(key, seen[0][1])
            this = f"; its value passes the check under {ref_where(key)}: it is that ref"
        except (IntegrityError, IndexError):
            true = flipped_from(*seen[0], check) if seen else None
            this = (
                ""
                if true is None
                else f"; its value passes the check under {ref_where(true)}, one bit of its "
                "key flipped: the row is that ref"
            )
        return IntegrityError(
            f"{NEIGHBOUR}: {ref_where(key)} is absent, and the ref row {exc.where} beside it "
            f"fails its check ({exc.what}){this}; it is not created from nothing nor read "
            "as absent: run verify, then repair_ref naming the ref the row is (cpstore "
            "repair-ref; docs/store.md, 'Repairing a damaged ref')",
            where=exc.where,
            expected=exc.expected,
            got=exc.got,
        )
    return None


def flipped_from(key: bytes, value: bytes, check: RowCheck) -> bytes | None:
    """The key one flipped bit away from ``key`` under which ``value`` passes ``check``
    (the ref a row failing its own check is, its key damaged: the name ``repair_ref``
    needs, which a key not UTF-8 does not give), or None (a value damaged, or more than
    one bit). Eight hashes per key byte (about 1 ms for a 64-byte key), paid only for a
    row that failed its check; a false name is one chance in 2^64 per key tried
    (review102)."""
    raw = bytearray(key)
    for i in range(len(raw)):
        for bit in (1, 2, 4, 8, 16, 32, 64, 128):
            raw[i] ^= bit
            other = bytes(raw)
            raw[i] ^= bit
            try:
                check(other, value)
            except IntegrityError:
                continue
            return other
    return None


def refuse_damaged_neighbours(
    txn: Any, refs_db: Any, key: bytes, check: RowCheck, *, layout: int = 2
) -> None:
    """:func:`neighbour_damage`, raised."""
    damage = neighbour_damage(txn, refs_db, key, check, layout=layout)
    if damage is not None:
        raise damage
