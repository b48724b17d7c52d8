"""cli99: a store whose ``meta`` table's name or format record is damaged is damage, exit 5.

A flipped byte in the ``meta`` table's name in LMDB's main table, in the format record's
key or in its value hid the record, and every open said "not a cpstore store (no cpstore
format record)", :class:`FormatVersionError`, exit 9: a damaged store told as another
program's file (damage98's flips, seed 135). When LMDB's main table names the store's
other tables the file is a cpstore store: :class:`IntegrityError`, exit 5, naming what is
missing. Another program's LMDB file and an empty folder keep their answers.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import lmdb
import pytest
from small_store import compact_small_store

import cpstore
from cpstore import cli
from cpstore.errors import FormatVersionError, IntegrityError, NotFoundError


def _damage(path: str, how: str) -> bytes:
    """One damage of the format record's way in; the data file after."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    if how == "meta name":  # the MDB_db record of "meta" in the main table, F_SUBDATA
        node = struct.pack("<HHHH", 48, 0, 2, 4) + b"meta"
        at = data.find(node)
        assert at >= 0
        while at >= 0:
            data[at + 8 : at + 12] = b"mfta"  # same place in the key order
            at = data.find(node, at + 1)
    elif how == "record key":
        at = data.find(b"format\x83")
        assert at >= 0
        data[at] ^= 0x04  # "bormat"
    else:  # one bit of the record's "cpstore"
        at = data.find(b"\xa6layout\xa7cpstore")
        assert at >= 0
        data[at + 9] ^= 0x01
    Path(data_path).write_bytes(data)
    return bytes(data)


_HOW = ["meta name", "record key", "record value"]


@pytest.mark.parametrize("readonly", [True, False])
@pytest.mark.parametrize("how", _HOW)
def test_an_open_of_a_store_whose_format_record_is_damaged_says_damage(
    tmp_path: Path, how: str, readonly: bool
) -> None:
    path = compact_small_store(tmp_path)
    damaged = _damage(path, how)
    with pytest.raises(IntegrityError) as told:  # was FormatVersionError, "not a cpstore store"
        cpstore.open(path, readonly=readonly)
    assert told.value.where == path
    assert "not a cpstore store" not in str(told.value)
    assert Path(path, "data.mdb").read_bytes()[: len(damaged)] == damaged  # nothing written


@pytest.mark.parametrize(
    "argv",
    [
        ("verify",),
        ("inspect", "run@main"),
        ("show", "run@main"),
        ("stats",),
        ("log",),
        ("log", "run"),
        ("diff", "run@main~1", "run@main"),
        ("copy", "DEST"),
        ("compact",),
        ("retained",),
        ("push", "DEST"),
    ],
)
def test_the_commands_say_damage_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    path = compact_small_store(tmp_path)
    damaged = _damage(path, "meta name")
    capsys.readouterr()  # the copy's line
    args = [str(tmp_path / "dest") if a == "DEST" else a for a in argv]
    code = cli.main([*args, "--store", path])
    out, err = capsys.readouterr()
    assert code == 5, err  # was 9, "not a cpstore store (no cpstore format record)"
    assert "no meta table" in err and path in err and "not a cpstore store" not in err, err
    assert out == ""
    assert Path(path, "data.mdb").read_bytes() == damaged


def _foreign(path: str, tables: tuple[str, ...]) -> None:
    """Another program's LMDB environment: a key in the main table and ``tables``."""
    env = lmdb.open(path, max_dbs=16)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"config", b"1")
            for name in tables:
                txn.put(b"k", b"v", db=env.open_db(name.encode(), txn=txn))
    finally:
        env.close()


@pytest.mark.parametrize("tables", [(), ("things",), ("objects", "refs", "audit")])
def test_another_programs_lmdb_file_is_still_not_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tables: tuple[str, ...]
) -> None:
    """A few table names like cpstore's do not make a store: exit 9 as before."""
    path = str(tmp_path / "foreign")
    _foreign(path, tables)
    for readonly in (True, False):
        with pytest.raises(FormatVersionError, match="no cpstore format record"):
            cpstore.open(path, readonly=readonly)
    assert cli.main(["stats", "--store", path]) == 9
    assert cli.main(["verify", "--store", path]) == 9
    assert "not a cpstore store" in capsys.readouterr().err


def test_an_empty_folder_is_still_no_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotFoundError):
        cpstore.open(str(empty), readonly=True)
    assert cli.main(["stats", "--store", str(empty)]) == 4
    assert cli.main(["verify", "--store", str(empty)]) == 4
    assert list(empty.iterdir()) == []
