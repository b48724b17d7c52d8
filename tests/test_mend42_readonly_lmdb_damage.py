"""Session 42: MDB_BAD_VALSIZE and MDB_INCOMPATIBLE met by a read of a damaged store are
damage (exit 5), not "store unavailable" (exit 7).

cli99's flip sweep (one byte of a compacted store XORed) left two seeds told as exit 7 by
``stats``: 771 set LEAF2 and META in the flags of the ``oloc`` table's leaf page (the read
then fails MDB_BAD_VALSIZE, "wrong DUPFIXED size"), 1243 changed the flags of the
``oloc`` table's record in LMDB's main table (MDB_INCOMPATIBLE). A read-only environment
meets neither from a caller's input (every name is checked first), so
``lmdb_errors.translate`` tells them as :class:`IntegrityError` there, as it does
MDB_BAD_TXN (bus97); a writable environment keeps them a StoreError.
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
from cpstore.errors import IntegrityError, StoreError
from cpstore.store.lmdb_errors import translate
from cpstore.store.stats import store_stats

_PAGE = 4096
_LEAF2_AND_META = 0x28


def _damage(path: str, how: str) -> None:
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    record = struct.pack("<HHHH", 48, 0, 2, 4) + b"oloc"  # its MDB_db in the main table
    at = data.find(record)
    assert at >= 0 and data.find(record, at + 1) < 0
    at += len(record)
    if how == "leaf page flags":  # seed 771: the oloc table's leaf (its root, depth 1)
        depth, root = (
            struct.unpack_from("<H", data, at + 6)[0],
            struct.unpack_from("<Q", data, at + 40)[0],
        )
        assert depth == 1, depth
        data[root * _PAGE + 10] ^= _LEAF2_AND_META
    else:  # seed 1243: the high byte of the oloc table's flags in its record
        data[at + 5] ^= 134
    Path(data_path).write_bytes(data)


@pytest.mark.parametrize("how", ["leaf page flags", "table record flags"])
def test_a_damaged_page_or_table_record_is_damage_not_unavailable(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = compact_small_store(tmp_path)
    _damage(path, how)
    with cpstore.open(path, readonly=True) as store, pytest.raises(IntegrityError) as told:
        store_stats(store)
    assert "corrupt" in str(told.value) and str(told.value.where) == path
    capsys.readouterr()
    for argv in (("stats",), ("inspect", "run@main"), ("verify",)):
        code = cli.main([*argv, "--store", path])
        err = capsys.readouterr().err
        assert code == 5, (argv, code, err)  # stats was 7: "LMDB failed"


@pytest.mark.parametrize("exc", [lmdb.BadValsizeError, lmdb.IncompatibleError])
def test_a_writable_environments_bad_valsize_stays_a_store_error(
    exc: type[lmdb.Error],
) -> None:
    """A write txn meets these from a size cpstore did not check (its own bug): not
    damage of the file."""
    err = translate(exc("mdb_put: test"), "/s")
    assert type(err) is StoreError
    assert type(translate(exc("mdb_get: test"), "/s", readonly=True)) is IntegrityError
