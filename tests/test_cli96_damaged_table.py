"""cli96: a damaged table record in the LMDB data file is damage (exit 5), never "store
unavailable" (exit 7).

A named table's root page number sits in its record in LMDB's main table. Pointing it
past the file (bit rot, a stray write) made:

* ``verify``, ``audit --check`` and ``compact`` say "LMDB failed ... MDB_BAD_TXN", exit 7:
  LMDB's ``mdb_stat`` reads a table's root without reporting that it could not, and the
  txn's next call fails; verify counted its entries before the walk that tells an LMDB
  error as a problem;
* ``copy`` say "LMDB could not copy the store", exit 7 (the compacting copy walks the
  trees and meets the page: MDB_PAGE_NOTFOUND).

Each is exit 5 now, the source left as it was and no copy left behind.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path

import pytest
from small_store import small_store

from cpstore import cli
from cpstore.store import lmdb_copy
from cpstore.store.lmdb_open import open_into

#: LMDB's MDB_db record: pad, flags, depth, then branch/leaf/overflow pages, entries, root.
_ROOT_AT = 40
_RECORD_SIZE = 48
_F_SUBDATA = 2


def _store(tmp_path: Path) -> str:
    return small_store(tmp_path, "store")


def _point_root_past_the_file(path: str, table: str) -> bytes:
    """Set ``table``'s root page number past the end of the file in every copy of its record
    (the main table's node: sizes, F_SUBDATA, key length, key, record); the file before."""
    data_path = os.path.join(path, "data.mdb")
    with open(data_path, "rb") as f:
        before = f.read()
    data = bytearray(before)
    key = table.encode()
    node = struct.pack("<HHHH", _RECORD_SIZE, 0, _F_SUBDATA, len(key)) + key
    at = data.find(node)
    assert at >= 0, f"no record of table {table!r} in the file"
    while at >= 0:
        struct.pack_into("<Q", data, at + len(node) + _ROOT_AT, 0x7FFFFFFF)
        at = data.find(node, at + 1)
    with open(data_path, "r+b") as f:
        f.write(data)
    return bytes(data)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("table", ["objects", "heap"])
def test_verify_reports_a_damaged_table_record_as_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    path = _store(tmp_path)
    damaged = _point_root_past_the_file(path, table)
    code, out, err = _run(["verify", "--store", path, "--json"], capsys)
    assert code == 5, err
    report = json.loads(out)
    assert report["ok"] is False and report["problems"]
    code, out, err = _run(["verify", "--store", path], capsys)
    assert code == 5, err
    assert "PROBLEM data.mdb" in out and "ok" not in out.split()
    code, out, err = _run(["audit", "--check", "--store", path], capsys)
    assert code == 5, err
    assert "STORE DAMAGED" in out
    assert Path(path, "data.mdb").read_bytes() == damaged  # only looked


@pytest.mark.parametrize("table", ["objects", "heap"])
def test_copy_of_a_store_with_a_damaged_table_record_is_damage_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    path = _store(tmp_path)
    damaged = _point_root_past_the_file(path, table)
    dest = tmp_path / "copy"
    code, out, err = _run(["copy", str(dest), "--store", path], capsys)
    assert code == 5, err
    assert out == "" and err.startswith("cpstore copy: ") and err.count("\n") == 1
    assert not dest.exists()
    code, _, err = _run(["compact", "--store", path], capsys)
    assert code == 5, err
    assert Path(path, "data.mdb").read_bytes() == damaged
    assert not Path(path, "compact.tmp").exists()


def test_compact_on_a_read_only_store_names_the_store_not_a_proc_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only file system (a bind mount, EROFS) at compact's lock file: exit 7 naming
    the store; it said "Read-only file system: /proc/self/fd/4/lock.mdb"."""
    path = _store(tmp_path)
    real = open_into

    def read_only(fds: list[int], at: str, flags: int, mode: int = 0o777) -> int:
        if at.endswith("lock.mdb") and flags & os.O_RDWR:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), at)
        return real(fds, at, flags, mode)

    monkeypatch.setattr(lmdb_copy, "open_into", read_only)
    before = Path(path, "data.mdb").read_bytes()
    code, out, err = _run(["compact", "--store", path], capsys)
    assert code == 7, err
    assert out == "" and "/proc/" not in err and path in err
    assert err.startswith("cpstore compact: the store cannot be written")
    assert Path(path, "data.mdb").read_bytes() == before
