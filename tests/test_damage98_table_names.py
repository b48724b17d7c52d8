"""damage98: a table's name changed in LMDB's main table (a flipped byte) is damage.

Before, a read-only open said "the store lacks a named database; open it writable once to
add it", a StoreError (exit 7, "store unavailable"): damage told as unavailable, with advice
to write to the damaged store. bus97 saw it in 4 of 400 random flips, under every reading
command. Now a table the store's layout has (its format record says which) and the file
lacks is IntegrityError (exit 5) naming the table and the store; only a table added after
what the format record says (``audit_mac`` in a layout-1 store of the first build, the heap
tables before layout 5) is still the advice to open the store writable once.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import lmdb
import pytest
from small_store import compact_small_store, small_store

import cpstore
from cpstore import cli
from cpstore.errors import IntegrityError, StoreError
from cpstore.native.canonical import encode_value
from cpstore.store.stats import store_stats

#: Renamed so the main table's keys stay in order (LMDB then finds every other name).
_RENAMED = {"refs": "reft", "heap": "heaq", "ledgers": "ledgert", "audit_mac": "audit_mad"}


def _rename_table(path: str, table: str) -> bytes:
    """``table``'s name in the main table's leaf changed to ``_RENAMED[table]`` (same
    length, same place in the key order). The data file after."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    key = table.encode()
    node = struct.pack("<HHHH", 48, 0, 2, len(key)) + key  # an MDB_db record, F_SUBDATA
    at = data.find(node)
    assert at >= 0, table
    while at >= 0:
        data[at + 8 : at + 8 + len(key)] = _RENAMED[table].encode()
        at = data.find(node, at + 1)
    Path(data_path).write_bytes(data)
    return bytes(data)


@pytest.mark.parametrize("table", ["refs", "ledgers", "heap", "audit_mac"])
def test_a_read_only_open_of_a_store_missing_one_of_its_layouts_tables_is_damage(
    tmp_path: Path, table: str
) -> None:
    path = compact_small_store(tmp_path)
    damaged = _rename_table(path, table)
    with (
        pytest.raises(IntegrityError) as told,  # was StoreError, "open it writable once"
        cpstore.open(path, readonly=True) as store,
    ):
        store_stats(store)
    assert told.value.expected == table and told.value.where == path
    assert "writable once" not in str(told.value)
    assert Path(path, "data.mdb").read_bytes() == damaged  # only looked


@pytest.mark.parametrize(
    "argv",
    [
        ("stats",),
        ("log",),
        ("log", "run"),
        ("inspect", "run@main"),
        ("diff", "run@main", "run@main~1"),
        ("verify",),
        ("push", "DEST"),
        ("pull", "SOURCE"),
    ],
)
def test_the_reading_commands_say_damage_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    path = compact_small_store(tmp_path)
    damaged = _rename_table(path, "refs")
    capsys.readouterr()  # the copy's line
    other = str(tmp_path / "other")
    args = [other if a == "DEST" else path if a == "SOURCE" else a for a in argv]
    store = other if argv[0] == "pull" else path
    code = cli.main([*args, "--store", store])
    out, err = capsys.readouterr()
    assert code == 5, err  # was 7, "the store lacks a named database; open it writable once"
    assert "writable once" not in err and "'refs'" in err and path in err, err
    assert out == ""
    assert Path(path, "data.mdb").read_bytes() == damaged
    if os.path.exists(os.path.join(other, "data.mdb")):  # nothing of the damaged store landed
        with cpstore.open(other, readonly=True) as dest:
            assert dest.verify().ok and not dest.runs()


def _set_layout(path: str, version: int, drop: str) -> None:
    """The store's format record at ``version`` and its table ``drop`` removed (as a build
    before that table wrote it)."""
    env = lmdb.open(path, max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            txn.drop(env.open_db(drop.encode(), txn=txn), delete=True)
            fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
            txn.put(b"format", encode_value(fmt), db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def test_a_table_a_later_build_of_the_layout_added_is_still_the_advice(tmp_path: Path) -> None:
    """``audit_mac`` joined layout 1 without a version bump: a layout-1 store without it is
    sound (the first build's), and a writable open adds it; at any later layout its
    absence is damage."""
    old = small_store(tmp_path, "old")
    _set_layout(old, 1, "audit_mac")
    with pytest.raises(StoreError) as told:
        cpstore.open(old, readonly=True)
    assert type(told.value) is StoreError and "open it writable once" in str(told.value)
    newer = small_store(tmp_path, "newer")
    _set_layout(newer, 2, "audit_mac")
    with pytest.raises(IntegrityError):
        cpstore.open(newer, readonly=True)


def test_heap_tables_before_layout_5_are_not_required(tmp_path: Path) -> None:
    """A layout-4 store has no heap tables; read-only it opens as before (no damage)."""
    path = small_store(tmp_path, "s")
    env = lmdb.open(path, max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            fmt = {"layout": "cpstore", "version": 4, "digest": "xxh3-128"}
            txn.put(b"format", encode_value(fmt), db=env.open_db(b"meta", txn=txn))
            for name in ("heap", "oloc", "cloc"):
                txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
    finally:
        env.close()
    with cpstore.open(path, readonly=True) as store:
        assert store.runs() == ["run"]


@pytest.mark.parametrize("table", ["refs", "ledgers", "heap", "audit_mac"])
def test_a_writable_open_of_a_store_missing_one_of_its_layouts_tables_refuses(
    tmp_path: Path, table: str
) -> None:
    """The writable open added such a table empty, with no word: the store's refs (say)
    gone from sight, a gc then free to sweep every checkpoint they kept. Now it is
    IntegrityError naming the table, and the data file is left as it was."""
    path = compact_small_store(tmp_path)
    damaged = _rename_table(path, table)
    with pytest.raises(IntegrityError) as told:
        cpstore.open(path)
    assert told.value.expected == table and told.value.where == path
    assert Path(path, "data.mdb").read_bytes()[: len(damaged)] == damaged  # nothing added


def test_a_writable_open_still_adds_what_a_later_build_added(tmp_path: Path) -> None:
    """A layout-1 store of the first build (no ``audit_mac``) is upgraded by a writable
    open as before, the table added."""
    old = small_store(tmp_path, "old")
    _set_layout(old, 1, "audit_mac")
    cpstore.open(old).close()  # upgraded (a layout-1 store's refs rewritten too)
    env = lmdb.open(old, max_dbs=32, readonly=True)
    try:
        with env.begin() as txn:
            assert txn.get(b"audit_mac") is not None  # the table's record in the main table
    finally:
        env.close()
